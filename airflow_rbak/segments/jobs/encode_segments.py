"""Spark job: encode each queue's staged chunks into its final segments.

    spark-submit encode_segments.py --storage-url URL --backup-id ID \\
        [--compression zstd --level 3 --segment-max-bytes N --segment-max-interval-ms N]
        [--range-bytes N] [--queues-json JSON] [--write-manifest]

Distribution (see :mod:`airflow_rbak.segments.encode`): queues are
cut into ranges of whole staged chunks (``--range-bytes`` of staging each,
from the listing alone); pass 1 counts the segments of every range that is
not its queue's last, the driver turns the counts into first sequence
numbers, pass 2 writes every range in parallel. Range boundaries are forced
segment cuts, so the output depends on staging and settings only: a re-run
after a crash writes the same keys and bytes (identical objects are not
rewritten) with sequences 1..n per queue, and only then removes segments a
run with other settings left past the end.

The job does not write ``manifest.json`` (finalize does, last): the report
(``{backup_id}/reports/encode-*.json``) holds each queue's ``QueueBackup``
with its ``SegmentMetadata``; ``manifest_from_encode_report`` turns it into
a manifest. ``--write-manifest`` saves that manifest completed, for running
the job alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from airflow_rbak.backup.manifest_store import ManifestStore
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.segments import encode as er
from airflow_rbak.segments.jobs.common import add_segment_arguments, base_parser, main, parse_with_settings, positive_int
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage

JOB = "encode"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's arguments (``argv`` without the program name)."""
    parser = base_parser(JOB, "Encode staged records into final RBAK segments.")
    add_segment_arguments(parser)
    parser.add_argument("--range-bytes", type=positive_int, default=er.DEFAULT_RANGE_BYTES, help="staged bytes per task")
    parser.add_argument("--queues-json", type=_queues, default=[], help='[{"vhost": "/", "name": "q", "queue_type": "quorum"}]')
    parser.add_argument("--write-manifest", action="store_true", help="also save manifest.json, completed (standalone use)")
    return parse_with_settings(parser, argv, lambda args: er.EncodeSettings(
        args.compression, args.level, args.segment_max_bytes, args.segment_max_interval_ms, args.range_bytes))


def _queues(text: str) -> list[er.QueueRef]:
    try:
        value = orjson.loads(text)
        if not isinstance(value, list):
            raise ConfigurationError("--queues-json must be a JSON array")
        return er.parse_queue_refs(value)
    except (orjson.JSONDecodeError, ConfigurationError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(spark: Any, args: argparse.Namespace) -> JobReport:
    """Plan ranges, count, write, assemble each queue; return the report (not yet stored)."""
    storage = open_storage(args.storage_url)
    settings: er.EncodeSettings = args.settings
    report = JobReport(JOB, args.backup_id, storage.url, settings=settings.to_json())
    staged = er.discover_staging(storage, args.backup_id)
    queues = er.queues_to_encode(staged, args.queues_json)
    ranges = [r for q in queues for r in er.plan_ranges(q.vhost, q.name, staged.get((q.vhost, q.name), []), settings.range_bytes)]
    started = time.perf_counter()
    counts = _count_pass(spark, args, [r for r in ranges if _has_successor(r, ranges)])
    firsts = er.first_sequences(ranges, counts)
    results = _write_pass(spark, args, [(r, firsts[(r.vhost, r.queue, r.index)]) for r in ranges])
    entries = [er.assemble_queue(q, results) for q in queues]
    stale = [key for queue in entries for key in er.remove_stale_segments(storage, args.backup_id, queue)]
    report.details = {"queues": [q.to_json() for q in entries], "removed_stale": stale}
    report.summary = _summary(entries, ranges, results, stale, time.perf_counter() - started)
    if args.write_manifest:
        manifest = er.manifest_from_encode_report({**report.to_json(), "details": report.details})
        manifest.completed_at = int(time.time() * 1000)
        report.summary["manifest_key"] = ManifestStore(storage).save(manifest)
    return report


def _has_successor(rng: er.StagingRange, ranges: list[er.StagingRange]) -> bool:
    return any(r.vhost == rng.vhost and r.queue == rng.queue and r.index == rng.index + 1 for r in ranges)


def _count_pass(spark: Any, args: argparse.Namespace, ranges: list[er.StagingRange]) -> dict[tuple[str, str, int], int]:
    if not ranges:
        return {}
    url, settings = args.storage_url, args.settings
    rdd = spark.sparkContext.parallelize(ranges, len(ranges))
    counted = rdd.map(lambda r: ((r.vhost, r.queue, r.index), er.count_range_segments(url, r, settings))).collect()
    return dict(counted)


def _write_pass(spark: Any, args: argparse.Namespace, work: list[tuple[er.StagingRange, int]]) -> list[er.RangeResult]:
    if not work:
        return []
    url, backup_id, settings = args.storage_url, args.backup_id, args.settings
    # Largest ranges first, one per partition, so a big queue's ranges spread over the executors.
    work = sorted(work, key=lambda w: -w[0].staged_bytes)
    rdd = spark.sparkContext.parallelize(work, len(work))
    return rdd.map(lambda w: er.encode_range(url, backup_id, w[0], w[1], settings)).collect()


def _summary(entries: list, ranges: list, results: list, stale: list[str], seconds: float) -> dict[str, Any]:
    return {
        "queues": len(entries),
        "ranges": len(ranges),
        "segments": sum(len(q.segments) for q in entries),
        "segments_written": sum(r.written for r in results),
        "segments_unchanged": sum(r.unchanged for r in results),
        "stale_removed": len(stale),
        "messages": sum(q.message_count for q in entries),
        "bytes": sum(s.size_bytes for q in entries for s in q.segments),
        "seconds": round(seconds, 3),
    }


if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
