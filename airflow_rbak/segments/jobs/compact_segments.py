"""Spark job: merge each queue's small segments into segments near ``segment_max_bytes``.

    spark-submit compact_segments.py --storage-url URL --backup-id ID --threshold-bytes N \\
        [--segment-max-bytes N --segment-max-interval-ms N --compression zstd --level 3]

Works on a finished backup (its manifest.json). Order of work, so that a
crash anywhere leaves a backup that validates (see
:mod:`airflow_rbak.segments.compact`): delete segment objects no
manifest entry lists; finish a pending canonical-key round; plan from the
manifest; write and verify every output at interim keys in parallel; save
the manifest (atomic); delete the old segments; copy interim segments to
their canonical keys in parallel, verified; save the manifest; delete the
interim copies. Output groups are written one per task, so a queue's groups
spread over the executors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from airflow_rbak.codec import BackupManifest, SegmentMetadata
from airflow_rbak.repository.chain import shared_queues
from airflow_rbak.repository.lock import BackupLock, LeasedStorage
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.segments import compact as cp
from airflow_rbak.segments.jobs.common import add_segment_arguments, base_parser, main, parse_with_settings, positive_int
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage

JOB = "compact"
CRASH_POINTS = ("written", "switched")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's arguments (``argv`` without the program name)."""
    parser = base_parser(JOB, "Merge small segments of each queue, re-sequenced, with a safe manifest swap.")
    parser.add_argument(
        "--threshold-bytes", type=positive_int, required=True, help="segments smaller than this (file size) merge"
    )
    add_segment_arguments(parser)
    # Fault injection for the crash-safety tests: end the process abruptly at a named point.
    parser.add_argument("--crash-after", choices=CRASH_POINTS, help=argparse.SUPPRESS)
    parser.add_argument("--lock-owner", default=None, help="the backup lock's owner (an Airflow DAG run's); default: this run")
    return parse_with_settings(parser, argv, lambda args: cp.CompactSpec(
        args.threshold_bytes, args.segment_max_bytes, args.segment_max_interval_ms, args.compression, args.level))


def run(spark: Any, args: argparse.Namespace) -> JobReport:
    """Under the backup's lock: recover, plan, write, swap, delete, canonicalize; return the report (not yet stored).

    Compaction deletes segments no manifest references; without the lock it could delete the segments of a
    backup run that is still writing them. The driver's saves and deletes go through the lease.
    """
    plain = open_storage(args.storage_url)
    lock = BackupLock(plain, args.backup_id, args.lock_owner)
    lock.acquire()
    try:
        with lock.renewing():
            return _compact(spark, args, LeasedStorage(plain, lock))
    finally:
        lock.release()


def _compact(spark: Any, args: argparse.Namespace, storage: Storage) -> JobReport:
    store = ManifestStore(storage)
    report = JobReport(JOB, args.backup_id, storage.url, settings=args.settings.to_json())
    started = time.perf_counter()
    manifest = store.load(args.backup_id)
    shared = shared_queues(storage, manifest)  # stream chains: their segments are listed by other manifests too
    recovered = _delete(storage, cp.unreferenced_segments(storage, manifest))
    manifest = _canonicalize(spark, args, store, manifest, shared)
    before = {(q.vhost, q.name): len(q.segments) for q in manifest.queues}
    plans = {(q.vhost, q.name): plan for q in manifest.queues
             if (q.vhost, q.name) not in shared and (plan := cp.plan_queue(q, args.settings))}
    removed: list[str] = []
    if plans:
        old_keys = {s.key for q in manifest.queues for s in q.segments}
        built = _parallel(spark, [o for plan in plans.values() for o in plan], _build_task(args))
        _crash_point(args, "written")
        for queue in manifest.queues:
            if (queue.vhost, queue.name) in plans:
                queue.segments = [
                    SegmentMetadata.from_json(built[(queue.vhost, queue.name, o.sequence)])
                    for o in plans[(queue.vhost, queue.name)]
                ]
        manifest.refresh_totals()
        store.save(manifest)
        _crash_point(args, "switched")
        removed = _delete(storage, sorted(old_keys - {s.key for q in manifest.queues for s in q.segments}))
        manifest = _canonicalize(spark, args, store, manifest, shared)
    report.details = {"queues": [_queue_detail(q, before) for q in manifest.queues if (q.vhost, q.name) in plans]}
    report.summary = {
        "queues_compacted": len(plans),
        "queues_shared_with_other_backups": len(shared),
        "segments_before": sum(before.values()),
        "segments_after": manifest.total_segments,
        "segments_deleted": len(removed),
        "leftovers_deleted": len(recovered),
        "messages": manifest.total_messages,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return report


def _build_task(args: argparse.Namespace) -> Any:
    url, backup_id, settings = args.storage_url, args.backup_id, args.settings
    return lambda o: ((o.vhost, o.queue, o.sequence), cp.build_output(url, backup_id, o, settings))


def _parallel(spark: Any, work: list[Any], task: Any) -> dict[Any, Any]:
    """Run ``task`` on each item, one per partition (items are few and each is a whole segment)."""
    if not work:
        return {}
    return dict(spark.sparkContext.parallelize(work, len(work)).map(task).collect())


def _canonicalize(spark: Any, args: argparse.Namespace, store: ManifestStore, manifest: BackupManifest,
                  shared: set[tuple[str, str]]) -> BackupManifest:
    """Move every interim segment to its canonical key; save the manifest; delete the interim copies."""
    backup_id, url = manifest.backup_id, args.storage_url
    pending = [(q.vhost, q.name, s.to_json()) for q in manifest.queues if (q.vhost, q.name) not in shared
               for s in q.segments if not cp.is_canonical(backup_id, q.vhost, q.name, s)]
    if not pending:
        return manifest
    moved = _parallel(spark, pending, lambda p: (p[2]["key"], cp.canonicalize(url, backup_id, p[0], p[1], p[2])))
    for queue in manifest.queues:
        queue.segments = [SegmentMetadata.from_json(moved[s.key]) if s.key in moved else s for s in queue.segments]
    store.save(manifest)
    _delete(store.storage, sorted(moved))
    return manifest


def _delete(storage: Storage, keys: list[str]) -> list[str]:
    for key in keys:
        storage.delete(key)
    return keys


def _crash_point(args: argparse.Namespace, point: str) -> None:
    if args.crash_after == point:
        print(f"compact: crash injected after {point}", file=sys.stderr, flush=True)
        os._exit(70)


def _queue_detail(queue: Any, before: dict[tuple[str, str], int]) -> dict[str, Any]:
    return {"vhost": queue.vhost, "name": queue.name, "segments_before": before[(queue.vhost, queue.name)],
            "segments_after": len(queue.segments), "segments": [s.to_json() for s in queue.segments]}


if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
