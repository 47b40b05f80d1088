"""Operators for the steps of a restore, thin over :class:`airflow_rbak.restore.RestoreRun`.

plan → definitions → publish (mapped tasks, each a group of queues) → report. Every
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
from airflow.sdk.exceptions import AirflowException, AirflowFailException

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
from airflow_rbak.restore.queue_pool import QueueOutcome, publish_each

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


def publish_tasks(queues: int, max_publish_tasks: Any, publish_threads: int) -> int | None:
    """How many publish tasks the plan maps: one per ``publish_threads`` queues (each task publishes that many at
    once, so sequential tasks, as ``airflow dags test`` runs them, still publish side by side), at most
    ``max_publish_tasks``; None (one per queue) where neither groups."""
    if max_publish_tasks is None and publish_threads <= 1:
        return None
    by_threads = max(1, -(-queues // publish_threads))
    return by_threads if max_publish_tasks is None else min(int(max_publish_tasks), by_threads)


class RbakRestorePlanOperator(RbakRestoreOperator):
    """Read the manifest, verify the segments the window needs, count; the plan goes to the log (once: the engine
    logs it) and XCom.

    Returns the queues in groups, one publish task each (:func:`publish_tasks`: up to ``publish_threads`` queues a
    group, at most ``max_publish_tasks`` groups, within Airflow's ``max_map_length``), and pushes the whole plan as
    the ``plan`` XCom.
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
        groups = [queues] if run.in_order(plan) else mapped_payload(queues, publish_tasks(
            len(queues), self.max_publish_tasks, run.settings.publish_threads))
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
    """Publish the records in the window of each queue of a group (``restore_queue``, a list of one or more),
    ``publish_threads`` queues at once (one, in order, for a recovery to a point in time), each resuming after its
    checkpoint; returns the list of the group's results. The group must be the one the approved plan handed to this
    task's map index. A queue that fails does not stop the others: each ends its queue, its result logged, and the
    task then fails naming each failed queue (a retry resumes them; the completed ones find their checkpoint done)."""

    template_fields: Sequence[str] = (*RbakApprovedRestoreOperator.template_fields, "restore_queue")

    def __init__(self, *, restore_queue: Sequence[Mapping[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.restore_queue = restore_queue

    def execute(self, context: Any) -> list[dict[str, Any]]:
        run = self.restore_run()
        sealed = self.approved_plan(run, context)
        restore_step("authorization", lambda: authority.check_group(sealed, context["ti"].map_index, self.restore_queue))
        plan = sealed.plan
        outcomes = publish_each(list(self.restore_queue), lambda queue: self.publish(run, plan, queue),
                                run.publish_threads(plan), in_order=run.in_order(plan))
        failed = [o for o in outcomes if o.error is not None]
        if failed:
            raise group_failure(outcomes)
        return [o.result for o in outcomes if o.result is not None]

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


def group_failure(outcomes: Sequence[QueueOutcome[Mapping[str, Any], dict[str, Any]]]) -> Exception:
    """The error of a publish task some of whose queues failed: the one error itself, or one naming each failed queue
    (each error names its queue: ``rbak publish of vhost/queue failed``) and those not started after a failure; it
    fails without retries only when every failure would (refusals), so a retry resumes the queues that stopped."""
    failed = [o.error for o in outcomes if o.error is not None]
    not_started = [f"{o.queue['source_vhost']}/{o.queue['source_queue']}" for o in outcomes if not o.started]
    if len(failed) == 1 and not not_started:
        return failed[0]
    done = len(outcomes) - len(failed) - len(not_started)
    message = (f"{len(failed)} of the task's {len(outcomes)} queues failed ({done} published, their results logged): "
               + " | ".join(map(str, failed))
               + (f"; not started after the failure: {', '.join(not_started)}" if not_started else ""))
    kind = AirflowFailException if all(isinstance(e, AirflowFailException) for e in failed) else AirflowException
    return kind(message)


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
