"""Completing a DAG-run backup from the Spark encode report (no Airflow here).

The encode job writes segments and a report listing each queue's
``SegmentMetadata``; the capture tasks know each stream's offsets. This
step joins them with what ``begin`` and ``export_definitions`` recorded in
the incomplete manifest, writes ``manifest.json`` last (totals,
``completed_at``), and only then removes the staging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_rbak.backup.encode import staged_chunk_keys
from airflow_rbak.backup.manifest_store import ManifestStore
from airflow_rbak.backup.writer import now_ms
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.distributed.encode_ranges import manifest_from_encode_report
from airflow_rbak.distributed.reports import load_report
from airflow_rbak.storage.base import Storage


def finalize_backup(
    storage: Storage, backup_id: str, encode_report_key: str, captures: Iterable[Mapping[str, Any]] = ()
) -> BackupManifest:
    """Write the completed manifest for ``backup_id`` and remove its staging; return the manifest."""
    store = ManifestStore(storage)
    begun = store.load(backup_id)  # written by discover: created_at, cluster, version, definitions
    report = load_report(storage, encode_report_key, "encode")
    manifest = manifest_from_encode_report(
        report, created_at=begun.created_at, source_cluster=begun.source_cluster, rabbitmq_version=begun.rabbitmq_version
    )
    manifest.backup_id = backup_id
    manifest.definitions = begun.definitions
    _add_stream_offsets(manifest, captures)
    manifest.refresh_totals()
    manifest.completed_at = now_ms()
    store.save(manifest)
    for queue in manifest.queues:
        for key in staged_chunk_keys(storage, backup_id, queue.vhost, queue.name):
            storage.delete(key)
    return manifest


def _add_stream_offsets(manifest: BackupManifest, captures: Iterable[Mapping[str, Any]]) -> None:
    """The same ``stream_offsets``/``consumer_offsets`` extensions ``BackupRun.encode`` records."""
    for capture in captures:
        if capture.get("queue_type") != "stream":
            continue
        entry = manifest.queue(capture["vhost"], capture["queue"])
        if entry is not None:
            entry.extensions["stream_offsets"] = {"first": capture.get("first_offset"), "last": capture.get("last_offset")}
            entry.extensions["consumer_offsets"] = capture.get("consumer_offsets") or {}


def manifest_summary(manifest: BackupManifest, storage_url: str) -> dict[str, Any]:
    """The small, JSON-safe summary finalize returns as XCom and attaches to the Asset event."""
    duration = (manifest.completed_at - manifest.created_at) / 1000 if manifest.completed_at else None
    return {
        "backup_id": manifest.backup_id,
        "storage_url": storage_url,
        "manifest_key": manifest_key(manifest.backup_id),
        "created_at": manifest.created_at,
        "completed_at": manifest.completed_at,
        "duration_s": round(duration, 3) if duration is not None else None,
        "queues": len(manifest.queues),
        "total_messages": manifest.total_messages,
        "total_bytes": manifest.total_bytes,
        "total_segments": manifest.total_segments,
        "definitions": manifest.definitions is not None,
    }
