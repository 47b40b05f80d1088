"""Operators for the broker-facing steps of a backup, thin over :class:`BackupRun`.

discover → export definitions → capture (one mapped task per queue) →
[Spark encode and verify, in ``operators/spark.py``] → finalize (in
``operators/finalize.py``). Each builds the run's settings, calls the
:class:`BackupRun` method of the same name and returns its small JSON
summary as its XCom; errors of the layers below become Airflow errors that
say what failed and what to do, configuration errors without retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.backup.run import STREAM_MODES, BackupRun
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector
from airflow_rbak.capture.queue_features import DEFAULT_CONSUMER_TIMEOUT_MS
from airflow_rbak.display import package_logger
from airflow_rbak.hooks.deployment import backup_preflight
from airflow_rbak.hooks.rabbitmq import RabbitMQHook
from airflow_rbak.links import RabbitMQQueueLink, queue_url
from airflow_rbak.operators import metrics
from airflow_rbak.operators.steps import backup_run, mapped_payload, run_step
from airflow_rbak.operators.storage_connection import StorageConnectionMixin
from airflow_rbak.segments import stages
from airflow_rbak.segments.encode import QueueRef

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter

class RbakBrokerOperator(StorageConnectionMixin, BaseOperator):
    """Base of the broker-facing operators: connection id, backup location and id."""

    template_fields: Sequence[str] = ("rabbitmq_conn_id", "storage_url", "backup_id")

    def __init__(self, *, storage_url: str, backup_id: str, rabbitmq_conn_id: str = "rabbitmq_default",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_url, self.backup_id, self.rabbitmq_conn_id = storage_url, backup_id, rabbitmq_conn_id

    def backup_run(self, context: Any, **settings: Any) -> BackupRun:
        """The :class:`BackupRun` for this task's connection and settings (validated before any I/O).

        Its lock owner is the DAG run, so every task of the run works under one lock.
        """
        return backup_run(context, RabbitMQHook(self.rabbitmq_conn_id).get_conn(), str(self.backup_id),
                          str(self.storage_url), **settings)


class RbakDiscoverQueuesOperator(RbakBrokerOperator):
    """List the queues to back up and write the manifest with ``completed_at: null``.

    Returns the queues (one JSON object each: Airflow maps only over a task's return value); with
    ``max_capture_tasks`` set, the queues in at most that many groups (lists), within Airflow's
    ``[core] max_map_length``. Pushes its summary as the ``summary`` XCom and each queue's name and type as
    ``queue_refs`` (what the encode step needs). The broker is contacted before anything is written, so an
    unreachable broker leaves no manifest.
    """

    template_fields: Sequence[str] = (*RbakBrokerOperator.template_fields, "vhosts", "include", "exclude", "queue_types",
                                      "break_lock", "allow_delivery_count_increase", "max_capture_tasks", "retention",
                                      "copy_retention", "include_definitions", "spark_conn_id")

    def __init__(self, *, vhosts: list[str] | None = None, include: list[str] | None = None, exclude: list[str] | None = None,
                 queue_types: list[str] | None = None, break_lock: bool = False, allow_delivery_count_increase: bool = False,
                 max_capture_tasks: int | None = None, retention: dict[str, Any] | None = None,
                 copy_retention: dict[str, Any] | None = None, include_definitions: bool = True,
                 spark_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: What the run's preflight checks besides the broker and location (``hooks/deployment.py``): the
        #: definitions export's tag, and the Spark connection's local Spark and Java (None: not checked).
        self.include_definitions, self.spark_conn_id = include_definitions, spark_conn_id
        self.vhosts, self.include, self.exclude, self.queue_types = vhosts, include, exclude, queue_types
        self.break_lock, self.allow_delivery_count_increase = break_lock, allow_delivery_count_increase
        self.max_capture_tasks = max_capture_tasks
        #: The run's retention params: checked against [rbak] retention here, before anything is written (and again
        #: where they are applied).
        self.retention, self.copy_retention = retention, copy_retention

    def selector(self) -> QueueSelector:
        return QueueSelector.from_params(self.vhosts, self.include, self.exclude, self.queue_types)

    def execute(self, context: Any) -> list[list[dict[str, Any]]]:
        settings = rbak_settings()
        run_step("retention settings", lambda: settings.run_retention("retention", self.retention))
        run_step("copy_retention settings", lambda: settings.run_retention("copy_retention", self.copy_retention))
        selector = run_step("discover", self.selector)
        run = self.backup_run(context, selector=selector, break_lock=bool(self.break_lock),
                              allow_delivery_count_increase=bool(self.allow_delivery_count_increase))
        run_step("preflight", lambda: backup_preflight(  # fails on a wrong setting before anything is written
            run.connection, str(self.rabbitmq_conn_id), str(self.storage_url), self.vhosts,
            bool(self.include_definitions), str(self.spark_conn_id) if self.spark_conn_id else None))
        found = run_step("discover", run.discover)
        context["ti"].xcom_push(key="summary", value=found.summary())
        log.info("backup %s: %d queues to capture from %s", found.backup_id, len(found.queues),
                 found.manifest.source_cluster)
        for q in found.expected_left_out:
            log.warning("queue %r in vhost %r will be left out: %s", q["queue"], q["vhost"], q["reason"])
        context["ti"].xcom_push(key="queue_refs", value=found.encode_inputs())
        queues = [asdict(q) for q in found.queues]
        return mapped_payload(queues, self.max_capture_tasks)


class RbakExportDefinitionsOperator(RbakBrokerOperator):
    """Store the broker's definitions (exchanges, queues, bindings, policies; users only with ``include_users``)."""

    template_fields: Sequence[str] = (*RbakBrokerOperator.template_fields, "include_definitions", "compression",
                                      "include_users")

    def __init__(self, *, include_definitions: bool = True, compression: str = "zstd", include_users: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.include_definitions, self.compression, self.include_users = include_definitions, compression, include_users

    def execute(self, context: Any) -> dict[str, Any]:
        if not self.include_definitions:
            return {"included": False}
        run = self.backup_run(context, compression=self.compression, include_users=bool(self.include_users))
        return run_step("export definitions", run.export_definitions)


class RbakCaptureQueueOperator(RbakBrokerOperator):
    """Capture each queue of a group (``queue_info``, a list of one or more) in turn into the backup's staging
    without changing it; logs progress while it runs. Returns the list of its queues' results in order.
    """

    template_fields: Sequence[str] = (*RbakBrokerOperator.template_fields, "queue_info", "compression",
                                      "allow_delivery_count_increase", "on_unsafe_queue", "consumer_timeout_ms", "max_hold_ms",
                                      "streams",
                                      "segment_work")
    operator_extra_links = (RabbitMQQueueLink(),)

    def __init__(self, *, queue_info: list[dict[str, Any]], compression: str = "zstd",
                 allow_delivery_count_increase: bool = False, on_unsafe_queue: str = "skip",
                 consumer_timeout_ms: int = DEFAULT_CONSUMER_TIMEOUT_MS, max_hold_ms: int | None = None,
                 streams: str = "incremental",
                 progress_interval: float | None = None, segment_work: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queue_info, self.compression, self.streams = queue_info, compression, streams
        #: The DAG's segment settings: when given, a queue small enough is encoded and verified here, right after
        #: its capture (:func:`airflow_rbak.segments.stages.encode_captured`); None leaves every queue to the step.
        self.segment_work = segment_work
        self.allow_delivery_count_increase = allow_delivery_count_increase
        self.progress_interval = progress_interval  # None: [rbak] progress_interval, read when the task runs
        self.on_unsafe_queue, self.consumer_timeout_ms = on_unsafe_queue, consumer_timeout_ms
        self.max_hold_ms = max_hold_ms
        self.rbak_queue_url: str | None = None

    def execute(self, context: Any) -> list[dict[str, Any]]:
        if str(self.streams) not in STREAM_MODES:
            raise AirflowFailException(f"streams must be one of {list(STREAM_MODES)}, got {self.streams!r}")
        run = self.backup_run(context, compression=self.compression, incremental_streams=str(self.streams) == "incremental",
                              allow_delivery_count_increase=bool(self.allow_delivery_count_increase),
                              on_unsafe_queue=str(self.on_unsafe_queue), consumer_timeout_ms=int(self.consumer_timeout_ms),
                              max_hold_ms=None if self.max_hold_ms in (None, "", "None") else int(self.max_hold_ms))
        given = self.segment_work
        segments = run_step("segment settings", lambda: stages.work_from(given)) if given is not None else None
        return [self.capture(run, QueueInfo(**q), segments) for q in self.queue_info]

    def _progress_interval(self) -> float:
        if self.progress_interval is not None:
            return float(self.progress_interval)
        return run_step("[rbak] progress_interval", lambda: rbak_settings().progress_interval_s())

    def capture(self, run: BackupRun, info: QueueInfo,
                segments: tuple[stages.SegmentWork, stages.Placement] | None = None) -> dict[str, Any]:
        """One queue's capture, with its progress logged, then its segments when they are made here; the task's
        link shows the first queue of a group."""
        self.rbak_queue_url = self.rbak_queue_url or queue_url(run.connection.management_base_url, info.vhost, info.name)
        result = asdict(run_step(f"capture of queue {info.name!r} in vhost {info.vhost!r}",
                                 lambda: run.capture(info, progress_every=self._progress_interval())))
        metrics.captured(result, str(self.storage_url))
        if segments is not None and not result["left_out"]:
            ref = QueueRef(info.vhost, info.name, info.queue_type)
            done = run_step(f"encode of queue {info.name!r} in vhost {info.vhost!r}", lambda: stages.encode_captured(
                str(self.storage_url), str(self.backup_id), ref, *segments))
            if done is not None:
                result["segments"] = done
                log.info("encoded %s/%s here: %d segments, %.1f MB in %.1fs; verify %s %s in %.1fs", info.vhost,
                         info.name, done["segments"], done["bytes"] / 1e6, done["seconds"], done["verify"]["mode"],
                         "ok" if done["verify"]["ok"] else "found defects (the segment step encodes it again)",
                         done["verify"]["seconds"])
        return result
