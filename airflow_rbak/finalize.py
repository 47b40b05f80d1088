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

from airflow_rbak.backup.run import finish_backup, left_out_of, record_stream_offsets
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.distributed.encode_ranges import manifest_from_encode_report
from airflow_rbak.distributed.reports import load_report
from airflow_rbak.storage.base import Storage


def finalize_backup(
    storage: Storage, backup_id: str, encode_report_key: str, captures: Iterable[Mapping[str, Any]] = ()
) -> BackupManifest:
    """Write the completed manifest for ``backup_id`` and remove its staging; return the manifest."""
    report = load_report(storage, encode_report_key, "encode")
    captures = list(captures)
    left_out = left_out_of(captures)
    skipped = {(q["vhost"], q["queue"]) for q in left_out}
    entries = [e for e in manifest_from_encode_report(report, created_at=0).queues if (e.vhost, e.name) not in skipped]
    by_name = {(e.vhost, e.name): e for e in entries}
    for capture in captures:
        entry = by_name.get((capture["vhost"], capture["queue"]))
        if entry is not None and capture.get("queue_type") == "stream":
            record_stream_offsets(entry, capture.get("first_offset"), capture.get("last_offset"), capture.get("consumer_offsets"),
                                  capture.get("last_fingerprint"))
    return finish_backup(storage, backup_id, entries, left_out)


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
        "left_out": list(manifest.extensions.get("left_out") or []),
    }
