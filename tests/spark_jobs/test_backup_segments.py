"""The encode job: staging to final segments, in ranges, idempotently."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.segments import encode as er
from airflow_rbak.segments.jobs import backup_segments, common
from airflow_rbak.segments.reports import load_report
from airflow_rbak.storage import open_storage
from tests.spark_jobs.conftest import submit
from tests.spark_jobs.local_spark import LocalSpark
from tests.spark_jobs.staging import read_queue_independently, stage_queue


def encode(url: str, *args: str) -> dict:
    """Run the job in-process (LocalSpark) and return its report as stored."""
    report = backup_segments.run(LocalSpark(), backup_segments.parse_args(["--storage-url", url, "--backup-id", "b1", *args]))
    return json.loads(json.dumps(report.to_json()))


def mtimes(tmp_path) -> dict[str, int]:
    """Modification times of the stored segments of the test's ``store`` folder, by key."""
    root = tmp_path / "store"
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in (root / "b1" / "queues").rglob("segment-*")}


@pytest.fixture
def url(tmp_path) -> str:
    return (tmp_path / "store").as_uri()


def test_single_range_queue_is_encoded_exactly_as_in_process(url, tmp_path):
    storage = open_storage(url)
    stage_queue(storage, "b1", "/", "orders", 3000, chunk_records=400)
    reference = open_storage((tmp_path / "ref").as_uri())
    for info in storage.list("b1/"):  # staging and its checkpoint
        reference.put(info.key, storage.get(info.key))

    report = encode(url, "--segment-max-bytes", "60000")
    expected, _, _ = er.encode_queue_here(reference, "b1", er.QueueRef("/", "orders"), er.EncodeSpec(segment_max_bytes=60000))

    got = report["details"]["queues"][0]
    assert [s["key"] for s in got["segments"]] == [s.key for s in expected.segments]
    assert [s["checksum"] for s in got["segments"]] == [s.checksum for s in expected.segments]
    assert report["summary"]["ranges"] == 1


def test_ranges_of_a_big_queue_number_contiguously_and_keep_capture_order(url):
    storage = open_storage(url)
    staged = stage_queue(storage, "b1", "prod", "big/q", 12000, chunk_records=500)

    report = encode(url, "--segment-max-bytes", "50000", "--range-bytes", "20000")

    sequences, records = read_queue_independently(storage, "b1", "prod", "big/q")
    assert report["summary"]["ranges"] > 3
    assert sequences == list(range(1, len(sequences) + 1))
    assert records == [json.loads(raw) for raw in staged]
    assert [s["sequence"] for s in report["details"]["queues"][0]["segments"]] == sequences


def test_rerun_rewrites_nothing_and_a_settings_change_removes_stale_segments(url, tmp_path):
    storage = open_storage(url)
    stage_queue(storage, "b1", "/", "q", 4000, chunk_records=300)
    first = encode(url, "--segment-max-bytes", "20000", "--range-bytes", "5000")
    stamps = mtimes(tmp_path)

    again = encode(url, "--segment-max-bytes", "20000", "--range-bytes", "5000")
    assert again["details"]["queues"] == first["details"]["queues"]
    assert again["summary"]["segments_written"] == 0
    assert mtimes(tmp_path) == stamps

    bigger = encode(url, "--segment-max-bytes", "400000", "--write-manifest")
    assert bigger["summary"]["stale_removed"] == len(stamps) - bigger["summary"]["segments"] > 0
    assert validate_backup(storage, "b1", deep=True).valid


def test_declared_queue_types_and_empty_queues_reach_the_manifest(url):
    storage = open_storage(url)
    stage_queue(storage, "b1", "/", "a", 10)
    queues = '[{"vhost": "/", "name": "a", "queue_type": "quorum"}, {"vhost": "v", "name": "empty", "queue_type": "stream"}]'

    report = encode(url, "--queues-json", queues, "--compression", "lz4")
    manifest = er.manifest_from_encode_report(report, completed_at=123)

    assert [(q.vhost, q.name, q.queue_type, q.message_count) for q in manifest.queues] == [
        ("/", "a", "quorum", 10), ("v", "empty", "stream", 0)]
    assert manifest.queues[0].segments[0].key.endswith("segment-0001.lz4")
    assert manifest.total_messages == 10 and manifest.completed_at == 123


def test_count_pass_agrees_with_the_write_pass(url):
    storage = open_storage(url)
    stage_queue(storage, "b1", "/", "q", 3000, chunk_records=250)
    settings = er.EncodeSpec(segment_max_bytes=30000, segment_max_interval_ms=200)
    for rng in er.plan_ranges("/", "q", er.discover_staging(storage, "b1")[("/", "q")], 8000):
        written = er.encode_range(url, "b1", rng, 1, settings)
        assert er.count_range_segments(url, rng, settings) == len(written.segments)


def test_bad_settings_are_refused_before_any_work(url):
    for bad in (["--level", "0"], ["--segment-max-bytes", "0"], ["--queues-json", "{}"], ["--backup-id", "../x"]):
        with pytest.raises(SystemExit) as exit_info:
            backup_segments.parse_args(["--storage-url", url, "--backup-id", "b1", *bad])
        assert exit_info.value.code == 2


def test_damaged_staging_fails_with_a_report_naming_the_chunk(url, monkeypatch, capsys):
    storage = open_storage(url)
    stage_queue(storage, "b1", "/", "q", 100)
    key = "b1/staging/_default/q/chunk-00000001.zst"
    storage.put(key, storage.get(key)[:-3])
    monkeypatch.setattr(common, "spark_session", lambda name: LocalSpark())

    code = common.main("encode", backup_segments.parse_args, backup_segments.run, ["--storage-url", url, "--backup-id", "b1"])

    report = load_report(storage, capsys.readouterr().out.strip().splitlines()[-1], "encode")
    assert code == common.EXIT_FAILED and not report["ok"]
    assert key in report["summary"]["error"]
    assert not list(storage.list("b1/queues/"))


@pytest.mark.spark
def test_spark_encode_of_three_queues_writes_each_in_capture_order(tmp_path, spark_submit_available):
    """Through spark-submit; a re-run's idempotence is the same code, held in-process by
    ``test_rerun_rewrites_nothing_and_a_settings_change_removes_stale_segments``."""
    url = (tmp_path / "store").as_uri()
    storage = open_storage(url)
    staged = {
        ("/", "big"): stage_queue(storage, "b1", "/", "big", 60_000),
        ("prod", "orders/eu"): stage_queue(storage, "b1", "prod", "orders/eu", 3000, chunk_records=700),
        ("prod", "small"): stage_queue(storage, "b1", "prod", "small", 10),
    }
    args = ["--segment-max-bytes", str(1024 * 1024), "--range-bytes", "200000", "--write-manifest"]

    first = submit("backup_segments", url, "b1", *args)
    assert first.returncode == 0, first.stderr

    summary = first.report["summary"]
    (build,) = summary["executor_codec"]  # the report says which codec build ran on the executors
    assert build["rbak"] and build["python"] and build["zstandard"] and isinstance(build["speedups"], bool)
    assert summary["queues"] == 3 and summary["messages"] == 60_000 + 3000 + 10 and summary["ranges"] > 3
    for (vhost, queue), records in staged.items():
        sequences, decoded = read_queue_independently(storage, "b1", vhost, queue)
        assert sequences == list(range(1, len(sequences) + 1))
        assert decoded == [json.loads(raw) for raw in records]
    assert len(read_queue_independently(storage, "b1", "/", "big")[0]) > 5
    assert validate_backup(storage, "b1", deep=True).valid
