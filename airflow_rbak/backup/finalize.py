"""Completing a backup: the manifest written last, then the staging removed (no Airflow here).

:meth:`BackupRun.run` completes a backup from the segments it encoded in
process (:func:`finish_backup`); the DAG's finalize task from the Spark encode
job's report, which lists each queue's ``SegmentMetadata``, joined with the
stream offsets the capture tasks returned (:func:`finalize_backup`). Both join
what ``begin`` and ``export_definitions`` recorded in the incomplete manifest,
write ``manifest.json`` last (totals, ``completed_at``), and only then remove
the staging. A backup with streams links their chains and writes its manifest
under the location's chain lock (:mod:`airflow_rbak.repository.chain_link`), so no
retention pass deletes a base between the check that its segments are there
and the manifest that lists them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_rbak.capture.checkpoints import write_offsets_summary
from airflow_rbak.codec import BackupManifest, QueueBackup
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository.chain_link import ChainLock, link_chains
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.staging import delete_staging
from airflow_rbak.repository.writer import now_ms
from airflow_rbak.segments.encode import manifest_from_encode_report
from airflow_rbak.segments.reports import load_report
from airflow_rbak.storage.base import Storage


def record_stream_offsets(
    entry: QueueBackup, first: int | None, last: int | None, consumer_offsets: dict[str, int] | None,
    last_fingerprint: str | None = None,
) -> None:
    """Keep a stream's captured offset range (and its last message's fingerprint, which lets the next backup
    tell a re-created stream from a grown one) and its named consumers' offsets in its manifest entry."""
    entry.extensions["stream_offsets"] = {"first": first, "last": last, "last_fingerprint": last_fingerprint}
    entry.extensions["consumer_offsets"] = dict(consumer_offsets or {})


def left_out_of(captures: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The queues the captures left out, each with its reason (what the manifest and the summaries name)."""
    return [{"vhost": c["vhost"], "queue": c["queue"], "queue_type": c["queue_type"], "reason": c["left_out"]}
            for c in captures if c.get("left_out")]


def finish_backup(
    storage: Storage, backup_id: str, entries: list[QueueBackup], left_out: list[dict[str, str]] | None = None,
    chain_lock: ChainLock | None = None,
) -> BackupManifest:
    """Complete the manifest ``begin`` wrote (totals, ``completed_at``), save it, then remove staging.

    The manifest is the last thing written; staging goes only once it is safely stored. Queues left out are
    named with their reasons in the ``left_out`` extension (a foreign reader ignores it), never listed as queues;
    what an earlier attempt staged for them goes with the rest of the staging. A stream that continued an
    earlier backup lists that backup's segments before its own (:mod:`repository.chain`), so the completed backup
    restores whole on its own; ``chain_lock`` (default: one on ``storage``) is held while it is linked and saved.
    """
    store = ManifestStore(storage)
    manifest = store.load(backup_id)
    manifest.queues = entries
    manifest.extensions["left_out"] = list(left_out or [])
    streams = any(e.queue_type == "stream" for e in entries)
    chains = chain_lock or ChainLock(storage, f"backup {backup_id} linking its chains")
    with chains.held() if streams else contextlib.nullcontext():
        link_chains(storage, manifest)
        manifest.refresh_totals()
        manifest.completed_at = now_ms()
        store.save(manifest)
    write_offsets_summary(storage, backup_id)
    for vhost, name in [(e.vhost, e.name) for e in entries] + [(q["vhost"], q["queue"]) for q in left_out or []]:
        delete_staging(storage, backup_id, vhost, name)
    return manifest


def finalize_backup(
    storage: Storage, backup_id: str, encode_report_key: str, captures: Iterable[Mapping[str, Any]] = (),
    chain_lock: ChainLock | None = None,
) -> BackupManifest:
    """Write the completed manifest for ``backup_id`` from the encode report and remove its staging."""
    report = load_report(storage, encode_report_key, "encode")
    captures = list(captures)
    left_out = left_out_of(captures)
    skipped = {(q["vhost"], q["queue"]) for q in left_out}
    entries = [e for e in manifest_from_encode_report(report, created_at=0).queues if (e.vhost, e.name) not in skipped]
    by_name = {(e.vhost, e.name): e for e in entries}
    for capture in captures:
        entry = by_name.get((capture["vhost"], capture["queue"]))
        if entry is not None and capture.get("queue_type") == "stream":
            record_stream_offsets(entry, capture.get("first_offset"), capture.get("last_offset"),
                                  capture.get("consumer_offsets"), capture.get("last_fingerprint"))
    return finish_backup(storage, backup_id, entries, left_out, chain_lock)


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
