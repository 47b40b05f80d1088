"""A backup's segment stages: the same keys and bytes in a task's process and on Spark, compaction that keeps
every record in order, checks that find damage, and where the work runs."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.codec import QueueBackup
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.segments import encode as er
from airflow_rbak.segments import stages
from airflow_rbak.segments.jobs import backup_segments
from airflow_rbak.segments.reports import MAX_REPORT_BYTES, ReportError, load_report
from airflow_rbak.storage import open_storage
from tests.spark_jobs.conftest import submit
from tests.spark_jobs.local_spark import LocalSpark
from tests.spark_jobs.staging import read_queue_independently, stage_queue

#: Small segments and ranges, so a queue spans several ranges (forced cuts) and several segments per range.
ENCODE = er.EncodeSpec(segment_max_bytes=60_000, range_bytes=20_000)
ARGS = ["--segment-max-bytes", "60000", "--range-bytes", "20000"]
QUEUES = {("/", "big"): 9000, ("prod", "orders/eu"): 1200, ("prod", "empty"): 0}


def staged(url: str) -> dict[tuple[str, str], list[bytes]]:
    storage = open_storage(url)
    return {key: stage_queue(storage, "b1", *key, count, chunk_records=400) for key, count in QUEUES.items() if count}


def refs() -> list[er.QueueRef]:
    return [er.QueueRef(vhost, name, "quorum" if name == "big" else "classic") for vhost, name in QUEUES]


def segment_bytes(url: str) -> dict[str, bytes]:
    storage = open_storage(url)
    return {i.key: storage.get(i.key) for i in storage.list("b1/queues/")}


def test_in_process_stages_write_every_record_in_order_and_check_each_segment(tmp_path):
    url = (tmp_path / "store").as_uri()
    records = staged(url)

    report = stages.encode_here(url, "b1", refs(), stages.SegmentWork(ENCODE, "deep"))

    storage = open_storage(url)
    for (vhost, queue), expected in records.items():
        sequences, decoded = read_queue_independently(storage, "b1", vhost, queue)
        assert sequences == list(range(1, len(sequences) + 1))
        assert decoded == [json.loads(raw) for raw in expected]
    assert len(read_queue_independently(storage, "b1", "/", "big")[0]) > 3
    summary = report.summary
    assert report.ok and summary["messages"] == sum(QUEUES.values()) and summary["queues"] == 3
    assert summary["verify"]["mode"] == "deep" and summary["verify"]["segments_checked"] == summary["segments"]
    assert {q["name"]: q["queue_type"] for q in report.details["queues"]} == {"big": "quorum", "orders/eu": "classic",
                                                                             "empty": "classic"}
    assert next(q for q in report.details["queues"] if q["name"] == "empty")["segments"] == []


@pytest.mark.spark
def test_one_staging_encoded_in_process_and_on_spark_gives_the_same_keys_and_bytes(tmp_path, spark_submit_available):
    here, there = (tmp_path / "here").as_uri(), (tmp_path / "there").as_uri()
    staged(here)
    for info in open_storage(here).list("b1/"):  # the very same staging and checkpoints, object for object
        open_storage(there).put(info.key, open_storage(here).get(info.key))

    in_process = stages.encode_here(here, "b1", refs(), stages.SegmentWork(ENCODE, "deep"))
    queues = json.dumps([{"vhost": r.vhost, "name": r.name, "queue_type": r.queue_type} for r in refs()])
    on_spark = submit("backup_segments", there, "b1", *ARGS, "--queues-json", queues)

    assert on_spark.returncode == 0, on_spark.stderr
    assert on_spark.report["summary"]["verify"] == {**on_spark.report["summary"]["verify"], "ok": True,
                                                   "segments_failed": 0, "mode": "deep"}
    assert on_spark.report["summary"]["ranges"] > 3
    written = segment_bytes(here)
    assert len(written) == in_process.summary["segments"] > 3
    assert segment_bytes(there) == written
    assert on_spark.report["details"]["queues"] == in_process.details["queues"]


@pytest.mark.parametrize("where", ["process", "spark-driver"])
def test_compaction_merges_the_cuts_between_ranges_and_keeps_every_record(tmp_path, where):
    url = (tmp_path / "store").as_uri()
    records = staged(url)
    work = stages.SegmentWork(er.EncodeSpec(segment_max_bytes=16_000_000, range_bytes=20_000), "deep",
                              compact_below_bytes=16_000_000)
    plain = (tmp_path / "plain").as_uri()
    staged(plain)  # the same records, encoded without compaction: the ranges' forced cuts stay
    uncompacted = stages.encode_here(plain, "b1", refs(), stages.SegmentWork(work.encode, "none"))
    assert len(read_queue_independently(open_storage(plain), "b1", "/", "big")[0]) > 1

    if where == "process":
        report = stages.encode_here(url, "b1", refs(), work)
    else:
        args = backup_segments.parse_args(["--storage-url", url, "--backup-id", "b1", "--segment-max-bytes", "16000000",
                                           "--range-bytes", "20000", "--compact-below-bytes", "16000000",
                                           "--queues-json", json.dumps([{"vhost": r.vhost, "name": r.name} for r in refs()])])
        report = backup_segments.run(LocalSpark(), args)

    storage = open_storage(url)
    sequences, decoded = read_queue_independently(storage, "b1", "/", "big")
    assert decoded == [json.loads(raw) for raw in records[("/", "big")]]
    assert sequences == [1]  # the ranges' forced cuts merged into one segment under the size limit
    assert sorted(segment_bytes(url)) == sorted(s["key"] for q in report.details["queues"] for s in q["segments"])
    assert report.ok and report.summary["verify"]["segments_checked"] == report.summary["segments"] == 2
    assert report.details["removed_stale"]  # the merged-away segments and the interim copies are gone
    assert report.summary["messages"] == uncompacted.summary["messages"]


def test_the_checks_find_a_damaged_or_missing_segment(tmp_path):
    url = (tmp_path / "store").as_uri()
    staged(url)
    report = stages.encode_here(url, "b1", refs(), stages.SegmentWork(ENCODE, "none"))
    entries = [QueueBackup.from_json(q) for q in report.details["queues"]]
    storage = open_storage(url)
    first, second = entries[0].segments[0].key, entries[0].segments[1].key
    data = bytearray(storage.get(first))
    data[-10] ^= 0xFF
    storage.put(first, bytes(data))
    storage.delete(second)

    deep = stages.verify_queues(url, entries, stages.SegmentWork(ENCODE, "deep"))
    quick = stages.verify_queues(url, entries, stages.SegmentWork(ENCODE, "quick"))

    assert {r["key"] for r in deep if not r["ok"]} == {first, second}
    assert {r["key"]: r["defects"] for r in quick if not r["ok"]} == {second: ["missing"]}  # same size: quick misses it
    assert not report.summary["verify"]["segments_checked"]  # "none" checks nothing


def test_placement_keeps_small_queues_in_process_unless_forced():
    auto = stages.Placement("auto", 1000)
    assert auto.in_process(1000) and not auto.in_process(1001)
    assert stages.Placement("process", 0).in_process(10**12)
    assert not stages.Placement("spark", 10**12).in_process(0)
    with pytest.raises(ConfigurationError, match="one of"):
        stages.Placement("gpu")
    with pytest.raises(ConfigurationError, match="non-negative"):
        stages.Placement("auto", -1)
    with pytest.raises(ConfigurationError, match="verify"):
        stages.SegmentWork(ENCODE, "paranoid")


def test_a_capture_tasks_report_counts_only_if_made_with_the_same_settings_and_clean(tmp_path):
    url = (tmp_path / "store").as_uri()
    staged(url)
    work = stages.SegmentWork(ENCODE, "deep")
    ref = er.QueueRef("prod", "orders/eu")
    done = stages.encode_captured(url, "b1", ref, work, stages.Placement("auto"))
    storage = open_storage(url)

    assert done is not None and done["verify"]["ok"]
    assert done["report_key"] == stages.queue_report_key("b1", "prod", "orders/eu")
    assert stages.load_part(storage, "b1", "prod", "orders/eu", work)["details"]["queues"][0]["name"] == "orders/eu"
    assert stages.load_part(storage, "b1", "prod", "orders/eu", stages.SegmentWork(ENCODE, "quick")) is None
    assert stages.load_part(storage, "b1", "prod", "missing", work) is None
    assert stages.encode_captured(url, "b1", er.QueueRef("/", "big"), work, stages.Placement("auto", 10)) is None


def test_a_report_in_the_location_that_speaks_for_other_queues_or_backups_is_not_taken(tmp_path):
    url = (tmp_path / "store").as_uri()
    staged(url)
    work = stages.SegmentWork(ENCODE, "deep")
    done = stages.encode_captured(url, "b1", er.QueueRef("prod", "orders/eu"), work, stages.Placement("auto"))
    storage = open_storage(url)
    genuine = json.loads(storage.get(done["report_key"]))
    other = {"vhost": "prod", "name": "planted", "queue_type": "classic", "segments": []}
    plantings = {
        "another queue too": {**genuine, "details": {**genuine["details"], "queues": [*genuine["details"]["queues"], other]}},
        "another queue only": {**genuine, "details": {**genuine["details"], "queues": [other]}},
        "another backup": {**genuine, "backup_id": "b2"},
        "not ok": {**genuine, "ok": False},
        "not a dict of queues": {**genuine, "details": {"queues": "everything"}},
    }
    for why, planted in plantings.items():
        storage.put(done["report_key"], json.dumps(planted).encode())
        assert stages.load_part(storage, "b1", "prod", "orders/eu", work) is None, why
    storage.put(done["report_key"], b"\x00 not json")
    assert stages.load_part(storage, "b1", "prod", "orders/eu", work) is None


def test_a_report_larger_than_any_report_is_refused_unread(tmp_path):
    url = (tmp_path / "store").as_uri()
    staged(url)
    work = stages.SegmentWork(ENCODE, "deep")
    done = stages.encode_captured(url, "b1", er.QueueRef("prod", "orders/eu"), work, stages.Placement("auto"))
    planted = tmp_path / "store" / done["report_key"]
    with planted.open("r+b") as report:  # sparse: a genuine report followed by a hole past the bound
        report.truncate(MAX_REPORT_BYTES + 1)

    with pytest.raises(ReportError, match=f"over the {MAX_REPORT_BYTES} bytes a report may hold; not read"):
        load_report(open_storage(url), done["report_key"])
    assert stages.load_part(open_storage(url), "b1", "prod", "orders/eu", work) is None


def test_a_dense_report_is_refused_before_it_is_parsed(tmp_path):
    storage = open_storage((tmp_path / "store").as_uri())
    storage.put("b1/reports/encode-planted.json", b"[" + b"{}," * (8 * 1024**2 // 3) + b"{}]")  # 2.8 million objects

    with pytest.raises(ReportError, match="JSON values, over the 3000000 a report may hold"):
        load_report(storage, "b1/reports/encode-planted.json")
