"""Operators that run the RBAK Spark jobs through spark-submit and return their report's summary.

Each composes the Spark provider's hook (:func:`airflow_rbak.hooks.spark.submit_hook`) rather than extending its
operator: the application is the job script inside the installed package, ``spark_options`` hold any other
spark-submit option (the hook's own arguments), and ``on_kill`` goes to the hook. For a cluster master the
executors get ``airflow_rbak`` and its dependencies as an environment archive (built once per code version)
unless ``ship_package=False`` says the cluster has them installed; a local master runs this interpreter. An
operator names the report key itself so it can read the summary back as its XCom.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.hooks.spark import DEFAULT_MASTER, RbakSparkSubmitHook, submit_hook
from airflow_rbak.operators.steps import lock_owner
from airflow_rbak.operators.storage_connection import StorageConnectionMixin
from airflow_rbak.segments.reports import ReportError, load_report, new_report_key
from airflow_rbak.segments.shipping import build_executor_env, job_script
from airflow_rbak.storage import open_storage

#: What ``spark_options`` may set: the provider hook's constructor arguments, but the connection (``conn_id``).
SPARK_OPTIONS = frozenset(inspect.signature(SparkSubmitHook).parameters) - {"conn_id"}


class RbakSparkJobOperator(StorageConnectionMixin, BaseOperator):
    """Run one RBAK Spark job with spark-submit; the XCom is its report's summary, with ``report_key`` added.

    A job operator subclasses this and sets:

    - ``job_module``: the job script's name in ``airflow_rbak/segments/jobs/`` (``"verify_segments"``);
    - ``report_job``: the job its report is saved as (``"verify"``), which the summary is read back by;
    - ``job_arguments()``: the job's own options. ``execute`` puts ``--storage-url``, ``--backup-id`` and
      ``--report-key`` before them, and ``spark_options["application_args"]`` after.

    Arguments: ``conn_id`` is the Spark connection (none stored: ``default_master``); ``spark_options`` are the
    provider's ``SparkSubmitHook`` arguments (``conf``, ``executor_memory``, ``py_files``, ``name``...), templated.
    A failed submit raises ``AirflowException`` with the report's summary, or why there is none.
    """

    job_module: ClassVar[str]
    report_job: ClassVar[str]
    template_fields: Sequence[str] = ("storage_url", "backup_id", "conn_id", "spark_options")

    def __init__(
        self,
        *,
        storage_url: str,
        backup_id: str,
        conn_id: str = "spark_default",
        spark_options: Mapping[str, Any] | None = None,
        ship_package: bool = True,
        package_cache_dir: str | None = None,
        default_master: str = DEFAULT_MASTER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        unknown = sorted(set(spark_options or {}) - SPARK_OPTIONS)
        if unknown:
            raise ConfigurationError(f"spark_options: not SparkSubmitHook arguments: {unknown}"
                                     + (" (the connection is conn_id)" if "conn_id" in unknown else ""))
        self.storage_url = storage_url
        self.backup_id = backup_id
        self.conn_id = conn_id
        self.spark_options: dict[str, Any] = {"name": f"rbak-{self.report_job}", **(spark_options or {})}
        self.ship_package = ship_package
        self.package_cache_dir = package_cache_dir
        self.default_master = default_master
        self.report_key: str | None = None
        self.spark_hook: RbakSparkSubmitHook | None = None

    def job_arguments(self) -> list[str]:
        """The job's own options (subclasses add theirs)."""
        return []

    def execute(self, context: Any) -> dict[str, Any]:
        """Submit the job; return its report's summary (the report key is added to it)."""
        report_key = self.report_key = new_report_key(self.backup_id, self.report_job)
        cache = self.package_cache_dir
        executor_env = (lambda: build_executor_env(cache)) if self.ship_package else None
        try:
            with submit_hook(self.conn_id, self.hook_options(report_key), default_master=self.default_master,
                             executor_env=executor_env) as hook:
                self.spark_hook = hook
                hook.submit(job_script(self.job_module))
        except AirflowException as exc:
            raise AirflowException(f"{exc}\nRBAK report: {self._summary_or_reason(report_key)}") from exc
        return self._summary(report_key)

    def hook_options(self, report_key: str) -> dict[str, Any]:
        """``spark_options`` with the job's arguments first in ``application_args``."""
        common = ["--storage-url", self.storage_url, "--backup-id", self.backup_id, "--report-key", report_key]
        given = self.spark_options.get("application_args") or []
        options = {**self.spark_options, "application_args": [*common, *self.job_arguments(), *given]}
        return options

    def on_kill(self) -> None:
        """Stop the running spark-submit (and its driver, where the provider's hook tracks one)."""
        if self.spark_hook is not None:
            self.spark_hook.on_kill()

    def _summary(self, report_key: str) -> dict[str, Any]:
        report = load_report(open_storage(self.storage_url), report_key, self.report_job)
        return {**report["summary"], "report_key": report_key}

    def _summary_or_reason(self, report_key: str) -> str:
        try:
            return orjson.dumps(self._summary(report_key)).decode()
        except ReportError as exc:
            return f"none ({exc})"


class RbakCompactSegmentsOperator(RbakSparkJobOperator):
    """Merge each queue's small segments (``segments/jobs/compact_segments.py``)."""

    job_module = "compact_segments"
    report_job = "compact"
    template_fields: Sequence[str] = (*RbakSparkJobOperator.template_fields, "threshold_bytes", "segment_max_bytes")

    def __init__(self, *, threshold_bytes: int, segment_max_bytes: int | None = None,
                 segment_max_interval_ms: int | None = None, compression: str = "zstd", level: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold_bytes = threshold_bytes
        self.segment_max_bytes, self.segment_max_interval_ms = segment_max_bytes, segment_max_interval_ms
        self.compression, self.level = compression, level
        self.lock_owner: str | None = None

    def job_arguments(self) -> list[str]:
        args = ["--threshold-bytes", str(self.threshold_bytes), "--compression", self.compression, "--level", str(self.level)]
        return args + _options(segment_max_bytes=self.segment_max_bytes, segment_max_interval_ms=self.segment_max_interval_ms,
                               lock_owner=self.lock_owner)

    def execute(self, context: Any) -> dict[str, Any]:
        """Compact under the backup's lock, owned by the DAG run: a retried task carries on, another run is refused."""
        self.lock_owner = lock_owner(context)
        return super().execute(context)


class RbakVerifyBackupOperator(RbakSparkJobOperator):
    """Deep-check a backup's segments (``segments/jobs/verify_segments.py``); fails when any defect is found."""

    job_module = "verify_segments"
    report_job = "verify"
    template_fields: Sequence[str] = (*RbakSparkJobOperator.template_fields, "sample_percent", "encode_report",
                                      "max_decompressed_bytes")

    def __init__(self, *, sample_percent: float = 100.0, encode_report: str | None = None,
                 max_decompressed_bytes: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sample_percent = sample_percent
        self.encode_report = encode_report
        self.max_decompressed_bytes = max_decompressed_bytes

    def job_arguments(self) -> list[str]:
        return ["--sample-percent", str(self.sample_percent)] + _options(
            encode_report=self.encode_report, max_decompressed_bytes=self.max_decompressed_bytes)


def _options(**values: Any) -> list[str]:
    """``--name value`` for every option that is set."""
    return [part for name, value in values.items() if value is not None for part in (f"--{name.replace('_', '-')}", str(value))]
