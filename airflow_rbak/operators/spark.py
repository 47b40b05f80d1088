"""Operators that run the RBAK Spark jobs through spark-submit and return their report's summary.

Each is a ``SparkSubmitOperator`` (so every spark-submit option, the
``spark_default`` connection and ``on_kill`` work as usual) whose application
is the job script inside the installed package. Before submitting, it ships
``airflow_rbak`` as a zip in ``py_files`` (built once per code version)
unless ``ship_package=False`` says the cluster has it installed, and it
names the report key itself so it can read the summary back as its XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import orjson
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

from airflow_rbak.hooks.spark import DEFAULT_MASTER, RbakSparkSubmitHook
from airflow_rbak.operators.backup import lock_owner
from airflow_rbak.operators.storage_connection import StorageConnectionMixin
from airflow_rbak.segments.reports import ReportError, load_report, new_report_key
from airflow_rbak.segments.shipping import build_executor_env, build_package_zip, job_script
from airflow_rbak.storage import open_storage


class RbakSparkJobOperator(StorageConnectionMixin, SparkSubmitOperator):
    """Base of the RBAK job operators: common arguments, package shipping, the summary as XCom."""

    job_module: ClassVar[str]
    report_job: ClassVar[str]
    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "storage_url", "backup_id")

    def __init__(
        self,
        *,
        storage_url: str,
        backup_id: str,
        ship_package: bool = True,
        package_cache_dir: str | None = None,
        default_master: str = DEFAULT_MASTER,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"rbak-{self.report_job}")
        super().__init__(application=job_script(self.job_module), **kwargs)
        self.storage_url = storage_url
        self.backup_id = backup_id
        self.ship_package = ship_package
        self.package_cache_dir = package_cache_dir
        self.default_master = default_master
        self.report_key: str | None = None

    def job_arguments(self) -> list[str]:
        """The job's own options (subclasses add theirs)."""
        return []

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]  # the summary is the XCom
        """Submit the job; return its report's summary (the report key is added to it)."""
        report_key = self.report_key = new_report_key(self.backup_id, self.report_job)
        common = ["--storage-url", self.storage_url, "--backup-id", self.backup_id, "--report-key", report_key]
        self.application_args = [*common, *self.job_arguments(), *(self.application_args or [])]
        if self.ship_package:
            self.py_files = ",".join(filter(None, [self.py_files, build_package_zip(self.package_cache_dir)]))
        try:
            super().execute(context)
        except AirflowException as exc:
            raise AirflowException(f"{exc}\nRBAK report: {self._summary_or_reason(report_key)}") from exc
        return self._summary(report_key)

    def _summary(self, report_key: str) -> dict[str, Any]:
        report = load_report(open_storage(self.storage_url), report_key, self.report_job)
        return {**report["summary"], "report_key": report_key}

    def _summary_or_reason(self, report_key: str) -> str:
        try:
            return orjson.dumps(self._summary(report_key)).decode()
        except ReportError as exc:
            return f"none ({exc})"

    def _get_hook(self) -> RbakSparkSubmitHook:
        base = super()._get_hook()  # the provider's own mapping of operator fields to hook arguments
        cache = self.package_cache_dir
        shipped = (lambda: build_executor_env(cache)) if self.ship_package else None
        return RbakSparkSubmitHook(default_master=self.default_master, executor_env=shipped, **_hook_kwargs(base, self))


def _hook_kwargs(base: Any, op: SparkSubmitOperator) -> dict[str, Any]:
    """Rebuild the provider hook's arguments from the hook it built (its attributes mirror them)."""
    names = (
        "conf files py_files archives driver_class_path jars java_class packages exclude_packages repositories "
        "total_executor_cores executor_cores executor_memory driver_memory keytab proxy_user name num_executors "
        "status_poll_interval application_args env_vars verbose properties_file yarn_queue deploy_mode "
        "use_krb5ccache yarn_track_via_rm_api yarn_rm_auth"
    ).split()
    kwargs = {name: getattr(base, f"_{name}") for name in names}
    kwargs.update(
        conn_id=base._conn_id,
        principal=op.principal,
        spark_binary=op._spark_binary,
        post_submit_commands=op.post_submit_commands,
        track_driver_via_k8s_api=op._track_driver_via_k8s_api,
    )
    return kwargs


class RbakEncodeSegmentsOperator(RbakSparkJobOperator):
    """Encode a backup's staging into final segments and verify them (``spark_jobs/backup_segments.py``)."""

    job_module = "backup_segments"
    report_job = "encode"
    template_fields: Sequence[str] = (*RbakSparkJobOperator.template_fields, "queues", "segment_max_bytes")

    def __init__(
        self,
        *,
        compression: str = "zstd",
        level: int = 3,
        segment_max_bytes: int | None = None,
        segment_max_interval_ms: int | None = None,
        range_bytes: int | None = None,
        queues: list[dict[str, Any]] | None = None,
        write_manifest: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.compression, self.level = compression, level
        self.segment_max_bytes, self.segment_max_interval_ms, self.range_bytes = (
            segment_max_bytes,
            segment_max_interval_ms,
            range_bytes,
        )
        self.queues = queues
        self.write_manifest = write_manifest

    def job_arguments(self) -> list[str]:
        args = ["--compression", self.compression, "--level", str(self.level)]
        args += _options(segment_max_bytes=self.segment_max_bytes, segment_max_interval_ms=self.segment_max_interval_ms,
                         range_bytes=self.range_bytes)
        if self.queues:
            args += ["--queues-json", orjson.dumps(self.queues).decode()]
        return args + (["--write-manifest"] if self.write_manifest else [])


class RbakCompactSegmentsOperator(RbakSparkJobOperator):
    """Merge each queue's small segments (``spark_jobs/compact_segments.py``)."""

    job_module = "compact_segments"
    report_job = "compact"
    template_fields: Sequence[str] = (*RbakSparkJobOperator.template_fields, "threshold_bytes", "segment_max_bytes")

    def __init__(self, *, threshold_bytes: int, segment_max_bytes: int | None = None,
                 segment_max_interval_ms: int | None = None, compression: str = "zstd", level: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold_bytes = threshold_bytes
        self.segment_max_bytes, self.segment_max_interval_ms = segment_max_bytes, segment_max_interval_ms
        self.compression, self.level = compression, level

    def job_arguments(self) -> list[str]:
        args = ["--threshold-bytes", str(self.threshold_bytes), "--compression", self.compression, "--level", str(self.level)]
        return args + _options(segment_max_bytes=self.segment_max_bytes, segment_max_interval_ms=self.segment_max_interval_ms)

    def execute(self, context: Any) -> dict[str, Any]:  # type: ignore[override]  # the summary is the XCom
        """Compact under the backup's lock, owned by the DAG run: a retried task carries on, another run is refused."""
        self.application_args = [*(self.application_args or []), "--lock-owner", lock_owner(context)]
        return super().execute(context)


class RbakVerifyBackupOperator(RbakSparkJobOperator):
    """Deep-check a backup's segments (``spark_jobs/verify_segments.py``); fails when any defect is found."""

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
