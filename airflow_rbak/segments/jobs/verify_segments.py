"""Spark job: deep-check every segment a backup lists (or a sample), spread over the executors.

    spark-submit verify_segments.py --storage-url URL --backup-id ID \\
        [--sample-percent P [--sample-seed S]] [--encode-report KEY | --manifest-key KEY]

Each segment gets the checks of ``validate_backup(deep=True)`` (present,
size, SHA-256 against the manifest, CRC-32, record count, uncompressed size,
header against manifest timestamps, the header against its records'
timestamps, records of this queue) and one result in the
report. Segments are dealt largest first into one group per partition, and
each task opens storage from the URL. Before finalize there is no
manifest.json yet: ``--encode-report`` checks the segments an encode report
lists. A stream chain's segments held by earlier backups are checked like the
backup's own (a restore reads them); a declared base whose segments are gone is
named in ``missing_bases``. Exit code 1 when any defect is found.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from collections.abc import Sequence
from typing import Any

from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository import chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.segments import stages
from airflow_rbak.segments import verify as vf
from airflow_rbak.segments.encode import manifest_from_encode_report
from airflow_rbak.segments.jobs.common import base_parser, main, positive_int, slices, warm_up
from airflow_rbak.segments.reports import JobReport, load_report
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage

JOB = "verify"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's arguments (``argv`` without the program name)."""
    parser = base_parser(JOB, "Verify every segment of a backup (or a sample) against its manifest.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--manifest-key", help="manifest to verify against (default {backup_id}/manifest.json)")
    source.add_argument("--encode-report", help="verify the segments an encode report lists (before finalize)")
    parser.add_argument("--sample-percent", type=_percent, default=100.0, help="check about this %% of segments")
    parser.add_argument("--sample-seed", default=None, help="picks the sample; default: a fresh one per run")
    parser.add_argument("--max-decompressed-bytes", type=positive_int, default=DEFAULT_MAX_DECOMPRESSED_BYTES)
    return parser.parse_args(argv)


def _percent(text: str) -> float:
    value = float(text)
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"must be in (0, 100], got {text}")
    return value


def load_manifest(storage: Storage, args: argparse.Namespace) -> BackupManifest:
    """The segment list to verify: an encode report's, a given manifest, or the backup's own."""
    if args.encode_report:
        return manifest_from_encode_report(load_report(storage, args.encode_report, "encode"))
    if args.manifest_key:
        return BackupManifest.from_bytes(storage.get(args.manifest_key), name=args.manifest_key)
    return ManifestStore(storage).load(args.backup_id)


def run(spark: Any, args: argparse.Namespace) -> JobReport:
    """Check the selected segments in parallel; the report lists one result per segment."""
    storage = open_storage(args.storage_url)
    seed = args.sample_seed or secrets.token_hex(8)
    manifest = load_manifest(storage, args)
    items = vf.manifest_items(manifest)
    chosen = vf.sample(items, args.sample_percent, seed)
    settings = {"sample_percent": args.sample_percent, "sample_seed": seed,
                "source": args.encode_report or args.manifest_key or manifest_key(args.backup_id)}
    report = JobReport(JOB, args.backup_id, storage.url, settings=settings)
    warmup = warm_up(spark, vf.__name__) if chosen else 0.0
    started = time.perf_counter()
    results = _check(spark, args, chosen)
    seconds = time.perf_counter() - started
    failed = [r for r in results if not r["ok"]]
    report.ok = not failed
    report.details = {"segments": results}
    missing = {r["key"] for r in failed if "missing" in r["defects"]}
    bases = chain.missing_bases(manifest, missing)
    report.ok = report.ok and not bases
    report.summary = {
        **stages.verify_summary("deep", results, seconds),
        "ok": report.ok,  # missing chain bases count too
        "depends_on": list(chain.dependencies(manifest)),
        "missing_bases": [chain.missing_base_reason(base, *counts) for base, counts in bases.items()],
        "segments_listed": len(items),
        "warmup_seconds": warmup,
        "mb_per_s": round(sum(r["bytes_checked"] for r in results) / 1e6 / seconds, 1) if seconds > 0 else None,
    }
    return report


def _check(spark: Any, args: argparse.Namespace, items: list[vf.VerifyItem]) -> list[dict[str, Any]]:
    if not items:
        return []
    groups = vf.balanced_groups(items, slices(spark, len(items), args.partitions))
    url, cap = args.storage_url, args.max_decompressed_bytes
    rdd = spark.sparkContext.parallelize(groups, len(groups))
    return rdd.flatMap(lambda group: vf.check_group(url, group, cap)).collect()


if __name__ == "__main__":
    sys.exit(main(JOB, parse_args, run))
