"""Operators for the steps of a restore, thin over :class:`airflow_rbak.restore.RestoreRun`.

plan → definitions → publish (one mapped task per queue) → report. Every
operator takes the restore's request as one templated ``restore_request``
mapping (the fields of :class:`RestoreRequest`), so the DAG's ``Param``s
flow through without each operator re-declaring them. Results are small
JSON objects for XCom; RBAK errors become Airflow errors via ``run_step``
(invalid settings fail without retries).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.airflow_settings import rbak_settings, state_seal
from airflow_rbak.display import package_logger
from airflow_rbak.hooks.rabbitmq import RabbitMQHook
from airflow_rbak.operators import metrics
from airflow_rbak.operators.steps import flat_results, mapped_payload, run_step
from airflow_rbak.operators.storage_connection import StorageConnectionMixin
from airflow_rbak.progress import ProgressReporter
from airflow_rbak.restore import BackupNotRestorableError, RestorePlan, RestoreRequest, RestoreRun, authority
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.import_record import airflow_run_ref

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter

T = TypeVar("T")


def restore_step(step: str, action: Callable[[], T]) -> T:
    """:func:`run_step`, except that a refusal fails at once, without retries: a retry would only be refused again."""
    def refusing() -> T:
        try:
            return action()
        except (RestoreRefusedError, BackupNotRestorableError) as exc:
            raise AirflowFailException(f"rbak {step} refused: {exc}") from exc
    return run_step(step, refusing)


class RbakRestoreOperator(StorageConnectionMixin, BaseOperator):
    """Base of the restore operators: the target connection and the restore's settings."""

    template_fields: Sequence[str] = ("rabbitmq_conn_id", "restore_request")

    def __init__(self, *, restore_request: Mapping[str, Any], rabbitmq_conn_id: str = "rabbitmq_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.restore_request, self.rabbitmq_conn_id = restore_request, rabbitmq_conn_id

    def restore_run(self) -> RestoreRun:
        """The engine for this task (settings validated before any I/O)."""
        settings = run_step("setup", lambda: RestoreRequest(**dict(self.restore_request)))
        return run_step("setup", lambda: RestoreRun(RabbitMQHook(self.rabbitmq_conn_id).get_conn(), settings,
                                                    seal=state_seal()))


def run_ref(context: Any) -> authority.RunRef:
    """The DAG run a task belongs to, as sealed plans and approvals name it."""
    return authority.RunRef(context["ti"].dag_id, context["run_id"])


class RbakApprovedRestoreOperator(RbakRestoreOperator):
    """Base of the steps after ``approve``: each acts only on the sealed plan a sealed approval covers
    (:mod:`airflow_rbak.restore.authority`), whatever Airflow says of the approve task's state."""

    template_fields: Sequence[str] = (*RbakRestoreOperator.template_fields, "plan", "approval")

    def __init__(self, *, plan: Mapping[str, Any] | None, approval: Mapping[str, Any] | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan, self.approval = plan, approval

    def approved_plan(self, run: RestoreRun, context: Any) -> authority.SealedPlan:
        """The plan this step may act on; fails without retries, naming what is missing or changed, otherwise."""
        given = self.approval.get("approval") if isinstance(self.approval, Mapping) else None  # approve's result
        sealed, approval = restore_step("authorization", lambda: authority.authorize(
            run.seal, run_ref(context), self.plan, given, self.restore_request))
        log.info("acting on the plan of try %d (SHA-256 %s), %s", sealed.plan_try, sealed.digest, approval.describe())
        return sealed


class RbakRestorePlanOperator(RbakRestoreOperator):
    """Read the manifest, verify the segments the window needs, count; the plan goes to the log (once: the engine
    logs it) and XCom.

    Returns one object per queue (the publish task maps over it), or with ``max_publish_tasks`` the queues in
    at most that many groups (within Airflow's ``max_map_length``), and pushes the whole plan as the ``plan``
    XCom.
    """

    template_fields: Sequence[str] = (*RbakRestoreOperator.template_fields, "max_publish_tasks")

    def __init__(self, *, max_publish_tasks: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_publish_tasks = max_publish_tasks

    def execute(self, context: Any) -> list[list[dict[str, Any]]]:
        run = self.restore_run()
        plan = restore_step("plan", run.plan)  # which logs the plan
        queues = [{"source_vhost": q.source_vhost, "source_queue": q.source_queue, "target": f"{q.target_vhost}/{q.target_queue}",
                   "records": q.records_in_window, "target_holds": q.target_depth, "adds": q.to_add} for q in plan.queues]
        # a recovery to a point in time publishes in one task: the snapshot's queues, then the journal in its order
        groups = [queues] if plan.journal is not None else mapped_payload(queues, self.max_publish_tasks)
        sealed = authority.seal_plan(run.seal, run_ref(context), plan, self.restore_request, groups,
                                     context["ti"].try_number)
        log.info("plan of try %d sealed: SHA-256 %s", context["ti"].try_number, sealed["body"]["digest"])
        context["ti"].xcom_push(key="plan", value=sealed)
        return groups


class RbakRestoreDefinitionsOperator(RbakApprovedRestoreOperator):
    """Save the target's definitions for rollback, then import the selected ones (if asked)."""

    def execute(self, context: Any) -> dict[str, Any]:
        run = self.restore_run()
        plan = self.approved_plan(run, context).plan
        if not run.settings.restore_definitions:
            return {"imported": False, "requested": False}
        ref = run_ref(context)  # the import record names this run, so that a rollback can tell its import
        result = restore_step("definitions", lambda: run.definitions(plan, airflow_run_ref(ref.dag_id, ref.run_id)))
        log.info("definitions: rollback snapshot %s, imported %s, per vhost %s", result.rollback_key, result.imported,
                 result.vhosts)
        return result.to_json()


class RbakRestoreQueueOperator(RbakApprovedRestoreOperator):
    """Publish the records in the window of each queue of a group (``restore_queue``, a list of one or more) in turn,
    resuming after its checkpoint; returns the list of the group's results. The group must be the one the approved
    plan handed to this task's map index."""

    template_fields: Sequence[str] = (*RbakApprovedRestoreOperator.template_fields, "restore_queue")

    def __init__(self, *, restore_queue: Sequence[Mapping[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.restore_queue = restore_queue

    def execute(self, context: Any) -> list[dict[str, Any]]:
        run = self.restore_run()
        sealed = self.approved_plan(run, context)
        restore_step("authorization", lambda: authority.check_group(sealed, context["ti"].map_index, self.restore_queue))
        return [self.publish(run, sealed.plan, queue) for queue in self.restore_queue]

    def publish(self, run: RestoreRun, plan: RestorePlan, restore_queue: Mapping[str, Any]) -> dict[str, Any]:
        """One queue of the plan, its progress logged, counted."""
        name = f"{restore_queue['source_vhost']}/{restore_queue['source_queue']}"
        queue = plan.queue(restore_queue["source_vhost"], restore_queue["source_queue"])
        with ProgressReporter(name, run.published_sampler(plan, queue), queue.records_in_window,
                              interval=rbak_settings().progress_interval_s()):
            result = restore_step(f"publish of {name}", lambda: run.publish(plan, queue))
        if result.dry_run:
            log.info("%s -> %s/%s: dry run, %d would be published, nothing was published", name, result.target_vhost,
                     result.target_queue, result.published)
        else:
            log.info("%s -> %s/%s: %d published now, %d in total, %d unroutable", name, result.target_vhost,
                     result.target_queue, result.published, result.published_total, len(result.unroutable))
        metrics.published(result.to_json(), run.settings.storage_url)
        return result.to_json()


class RbakRestoreReportOperator(RbakApprovedRestoreOperator):
    """Sum the restore up; fails when records came back unroutable (unless allowed)."""

    template_fields: Sequence[str] = (*RbakApprovedRestoreOperator.template_fields, "results", "definitions")

    def __init__(self, *, results: Sequence[Mapping[str, Any]] | None, definitions: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results, self.definitions = results, definitions

    def execute(self, context: Any) -> dict[str, Any]:
        run = self.restore_run()
        plan = self.approved_plan(run, context).plan
        definitions = dict(self.definitions) if self.definitions and self.definitions.get("requested", True) else None
        rows = flat_results(self.results)
        report = run_step("report", lambda: run.report(plan, rows, definitions))
        metrics.restore_reported(report.to_json(), run.settings.storage_url)
        return report.to_json()
