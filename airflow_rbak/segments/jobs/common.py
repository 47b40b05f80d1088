"""What every RBAK Spark job shares: common arguments, the session, the report and the exit code.

Exit codes: 0 the job did its work and found nothing wrong; 1 it ran but
found defects (verify) or could not finish some of its work; 2 it failed
(bad arguments, unreadable input, storage errors). Every run that gets past
argument parsing stores a report and prints its key as the only stdout line.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from airflow_rbak.codec.constants import DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_MAX_INTERVAL_MS, DEFAULT_ZSTD_LEVEL
from airflow_rbak.codec.layout import check_backup_id
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.credentials import STORAGE_ENV, StorageCredentials, credentials_from_environment, storage_credentials
from airflow_rbak.storage.keyring import KEYRING_ENV, Keyring, parse_keyring, storage_keyring

EXIT_OK, EXIT_DEFECTS, EXIT_FAILED = 0, 1, 2


def base_parser(job: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options every job takes: where the backup is and where the report goes."""
    parser = argparse.ArgumentParser(prog=job, description=description)
    parser.add_argument("--storage-url", required=True, help="backup location: file:///path, s3://bucket/prefix?..., memory://")
    parser.add_argument("--backup-id", required=True, type=_backup_id, help="the backup to work on")
    parser.add_argument("--report-key", help="store the report here instead of {backup_id}/reports/<job>-<time>.json")
    parser.add_argument("--partitions", type=_positive, help="Spark partitions (default: from the cluster's parallelism)")
    return parser


def add_segment_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the segments a job writes: compression and its level, and where a segment is cut."""
    parser.add_argument("--compression", default="zstd", choices=("zstd", "lz4", "none"))
    parser.add_argument("--level", type=int, default=DEFAULT_ZSTD_LEVEL, help="zstd level 1-22")
    parser.add_argument("--segment-max-bytes", type=positive_int, default=DEFAULT_SEGMENT_MAX_BYTES)
    parser.add_argument("--segment-max-interval-ms", type=positive_int, default=DEFAULT_SEGMENT_MAX_INTERVAL_MS)


def parse_with_settings(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                        settings: Callable[[argparse.Namespace], Any]) -> argparse.Namespace:
    """Parse ``argv``, then build ``args.settings`` from the arguments: settings the job refuses
    (:class:`ConfigurationError`) are a usage error, like a malformed argument (the parser's exit 2)."""
    args = parser.parse_args(argv)
    try:
        args.settings = settings(args)
    except ConfigurationError as exc:
        parser.error(str(exc))
    return args


def _backup_id(value: str) -> str:
    try:
        return check_backup_id(value)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def positive_int(value: str) -> int:
    """argparse type for byte and millisecond limits."""
    return _positive(value)


def spark_session(app_name: str) -> Any:
    """The job's SparkSession (pyspark imported here, so the job modules import without it)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def warm_up(spark: Any, module: str) -> float:
    """Start every Python worker and import ``module`` there; return the seconds it took.

    The first action of a session pays for starting the Python workers (several
    seconds); doing it apart lets a report tell that fixed cost from the work.
    """
    started = time.perf_counter()
    workers = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(workers), workers).map(lambda _: bool(importlib.import_module(module))).collect()
    return round(time.perf_counter() - started, 3)


def codec_build() -> dict[str, Any]:
    """Which build of the codec this Python runs: the package version, whether its C accelerator loaded, the
    interpreter, and the compressors' and JSON library's versions (a job reports it from every executor)."""
    import platform

    import lz4
    import orjson
    import zstandard

    from airflow_rbak import __version__
    from airflow_rbak.codec import records

    return {"rbak": __version__, "speedups": records.format_byte_array is not None, "python": platform.python_version(),
            "executable": sys.executable, "zstandard": zstandard.__version__, "lz4": lz4.__version__,
            "orjson": orjson.__version__}


def executor_codec_builds(spark: Any) -> list[dict[str, Any]]:
    """The distinct :func:`codec_build` of the executors' Python workers (one small task per core)."""
    workers = spark.sparkContext.defaultParallelism
    found = spark.sparkContext.parallelize(range(workers), workers).map(lambda _: codec_build()).collect()
    return [dict(b) for b in sorted({tuple(sorted(b.items())) for b in found})]


def slices(spark: Any, items: int, requested: int | None, per_core: int = 1) -> int:
    """How many partitions to cut ``items`` work items into: at most one item each."""
    wanted = requested or spark.sparkContext.defaultParallelism * per_core
    return max(1, min(items, wanted))


def main(
    job: str,
    parse_args: Callable[[Sequence[str] | None], argparse.Namespace],
    run: Callable[[Any, argparse.Namespace], JobReport],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse, run in a fresh session, store the report, print its key; return the exit code."""
    args = parse_args(argv)
    spark = spark_session(f"rbak-{job}-{args.backup_id}")
    with storage_credentials(driver_credentials(spark)), storage_keyring(driver_keyring(spark)):
        return _run_and_report(job, args, run, spark)


def driver_keyring(spark: Any) -> Keyring | None:
    """The encryption keys the submit handed the executors (``spark.executorEnv.RBAK_ENCRYPTION_KEYS``, from the same
    private properties file), for the driver's storage; the executors read the variable itself."""
    text = spark.sparkContext.getConf().get(f"spark.executorEnv.{KEYRING_ENV}")
    return parse_keyring(text) if text else None


def driver_credentials(spark: Any) -> StorageCredentials | None:
    """The storage credentials the submit handed the executors (``spark.executorEnv.*``, from the private properties
    file ``hooks/spark.py`` writes): the driver's storage uses them too, its environment left as it is."""
    conf = spark.sparkContext.getConf()
    handed = {name: conf.get(f"spark.executorEnv.{name}") for name in STORAGE_ENV}
    return credentials_from_environment({k: v for k, v in handed.items() if v})


def _run_and_report(job: str, args: argparse.Namespace, run: Callable[[Any, argparse.Namespace], JobReport],
                    spark: Any) -> int:
    try:
        report = run(spark, args)
        report.summary["executor_codec"] = executor_codec_builds(spark)
        code = EXIT_OK if report.ok else EXIT_DEFECTS
    except Exception as exc:  # the report must say why, whatever failed
        traceback.print_exc(file=sys.stderr)
        report = JobReport(job, args.backup_id, _safe_url(args.storage_url), ok=False)
        report.summary = {"error": f"{type(exc).__name__}: {exc}"}
        code = EXIT_FAILED
    finally:
        spark.stop()
    try:
        key = report.save(open_storage(args.storage_url), args.report_key)
    except Exception as exc:  # storage gone: the exit code still tells, stderr says why
        print(f"{job}: could not store the report: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(key, flush=True)
    return code


def _safe_url(url: str) -> str:
    try:
        return open_storage(url).url
    except Exception:  # noqa: BLE001 - an unusable URL is what the error already says
        return "<unusable storage url>"
