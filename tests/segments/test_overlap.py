"""A task's own segment work overlapping with itself: segments checked behind the encode are checked as a verify
checks them, damage included (the writer's own overlap is held to its plain path in tests/codec/test_writer.py)."""

from __future__ import annotations

from airflow_rbak.codec import BackupRecord, Compression, QueueBackup, SegmentWriter, encode_record
from airflow_rbak.codec.layout import segment_key
from airflow_rbak.segments import stages
from airflow_rbak.segments.overlap import CheckBehind
from airflow_rbak.storage import open_storage
from tests.spark_jobs.test_segment_stages import ENCODE, refs, staged


def test_segments_checked_behind_the_encode_are_checked_as_a_verify_checks_them(tmp_path):
    url = (tmp_path / "store").as_uri()
    staged(url)

    report = stages.encode_here(url, "b1", refs(), stages.SegmentWork(ENCODE, "deep"))

    entries = [QueueBackup.from_json(q) for q in report.details["queues"]]
    afterwards = stages.verify_queues(url, entries, stages.SegmentWork(ENCODE, "deep"))
    without_time = [{k: v for k, v in r.items() if k != "seconds"} for r in report.details["verify"]]
    assert without_time == [{k: v for k, v in r.items() if k != "seconds"} for r in afterwards]
    assert len(without_time) == report.summary["segments"] > 3 and all(r["ok"] for r in without_time)


def test_a_segment_damaged_once_stored_is_reported_by_the_check_behind(tmp_path):
    storage = open_storage((tmp_path / "store").as_uri())
    writer = SegmentWriter(segment_max_bytes=1000)
    made = [BackupRecord(body=b"m%d" % i, backed_up_at=1_000 + i, source_queue="q", source_vhost="v") for i in range(50)]
    sealed = [s for r in made for s in writer.add_encoded(encode_record(r), r.backed_up_at)]
    with CheckBehind(storage, 1 << 20) as checker:
        for sequence, segment in enumerate(sealed[:2], start=1):
            key = segment_key("b1", "v", "q", sequence, Compression.ZSTD)
            data = bytearray(segment.data)
            if sequence == 2:
                data[40] ^= 0xFF
            storage.put(key, bytes(data))
            checker.stored("v", "q", segment.metadata(key, sequence).to_json())
        results = checker.results()
    assert [r["ok"] for r in results] == [True, False]
    assert results[1]["defects"] and "SHA-256" in results[1]["defects"][0]
