"""One restore from start to finish, as separate steps the DAG runs as separate tasks.

``plan`` (manifest, verified segments, counts in the window; then the
target: its cluster, what each target queue holds, what the definitions
import would create or replace; a refusal stops the run here) ->
``definitions`` (rollback snapshot, then import; only if asked) ->
``publish`` (groups of queues, mapped tasks in the DAG; ``publish_threads`` queues at once) ->
``report``. :meth:`RestoreRun.run` does them all in order. Every step takes
and returns plain JSON-able objects, so Airflow can pass them as XCom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.display import count, package_logger
from airflow_rbak.progress import Sample
from airflow_rbak.restore import sections
from airflow_rbak.restore.checkpoints import open_checkpoint_store
from airflow_rbak.restore.definitions import DefinitionsResult, plan_definitions, restore_definitions
from airflow_rbak.restore.errors import PlanChangedError, PublishError, RestoreRefusedError, UnroutableMessagesError
from airflow_rbak.restore.offsets import restore_consumer_offsets
from airflow_rbak.restore.plan import plan_restore
from airflow_rbak.restore.plan_log import summary_lines
from airflow_rbak.restore.queue_pool import QueueOutcome, publish_each
from airflow_rbak.restore.queue_restore import QueueResult, restore_queue
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan, queue_checkpoint
from airflow_rbak.restore.target import check_target, inspect_target, refusal
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal, default_seal

log = package_logger(__name__)


@dataclass
class RestoreReport:
    """The outcome of a restore: the plan's counts beside what was published, per queue."""

    backup_id: str
    dry_run: bool
    planned: int
    published: int
    queues: list[dict[str, Any]]
    skipped_segments: list[dict[str, Any]]
    definitions: dict[str, Any] | None = None
    unroutable: int = 0
    segments_verified: int = 0
    segments_outside_window: int = 0
    consumer_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    source_cluster: str | None = None
    target_cluster: str | None = None
    refused: str | None = None
    #: What each plan section reports (:meth:`.section.PlanSection.report_fields`: the transformations, a selection,
    #: a replay, the queues refused...), by field name; the report's JSON carries them beside the fields above.
    section_fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON: its fields, then each section's."""
        return {k: v for k, v in self.__dict__.items() if k != "section_fields"} | self.section_fields


def report_line(report: Mapping[str, Any]) -> str:
    """A restore report (``RestoreReport`` as JSON) in one line, as the task log and the backups view word it.

    A dry run's ``published`` counts what a real run would publish: it is said so, never as published.
    """
    skipped = count(len(report.get("skipped_segments") or []), "damaged segment")
    if report.get("dry_run"):
        return (f"dry run: {report['planned']:,} planned, {report['published']:,} would be published, nothing was "
                f"published; {skipped} would be skipped")
    return (f"{report['planned']:,} planned, {report['published']:,} published this run, {report['unroutable']:,} "
            f"unroutable, {skipped} skipped")


