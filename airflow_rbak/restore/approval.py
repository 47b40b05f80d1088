"""What a person approves before a restore changes its target: the whole plan, and when nobody is asked.

The ``rbak_restore`` DAG asks for approval between ``plan`` and anything that
changes the target (definitions import, publishing). The request shows what the
plan found and will do, from the plan and the settings alone: the backup and its
location (a storage URL never holds credentials), the target connection's id and
cluster name, per queue the records and where they go, and the modes that decide
what happens to what the target already holds. It never reads a connection, so
it cannot show a password. A dry run changes nothing and a run with
``skip_approval`` (automation) says so up front: neither waits. No Airflow here.

The request is a short summary with counts first, then the full plan: every
queue, then what each restore feature adds, in the order its plan section is
registered (:mod:`.sections`): in exchange mode every exchange and routing key the
records are published with, every definitions object the import creates or
replaces with the settings that act beyond it, the transformations, the records
too large for the target, ...
Nothing is cut short and nothing is in the export's order: each section is
sorted. What the approver saw is what the run does: the plan pins it
(:mod:`~airflow_rbak.restore.contract`).

Every name in the request (vhosts, queues, backup ids, the URL, cluster names,
definitions' labels) comes from a broker anyone with a queue may write to, so
each goes through :func:`~airflow_rbak.display.md_code`: it is shown literally
and cannot add rows, lines, links or images to what the approver reads.
"""

from __future__ import annotations

import datetime as dt

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore import sections
from airflow_rbak.restore.errors import RestoreRejectedError
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan


def approval_not_needed(request: RestoreRequest, skip_approval: bool) -> str | None:
    """Why this restore goes ahead without asking anyone (None: it must wait for approval)."""
    if request.dry_run:
        return "dry run: nothing is imported or published"
    if skip_approval:
        return "skip_approval is set"
    return None


def approval_subject(plan: RestorePlan) -> str:
    """One line: which backup, how many records, into which cluster."""
    target = plan.target_cluster or "(target cluster not inspected)"
    chosen = " selected" if plan.selection else ""
    return printable(f"Restore backup {plan.backup_id}: {plan.records_in_window}{chosen} records into {len(plan.queues)} "
                     f"queues of {target}?")


def approval_body(plan: RestorePlan, request: RestoreRequest, rabbitmq_conn_id: str) -> str:
    """The plan as Markdown for the approver: a summary with counts, then every queue and definitions object."""
    same_cluster = plan.source_cluster is not None and plan.source_cluster == plan.target_cluster
    same = " (**the same cluster the backup was taken from**)" if same_cluster else ""
    adds = sum(q.to_add for q in plan.queues)
    lines = [
        "**The user who triggered this run cannot approve it**: their Approve does not count (unless `[rbak] approval_by_trigger_user_allowed` is on).", "",  # noqa: E501
        f"**Backup** {md_code(plan.backup_id)} from {md_code(plan.storage_url)}, window {_window(plan)}, drawn from "
        f"{', '.join(md_code(b) for b in plan.drawn_from) or 'no segments'}.",
        "",
        f"**Target** connection {md_code(rabbitmq_conn_id)}, cluster {md_code(plan.target_cluster or '(not inspected)')}"
        f"{same}; source cluster {md_code(plan.source_cluster or '(unknown)')}.",
        "",
        f"**Messages**: {plan.records_in_window} records in the window, {adds} to publish now, "
        f"{md_code(f'publish_mode: {request.publish_mode}')}, "
        f"{md_code(f'on_existing_messages: {request.on_existing_messages}')}"
        + (f"; only the selection {md_code(plan.selection)}." if plan.selection else "."),
        "",
        _definitions_line(plan, request),
        "",
        "## Summary",
        "",
        *_summary(plan, request),
        "",
        "## Full plan",
        "",
        *_queue_table(plan),
        *sections.approval_lines(plan, request),
        "",
        "Approve to import and publish exactly as above. Reject (or no answer in time) imports and publishes nothing. "
        "Should the definitions export or the target change before a step runs, that step refuses.",
    ]
    return "\n".join(lines)


def rejection(plan: RestorePlan, responded_by: str | None, timed_out: bool, timeout: dt.timedelta | None) -> RestoreRejectedError:
    """The error that ends a restore nobody approved, naming who rejected it or how long it waited."""
    if timed_out:
        waited = f"within {_duration(timeout)}" if timeout else "in time"
        why = f"nobody approved the plan {waited} (a timeout counts as a rejection)"
    else:
        why = f"the plan was rejected by {responded_by or 'an unnamed user'}"
    return RestoreRejectedError(f"restore of backup {plan.backup_id!r} rejected: {why}; nothing was imported or "
                                "published. Trigger the restore again to ask again")


def _definitions_line(plan: RestorePlan, request: RestoreRequest) -> str:
    if not request.restore_definitions:
        return "**Definitions**: not imported (`restore_definitions: false`)."
    return (f"**Definitions**: imported, {md_code(f'definitions_mode: {request.definitions_mode}')} (a rollback "
            "snapshot of the target is saved first); every object imported is listed in the full plan below.")


def _summary(plan: RestorePlan, request: RestoreRequest) -> list[str]:
    """Counts of everything the full plan lists, and the warnings that need a second look (each section's)."""
    resumes = sum(1 for q in plan.queues if q.resumes and not q.completed_before)
    done = sum(1 for q in plan.queues if q.completed_before)
    return [f"- {len(plan.queues)} queues, {plan.records_in_window} records, {sum(q.to_add for q in plan.queues)} to "
            f"publish; {resumes} resume an earlier run of this restore, {done} were completed by one",
            *sections.approval_summary(plan, request)]


def _queue_table(plan: RestorePlan) -> list[str]:
    """Every queue, one row each, sorted by target (never in the manifest's order)."""
    lines = [f"### Queues ({len(plan.queues)})", "",
             "| source queue | type | target vhost | target queue | records | target holds now | publishes | resume |",
             "|---|---|---|---|---|---|---|---|"]
    for q in sorted(plan.queues, key=lambda q: (q.target_vhost, q.target_queue, q.source_vhost, q.source_queue)):
        holds = "no such queue" if q.target_depth is None else str(q.target_depth)
        kind = q.queue_type + (f" -> {q.target_queue_type}" if q.target_queue_type else "")
        cells = [md_code(f"{q.source_vhost}/{q.source_queue}", in_table=True), md_code(kind, in_table=True),
                 md_code(q.target_vhost, in_table=True),
                 "**the journal: each record routed by the target's bindings**" if q.journal_archive else
                 md_code(q.target_queue, in_table=True) + (" (**replayed where each died, none into it**)" if q.replay
                                                           else ""),
                 str(q.records_in_window), holds, str(q.to_add), _resume(q)]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _resume(q: QueuePlan) -> str:
    if q.completed_before:
        return "completed before: publishes nothing"
    if q.resumes:
        return f"**resumes** after {q.published_before} confirmed"
    return "fresh start"


def _window(plan: RestorePlan) -> str:
    if plan.window_start is None and plan.window_end is None:
        return "everything"
    return f"{_stamp(plan.window_start)} .. {_stamp(plan.window_end)}"


def _stamp(ms: int | None) -> str:
    return "open" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _duration(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:g} hours" if hours >= 1 else f"{delta.total_seconds():g} seconds"
