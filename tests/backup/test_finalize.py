"""Finalize: the completed manifest from the encode report and the begun manifest, staging removed after."""

from __future__ import annotations

import pytest

from airflow_rbak.backup.finalize import finalize_backup, manifest_summary
from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.codec.layout import staging_prefix
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.segments.reports import JobReport, ReportError
from airflow_rbak.storage import open_storage


def _segment(key: str, records: int, size: int) -> SegmentMetadata:
    return SegmentMetadata(key, 1, records, size, size * 2, 1000, 2000, "0" * 64)


@pytest.fixture
def begun(tmp_path):
    """A backup as discover/definitions leave it, with staging and a stored encode report."""
    storage = open_storage((tmp_path / "b").as_uri())
    ManifestStore(storage).save(BackupManifest("b-1", 1_000, "0", source_cluster="rabbit@x", rabbitmq_version="3.10.8"))
    queues = [QueueBackup("/", "orders", "classic", [_segment("b-1/queues/%2F/orders/segment-000001.rbak.zst", 3, 30)]),
              QueueBackup("/", "events", "stream", [_segment("b-1/queues/%2F/events/segment-000001.rbak.zst", 2, 20)]),
              QueueBackup("/", "empty", "classic")]
    report = JobReport("encode", "b-1", storage.url, details={"queues": [q.to_json() for q in queues]})
    key = report.save(storage)
    for queue in ("orders", "events"):
        storage.put(staging_prefix("b-1", "/", queue) + "chunk-000001.rbak.zst", b"staged")
    return storage, key


def test_finalize_writes_a_completed_manifest_with_totals_and_removes_the_staging(begun):
    storage, report_key = begun
    captures = [{"vhost": "/", "queue": "events", "queue_type": "stream", "first_offset": 0, "last_offset": 1,
                 "last_fingerprint": "ab" * 32, "consumer_offsets": {"c": 1}}, {"vhost": "/", "queue": "orders", "queue_type": "classic"}]

    manifest = finalize_backup(storage, "b-1", report_key, captures)

    stored = ManifestStore(storage).load("b-1")
    assert stored.completed_at == manifest.completed_at is not None
    assert (stored.created_at, stored.source_cluster, stored.rabbitmq_version) == (1_000, "rabbit@x", "3.10.8")
    assert (stored.total_messages, stored.total_bytes, stored.total_segments) == (5, 50, 2)
    assert stored.queue("/", "events").extensions["stream_offsets"] == {"first": 0, "last": 1, "last_fingerprint": "ab" * 32}
    assert not list(storage.list("b-1/staging/"))
    summary = manifest_summary(stored, storage.url)
    assert summary["total_messages"] == 5 and summary["queues"] == 3 and summary["duration_s"] > 0


def test_without_an_encode_report_nothing_is_completed_or_removed(begun):
    storage, _ = begun

    with pytest.raises(ReportError):
        finalize_backup(storage, "b-1", "b-1/reports/encode-missing.json")

    assert ManifestStore(storage).load("b-1").completed_at is None
    assert len(list(storage.list("b-1/staging/"))) == 2