class RestoreRun:
    """The steps of one restore from one storage location into one broker."""

    def __init__(self, connection: RabbitMQConnection, request: RestoreRequest, storage: Storage | None = None,
                 seal: StateSeal | None = None, run_ref: str | None = None) -> None:
        self.connection = connection
        self.settings = request
        self.storage = storage or open_storage(request.storage_url)
        #: Seals the checkpoints and the import record this run writes to the location (``storage.sealed``).
        self.seal = seal or default_seal()
        #: The restore run the import record names (``import_record.airflow_run_ref``; None: a new ``cli:`` one).
        self.run_ref = run_ref

    def run(self) -> RestoreReport:
        """Every step in order; a definitions failure stops the run before any message is published. The queues are
        published ``publish_threads`` at a time (:mod:`.queue_pool`); a queue that fails or is refused (its resume
        point drifted, its target gained messages, another run publishes it) is left out, the others go on, and the
        run then fails naming each."""
        plan = self.plan()
        definitions = self.definitions(plan) if self.settings.restore_definitions else None
        outcomes = publish_each(plan.queues, lambda queue: self.publish(plan, queue), self.publish_threads(plan),
                                in_order=self.in_order(plan))
        if any(o.error is not None for o in outcomes):
            raise _failure(outcomes)
        return self.report(plan, [o.result for o in outcomes if o.result is not None], definitions)

    def publish_threads(self, plan: RestorePlan) -> int:
        """How many queues are published at once: one for a recovery to a point in time, whose journal's records
        follow the snapshot's queues in order; ``publish_threads`` otherwise."""
        return 1 if self.in_order(plan) else self.settings.publish_threads

    @staticmethod
    def in_order(plan: RestorePlan) -> bool:
        """A recovery to a point in time publishes its queues one by one and stops at the first failure."""
        return plan.journal is not None

    def plan(self) -> RestorePlan:
        """Read the manifest, verify the segments the window uses, count; logs the plan."""
        plan = plan_restore(self.storage, self.settings)
        with (
            ManagementClient(self.connection) as client,
            open_checkpoint_store(self.settings.checkpoint_state, self.storage, self.seal) as checkpoints,
        ):
            if self.settings.restore_definitions:  # first: a refused queue is neither inspected nor published
                proposal = plan_definitions(client, self.storage, self.settings, plan.backup_id, plan.definitions_key,
                                            plan.backup_vhosts, plan.queue_vhosts)
                plan = sections.with_definitions(replace(plan, definitions_changes=proposal.changes.to_json(),
                                                         migration=proposal.migration,
                                                         definitions_pin=proposal.pin.to_json(),
                                                         definitions_import=proposal.view(),
                                                         definitions_compatibility=proposal.compatibility,
                                                         definitions_not_imported=proposal.not_imported), self.settings)
            plan = inspect_target(plan, client, self.connection, self.settings, checkpoints)
        for line in summary_lines(plan):
            log.info("%s", line)
        check_target(plan, self.settings)
        return plan

    def definitions(self, plan: RestorePlan, run_ref: str | None = None) -> DefinitionsResult:
        """Check the import against the plan's pin, then rollback snapshot and import (dry run: only the counts of what
        would be imported); a drift from the pin raises PlanChangedError with nothing imported. The import record
        names ``run_ref`` (default: the run's own) and the target cluster, so a rollback can tell its import."""
        with ManagementClient(self.connection) as client:
            return restore_definitions(client, self.storage, self.settings, plan, seal=self.seal,
                                       run_ref=run_ref or self.run_ref)

    def publish(self, plan: RestorePlan, queue: QueuePlan) -> QueueResult:
        """Restore one queue of the plan."""
        self._check_same_target(plan)
        with open_checkpoint_store(self.settings.checkpoint_state, self.storage, self.seal) as checkpoints:
            result = restore_queue(self.connection, self.storage, self.settings, plan, queue, checkpoints)
            if self.settings.restore_consumer_offsets and not self.settings.dry_run and queue.queue_type == "stream":
                cp = queue_checkpoint(plan, queue, self.settings)
                result.consumer_offsets = restore_consumer_offsets(self.connection, checkpoints, cp, queue)
        return result

    def published_sampler(self, plan: RestorePlan, queue: QueuePlan) -> Sample:
        """The confirmed count of one queue's restore, read from where its checkpoints live (progress lines)."""
        blank = queue_checkpoint(plan, queue, self.settings)

        def sample() -> tuple[int, int | None] | None:
            with open_checkpoint_store(self.settings.checkpoint_state, self.storage, self.seal) as store:
                cp = store.load(blank)
            return (cp.published, None) if cp.stored else None

        return sample

    def _check_same_target(self, plan: RestorePlan) -> None:
        """The plan inspected one cluster; publishing into another would skip its checks (and its checkpoints)."""
        with ManagementClient(self.connection) as client:
            found = client.cluster_identity()
        if found != plan.target_cluster_id:
            raise RestoreRefusedError(f"the connection now reaches cluster {found!r}, not {plan.target_cluster_id!r} that "
                                      "the plan inspected; nothing was published. Plan the restore again")

    def report(self, plan: RestorePlan, results: Sequence[QueueResult | dict[str, Any]],
               definitions: DefinitionsResult | dict[str, Any] | None = None) -> RestoreReport:
        """Sum up; raises UnroutableMessagesError when records were returned, unless allowed."""
        rows = [r.to_json() if isinstance(r, QueueResult) else dict(r) for r in results]
        report = RestoreReport(
            backup_id=plan.backup_id,
            dry_run=self.settings.dry_run,
            planned=plan.records_in_window,
            published=sum(r["published"] for r in rows),
            queues=rows,
            skipped_segments=[s.__dict__ | {"reasons": list(s.reasons)} for s in plan.skipped_segments],
            definitions=definitions.to_json() if isinstance(definitions, DefinitionsResult) else definitions,
            unroutable=sum(len(r["unroutable"]) for r in rows),
            segments_verified=plan.segments_verified,
            segments_outside_window=plan.segments_outside_window,
            consumer_offsets={
                f"{r['target_vhost']}/{r['target_queue']}": r["consumer_offsets"] for r in rows if r.get("consumer_offsets")
            },
            source_cluster=plan.source_cluster,
            target_cluster=plan.target_cluster,
            refused=refusal(plan, self.settings),
            section_fields=sections.report_fields(plan),
        )
        log.info("restore of %s: %s", plan.backup_id, report_line(report.to_json()))
        if report.unroutable and not self.settings.allow_unroutable:
            where = "; ".join(f"{r['source_vhost']}/{r['source_queue']}: {len(r['unroutable'])}" for r in rows if r["unroutable"])
            raise UnroutableMessagesError(
                f"{report.unroutable} records were returned unroutable ({where}); the report lists their segment and "
                "index. Create the missing bindings and restore those, or set allow_unroutable")
        for left_out in sections.left_out(plan):
            if not self.settings.dry_run:
                raise left_out
        return report


def _failure(outcomes: Sequence[QueueOutcome[QueuePlan, QueueResult]]) -> Exception:
    """The error of a run some of whose queues failed: the one error itself, or one naming each failed queue (and
    those not started after it); a refusal's kind when every one was refused (a re-run would be refused again), a
    failure's otherwise (a re-run resumes each failed queue after its checkpoint)."""
    failed = [o for o in outcomes if o.error is not None]
    not_started = [o.queue.task_id for o in outcomes if not o.started]
    if len(failed) == 1 and not not_started:
        return failed[0].error  # type: ignore[return-value]
    errors = [o.error for o in failed]
    if all(isinstance(e, PlanChangedError) for e in errors):
        kind: type[Exception] = PlanChangedError
    elif all(isinstance(e, RestoreRefusedError) for e in errors):
        kind = RestoreRefusedError
    else:
        kind = PublishError
    done = len(outcomes) - len(failed) - len(not_started)
    return kind(f"{len(failed)} of {len(outcomes)} queues failed or were refused ({done} restored): "
                + " | ".join(f"{o.queue.task_id}: {o.error}" for o in failed)
                + (f"; not started after the failure: {', '.join(not_started)}" if not_started else ""))
