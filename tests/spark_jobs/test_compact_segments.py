"""The compact job: small segments merged, re-sequenced, with a manifest swap that survives crashes."""

from __future__ import annotations

import dataclasses
import random

import pytest

from airflow_rbak.codec.layout import interim_segment_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.segments import compact as cp
from airflow_rbak.segments.jobs import compact_segments
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter
from tests.spark_jobs.conftest import submit
from tests.spark_jobs.local_spark import LocalSpark
from tests.spark_jobs.staging import make_record, read_queue_independently

MAX = 25_000


class Crashed(Exception):
    pass


def build_backup(url: str, small_segments: int = 50) -> None:
    """Queue ``/``/``chatty``: about ``small_segments`` segments of 2 kB; ``/``/``bulk``: 3 large ones."""
    writer = BackupWriter(open_storage(url), "b1", segment_max_bytes=2000)
    sink = writer.queue("/", "chatty", "quorum")
    for i in range(small_segments * 2000 // 230):
        sink.add(make_record("/", "chatty", i))
    sink.close()
    bulk = writer.queue("/", "bulk")
    for i in range(3):  # one incompressible record per segment: each well above the 5 kB threshold
        bulk.add(dataclasses.replace(make_record("/", "bulk", i), body=random.Random(i).randbytes(6000)))
    bulk.close()
    writer.finish()


def compact(url: str, *args: str) -> dict:
    argv = ["--storage-url", url, "--backup-id", "b1", "--threshold-bytes", "5000", "--segment-max-bytes", str(MAX), *args]
    return compact_segments.run(LocalSpark(), compact_segments.parse_args(argv)).to_json()


def expected_groups(sizes: list[int], limit: int) -> int:
    """Greedy packing of consecutive payload sizes under ``limit``: the number of segments it yields."""
    groups, total = 0, None
    for size in sizes:
        if total is not None and total + size <= limit:
            total += size
        else:
            groups, total = groups + 1, size
    return groups


@pytest.fixture
def url(tmp_path) -> str:
    return (tmp_path / "store").as_uri()


def test_small_segments_merge_into_the_few_the_limits_imply(url):
    build_backup(url)
    storage = open_storage(url)
    before = ManifestStore(storage).load("b1")
    chatty = before.queue("/", "chatty")
    _, records = read_queue_independently(storage, "b1", "/", "chatty")
    assert len(chatty.segments) >= 50

    report = compact(url)

    after = ManifestStore(storage).load("b1")
    sequences, merged = read_queue_independently(storage, "b1", "/", "chatty")
    assert len(after.queue("/", "chatty").segments) == expected_groups([s.uncompressed_bytes for s in chatty.segments], MAX)
    assert sequences == list(range(1, len(after.queue("/", "chatty").segments) + 1))
    assert merged == records
    assert after.queue("/", "bulk").to_json() == before.queue("/", "bulk").to_json()
    assert after.total_messages == before.total_messages and after.completed_at == before.completed_at
    assert report["summary"]["queues_compacted"] == 1
    assert validate_backup(storage, "b1", deep=True).valid


def test_plan_keeps_large_segments_and_renumbers_what_follows_a_merge(url):
    build_backup(url, small_segments=6)
    manifest = ManifestStore(open_storage(url)).load("b1")
    chatty = manifest.queue("/", "chatty")
    chatty.segments[3].size_bytes = 10**6  # pretend the fourth segment is large: it breaks the run of small ones
    plan = cp.plan_queue(chatty, cp.CompactSpec(threshold_bytes=5000, segment_max_bytes=MAX))
    assert [(o.sequence, o.kind, len(o.sources)) for o in plan] == [(1, "merge", 3), (2, "copy", 1), (3, "merge", len(chatty.segments) - 4)]
    chatty.segments[0].size_bytes = 10**6
    assert cp.plan_queue(chatty, cp.CompactSpec(threshold_bytes=5000, segment_max_bytes=MAX))[0].kind == "keep"
    assert cp.plan_queue(manifest.queue("/", "bulk"), cp.CompactSpec(threshold_bytes=5000)) is None


@pytest.mark.parametrize("point", ["written", "switched"])
def test_a_crash_leaves_a_valid_backup_and_a_rerun_finishes(url, monkeypatch, point):
    build_backup(url)
    storage = open_storage(url)
    _, records = read_queue_independently(storage, "b1", "/", "chatty")

    def crash(code: int) -> None:
        raise Crashed(code)

    monkeypatch.setattr(compact_segments.os, "_exit", crash)
    with pytest.raises(Crashed):
        compact(url, "--crash-after", point)
    # every segment the manifest names is whole; a crash after writing leaves interim copies it does not name,
    # which validate names (a rebuild would otherwise read them as segments of their own) and the re-run removes
    report = validate_backup(storage, "b1", deep=True)
    assert [d for d in report.defects if "leftover interim compaction copy" not in d.reason] == []
    assert (point == "written") == bool(report.defects)

    monkeypatch.undo()
    compact(url)
    manifest = ManifestStore(storage).load("b1")
    listed = sorted(s.key for q in manifest.queues for s in q.segments)
    assert sorted(i.key for i in storage.list("b1/queues/")) == listed
    assert all(cp.is_canonical("b1", q.vhost, q.name, s) for q in manifest.queues for s in q.segments)
    assert read_queue_independently(storage, "b1", "/", "chatty")[1] == records
    assert validate_backup(storage, "b1", deep=True).valid


def test_a_damaged_source_stops_compaction_before_the_manifest_changes(url):
    build_backup(url, small_segments=5)
    storage = open_storage(url)
    key = ManifestStore(storage).load("b1").queue("/", "chatty").segments[2].key
    data = bytearray(storage.get(key))
    data[40] ^= 1
    storage.put(key, bytes(data))
    manifest = storage.get("b1/manifest.json")

    with pytest.raises(cp.CompactionError, match="damaged"):
        compact(url)
    assert storage.get("b1/manifest.json") == manifest


def test_interim_keys_parse_to_the_same_sequence():
    from airflow_rbak.codec.layout import parse_segment_key

    key = "b1/queues/_default/q/segment-0007.zst"
    assert interim_segment_key(key) == "b1/queues/_default/q/segment-00007.zst"
    assert parse_segment_key(interim_segment_key(key))[3] == 7


@pytest.mark.spark
def test_spark_compaction_finishes_what_a_crash_between_write_and_delete_left(tmp_path, monkeypatch, spark_submit_available):
    """The crash itself is the in-process job's (one spark-submit less; the driver runs the same code);
    the run that finishes it goes through spark-submit."""
    url = (tmp_path / "store").as_uri()
    build_backup(url)
    storage = open_storage(url)
    chatty = ManifestStore(storage).load("b1").queue("/", "chatty")
    _, records = read_queue_independently(storage, "b1", "/", "chatty")
    args = ["--threshold-bytes", "5000", "--segment-max-bytes", str(MAX)]

    def crash(code: int) -> None:
        raise Crashed(code)

    monkeypatch.setattr(compact_segments.os, "_exit", crash)
    with pytest.raises(Crashed):
        compact(url, "--crash-after", "switched")
    monkeypatch.undo()
    assert validate_backup(storage, "b1", deep=True).valid
    assert len(list(storage.list("b1/queues/_default/chatty/"))) > len(chatty.segments)  # old ones not yet deleted

    done = submit("compact_segments", url, "b1", *args)
    assert done.returncode == 0, done.stderr
    after = ManifestStore(storage).load("b1").queue("/", "chatty")
    assert len(after.segments) == expected_groups([s.uncompressed_bytes for s in chatty.segments], MAX) < 10
    assert read_queue_independently(storage, "b1", "/", "chatty") == (list(range(1, len(after.segments) + 1)), records)
    assert done.report["summary"]["leftovers_deleted"] == len(chatty.segments)
    assert validate_backup(storage, "b1", deep=True).valid
