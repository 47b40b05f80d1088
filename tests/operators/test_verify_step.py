"""The verify step's quick mode: every listed segment present with its recorded size, in process."""

from __future__ import annotations

from airflow_rbak.codec import QueueBackup, SegmentMetadata
from airflow_rbak.operators.spark_steps import quick_check
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage


def test_quick_check_collects_missing_and_wrong_sized_segments(tmp_path):
    storage = open_storage((tmp_path / "b").as_uri())
    segments = [SegmentMetadata(f"b/queues/q/segment-00000{i}.rbak", i, 1, 4, 4, 1, 1, "0" * 64) for i in (1, 2, 3)]
    storage.put(segments[0].key, b"1234")
    storage.put(segments[1].key, b"12345")
    key = JobReport("encode", "b", storage.url, details={"queues": [QueueBackup("/", "q", "classic", segments).to_json()]}).save(storage)

    summary = quick_check(storage, key)

    assert summary["segments_checked"] == 3 and not summary["ok"]
    assert [d["key"][-20:] for d in summary["defects"]] == [segments[1].key[-20:], segments[2].key[-20:]]
    assert summary["defects"][1]["reason"] == "missing"
