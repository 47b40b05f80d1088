"""Operators of the ``rbak_drill`` DAG, thin over :class:`airflow_rbak.drill.run.DrillRun`.

``RbakDrillOperator`` runs a whole drill (the scratch vhosts are created and deleted inside it), sends the
``rbak.drill.*`` metrics whatever the outcome, pushes the report, and fails when the drill failed, which calls the
failure notifier as any rbak task does (``[rbak] failure_notifier``, the freshness check's alert).
``RbakDrillCleanupOperator`` is the DAG's teardown: it deletes what a drill stopped mid-way (a worker lost, a
timeout) left of its run's scratch vhosts, each only if it carries the run's marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.airflow_settings import state_seal
from airflow_rbak.display import package_logger, printable
from airflow_rbak.drill.run import DrillRequest, DrillRun
from airflow_rbak.hooks.rabbitmq import RabbitMQHook
from airflow_rbak.operators import metrics
from airflow_rbak.operators.steps import run_step
from airflow_rbak.operators.storage_connection import StorageConnectionMixin

log = package_logger(__name__)


class _DrillOperator(StorageConnectionMixin, BaseOperator):
    """What both drill tasks take: the location, the broker, and the drill's selection (the DAG's params)."""

    template_fields: Sequence[str] = ("rabbitmq_conn_id", "storage_url", "backup_id", "vhosts", "queues",
                                      "sample_queues", "strip_user_id")

    def __init__(self, *, storage_url: str, rabbitmq_conn_id: str, backup_id: str = "latest",
                 vhosts: Sequence[str] = ("*",), queues: Sequence[str] = ("*",), sample_queues: int | str = 0,
                 strip_user_id: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_url, self.rabbitmq_conn_id, self.backup_id = storage_url, rabbitmq_conn_id, backup_id
        self.vhosts, self.queues, self.sample_queues, self.strip_user_id = vhosts, queues, sample_queues, strip_user_id

    def drill_run(self, run_id: str) -> DrillRun:
        """The engine for this task (settings validated before any I/O)."""
        request = run_step("setup", lambda: DrillRequest(
            self.storage_url, run_id, self.backup_id, tuple(self.vhosts), tuple(self.queues), int(self.sample_queues),
            self.strip_user_id))
        return run_step("setup", lambda: DrillRun(RabbitMQHook(self.rabbitmq_conn_id).get_conn(), request,
                                                  seal=state_seal()))


class RbakDrillOperator(_DrillOperator):
    """Restore a location's backup into scratch vhosts on ``rabbitmq_conn_id``'s broker, compare, delete, report."""

    def execute(self, context: Any) -> dict[str, Any]:
        report = self.drill_run(context["run_id"]).run()
        summary = report.to_json()
        metrics.drill_reported(summary)  # passed or not: the gauge is what a dashboard alerts on
        if not report.passed:
            context["ti"].xcom_push(key="report", value=summary)
            # no retry: the next scheduled drill tries again, and a damaged backup stays damaged
            raise AirflowFailException(printable(report.describe()))
        return summary


class RbakDrillCleanupOperator(_DrillOperator):
    """Teardown: delete this run's scratch vhosts that are left (each only if it carries the run's marker)."""

    def execute(self, context: Any) -> list[str]:
        run = self.drill_run(context["run_id"])
        deleted = run_step("cleanup", run.cleanup)
        if deleted:
            log.warning("deleted scratch vhosts the drill left: %s", ", ".join(deleted))
        return deleted
