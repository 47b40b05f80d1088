"""Spark application: one per backup run, the stages of :mod:`airflow_rbak.segments.stages` over its queues.

    spark-submit backup_segments.py --storage-url URL --backup-id ID \\
        [--compression zstd --level 3 --segment-max-bytes N --segment-max-interval-ms N]
        [--range-bytes N] [--queues-json JSON] [--verify none|quick|deep] [--write-manifest]

Encode (see :mod:`airflow_rbak.segments.encode`): queues are cut into ranges
of whole staged chunks (``--range-bytes`` of staging each, from the listing
alone); pass 1 counts the segments of every range that is not its queue's
last, the driver turns the counts into first sequence numbers, pass 2 writes
every range in parallel. Range boundaries are forced segment cuts, so the
output depends on staging and settings only: the same keys and bytes as the
in-process stages, and a re-run after a crash rewrites nothing that is
already right. Verify then reads every segment back from the storage in the
same session and checks it as ``rbak validate --deep`` does (``--verify``).

With ``--queues-json`` only those queues are encoded (each capture task may
have encoded its own already); without it, every staged queue. The job does
not write ``manifest.json`` (finalize does, last): its ``encode`` report
holds each queue's entry and every segment's check. ``--write-manifest``
saves that manifest completed, for running the job alone. Exit code 1 when a
check found a defect.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from airflow_rbak.codec import QueueBackup
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.segments import encode as er
from airflow_rbak.segments import stages
from airflow_rbak.segments import verify as vf
from airflow_rbak.segments.jobs.common import (
    add_segment_arguments,
    base_parser,
    main,
    parse_with_settings,
    positive_int,
    slices,
)
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage

JOB = stages.JOB


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's arguments (``argv`` without the program name)."""
    parser = base_parser(JOB, "Encode staged records into final RBAK segments.")
    add_segment_arguments(parser)
    parser.add_argument("--range-bytes", type=positive_int, default=er.DEFAULT_RANGE_BYTES, help="staged bytes per task")
    parser.add_argument("--queues-json", type=_queues, default=[], help='[{"vhost": "/", "name": "q", "queue_type": "quorum"}]')
    parser.add_argument("--write-manifest", action="store_true", help="also save manifest.json, completed (standalone use)")
    parser.add_argument("--verify", choices=stages.VERIFY_MODES, default="deep", help="check what was written")
    parser.add_argument("--max-decompressed-bytes", type=positive_int, default=DEFAULT_MAX_DECOMPRESSED_BYTES)
    parser.add_argument("--compact-below-bytes", type=positive_int, help="then merge runs of segments smaller than this")
    return parse_with_settings(parser, argv, lambda args: stages.SegmentWork(er.EncodeSpec(
        args.compression, args.level, args.segment_max_bytes, args.segment_max_interval_ms, args.range_bytes),
        args.verify, args.max_decompressed_bytes, args.compact_below_bytes))


def _queues(text: str) -> list[er.QueueRef]:
    try:
        value = orjson.loads(text)
        if not isinstance(value, list):
            raise ConfigurationError("--queues-json must be a JSON array")
        return er.parse_queue_refs(value)
    except (orjson.JSONDecodeError, ConfigurationError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(spark: Any, args: argparse.Namespace) -> JobReport:
    """Plan ranges, count, write, assemble each queue, then check what was written; return the report."""
    storage = open_storage(args.storage_url)
    work: stages.SegmentWork = args.settings
    report = JobReport(JOB, args.backup_id, storage.url, settings={**work.to_json(), "ran": "spark"})
    staged = er.discover_staging(storage, args.backup_id)
    queues = sorted(args.queues_json, key=lambda q: (q.vhost, q.name)) or er.queues_to_encode(staged, [])
    ranges = [
        r for q in queues for r in er.plan_ranges(q.vhost, q.name, staged.get((q.vhost, q.name), []), work.encode.range_bytes)
    ]
    started = time.perf_counter()
    counts = _count_pass(spark, args, [r for r in ranges if _has_successor(r, ranges)])
    firsts = er.first_sequences(ranges, counts)
    results = _write_pass(spark, args, [(r, firsts[(r.vhost, r.queue, r.index)]) for r in ranges])
    entries = [er.assemble_queue(q, results) for q in queues]
    stale = [key for queue in entries for key in er.remove_stale_segments(storage, args.backup_id, queue)]
    stale += stages.compact(args.storage_url, args.backup_id, entries, work, _on_executors(spark))
    encoded = time.perf_counter()
    checks = _verify_pass(spark, args, entries)
    stages.finish_report(report, entries, results, stale, work.verify, checks, encoded - started, time.perf_counter() - encoded)
    report.summary["ranges"] = len(ranges)
    report.summary["application_id"] = spark.sparkContext.applicationId
    if args.write_manifest and report.ok:
        manifest = er.manifest_from_encode_report({**report.to_json(), "details": report.details})
        manifest.completed_at = int(time.time() * 1000)
        report.summary["manifest_key"] = ManifestStore(storage).save(manifest)
    return report


def _verify_pass(spark: Any, args: argparse.Namespace, entries: list[QueueBackup]) -> list[dict[str, Any]]:
    """Every segment just written, read back from the storage by the executors (largest first, balanced)."""
    work: stages.SegmentWork = args.settings
    items = [vf.VerifyItem(q.vhost, q.name, s.to_json()) for q in entries for s in q.segments]
    if work.verify == "none" or not items:
        return []
    groups = vf.balanced_groups(items, slices(spark, len(items), args.partitions))
    url, cap, quick = args.storage_url, work.max_decompressed_bytes, work.verify == "quick"
    rdd = spark.sparkContext.parallelize(groups, len(groups))
    return rdd.flatMap(lambda group: vf.stat_group(url, group) if quick else vf.check_group(url, group, cap)).collect()


def _on_executors(spark: Any) -> Any:
    """``run_each`` for the stages: one item per partition (items are few and each is a whole segment)."""
    return lambda items, task: spark.sparkContext.parallelize(items, len(items)).map(task).collect() if items else []


def _has_successor(rng: er.StagingRange, ranges: list[er.StagingRange]) -> bool:
    return any(r.vhost == rng.vhost and r.queue == rng.queue and r.index == rng.index + 1 for r in ranges)


def _count_pass(spark: Any, args: argparse.Namespace, ranges: list[er.StagingRange]) -> dict[tuple[str, str, int], int]:
    if not ranges:
        return {}
    url, settings = args.storage_url, args.settings.encode
    rdd = spark.sparkContext.parallelize(ranges, len(ranges))
    counted = rdd.map(lambda r: ((r.vhost, r.queue, r.index), er.count_range_segments(url, r, settings))).collect()
    return dict(counted)


def _write_pass(spark: Any, args: argparse.Namespace, work: list[tuple[er.StagingRange, int]]) -> list[er.RangeResult]:
    if not work:
        return []
    url, backup_id, settings = args.storage_url, args.backup_id, args.settings.encode
    # Largest ranges first, one per partition, so a big queue's ranges spread over the executors.
    work = sorted(work, key=lambda w: -w[0].staged_bytes)
    rdd = spark.sparkContext.parallelize(work, len(work))
    return rdd.map(lambda w: er.encode_range(url, backup_id, w[0], w[1], settings)).collect()


if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
