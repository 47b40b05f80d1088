"""What a person approves before a restore changes its target: the plan in a few lines, and when nobody is asked.

The ``rbak_restore`` DAG asks for approval between ``plan`` and anything that
changes the target (definitions import, publishing). The request shows what the
plan found and will do, from the plan and the settings alone: the backup and its
location (a storage URL never holds credentials), the target connection's id and
cluster name, per queue the records and where they go, and the modes that decide
what happens to what the target already holds. It never reads a connection, so
it cannot show a password. A dry run changes nothing and a run with
``skip_approval`` (automation) says so up front: neither waits. No Airflow here.

Every name in the request (vhosts, queues, backup ids, the URL, cluster names,
definitions' labels) comes from a broker anyone with a queue may write to, so
each goes through :func:`~airflow_rbak.display.md_code`: it is shown literally
and cannot add rows, lines, links or images to what the approver reads.
"""

from __future__ import annotations

import datetime as dt

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.errors import RestoreRejectedError
from airflow_rbak.restore.plan import RestorePlan
from airflow_rbak.restore.request import RestoreRequest

#: Queues listed one per row in the request; the rest are summed in one line (a restore may hold thousands).
QUEUES_SHOWN = 50
#: Transformation changes and diff lines shown in the request; the plan task's log has them all.
CHANGES_SHOWN, DIFF_SHOWN = 40, 60


def approval_not_needed(settings: RestoreRequest, skip_approval: bool) -> str | None:
    """Why this restore goes ahead without asking anyone (None: it must wait for approval)."""
    if settings.dry_run:
        return "dry run: nothing is imported or published"
    if skip_approval:
        return "skip_approval is set"
    return None


def approval_subject(plan: RestorePlan) -> str:
    """One line: which backup, how many records, into which cluster."""
    target = plan.target_cluster or "(target cluster not inspected)"
    return printable(f"Restore backup {plan.backup_id}: {plan.records_in_window} records into {len(plan.queues)} "
                     f"queues of {target}?")


def approval_body(plan: RestorePlan, settings: RestoreRequest, rabbitmq_conn_id: str) -> str:
    """The plan as Markdown for the approver: what is read, where it goes, and what happens to what is there."""
    same_cluster = plan.source_cluster is not None and plan.source_cluster == plan.target_cluster
    same = " (**the same cluster the backup was taken from**)" if same_cluster else ""
    adds = sum(q.to_add for q in plan.queues)
    lines = [
        f"**Backup** {md_code(plan.backup_id)} from {md_code(plan.storage_url)}, window {_window(plan)}, drawn from "
        f"{', '.join(md_code(b) for b in plan.drawn_from) or 'no segments'}.",
        "",
        f"**Target** connection {md_code(rabbitmq_conn_id)}, cluster {md_code(plan.target_cluster or '(not inspected)')}"
        f"{same}; source cluster {md_code(plan.source_cluster or '(unknown)')}.",
        "",
        f"**Messages**: {plan.records_in_window} records in the window, {adds} to publish now, "
        f"{md_code(f'publish_mode: {settings.publish_mode}')}, "
        f"{md_code(f'on_existing_messages: {settings.on_existing_messages}')}.",
        "",
        _definitions_line(plan, settings),
        *_migration_lines(plan),
        "",
        "| source queue | type | target vhost | target queue | records | target holds now | publishes |",
        "|---|---|---|---|---|---|---|",
    ]
    for q in plan.queues[:QUEUES_SHOWN]:
        holds = "no such queue" if q.target_depth is None else str(q.target_depth)
        kind = q.queue_type + (f" -> {q.target_queue_type}" if q.target_queue_type else "")
        cells = [md_code(f"{q.source_vhost}/{q.source_queue}", in_table=True), md_code(kind, in_table=True),
                 md_code(q.target_vhost, in_table=True), md_code(q.target_queue, in_table=True),
                 str(q.records_in_window), holds, str(q.to_add)]
        lines.append(f"| {' | '.join(cells)} |")
    rest = plan.queues[QUEUES_SHOWN:]
    if rest:
        lines.append(f"| ... and {len(rest)} more queues | | | | {sum(q.records_in_window for q in rest)} | "
                     f"| {sum(q.to_add for q in rest)} |")
    if plan.skipped_segments:
        lines += ["", f"**{len(plan.skipped_segments)} damaged segments are skipped** "
                      f"({sum(s.record_count for s in plan.skipped_segments)} records); the plan task's log names them."]
    lines += ["", "Approve to import and publish as above. Reject (or no answer in time) imports and publishes nothing."]
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


def _definitions_line(plan: RestorePlan, settings: RestoreRequest) -> str:
    if not settings.restore_definitions:
        return "**Definitions**: not imported (`restore_definitions: false`)."
    changes = plan.definitions_changes or {}
    replaced = "replaced" if settings.definitions_mode == "replace" else "kept"
    return (f"**Definitions**: imported, {md_code(f'definitions_mode: {settings.definitions_mode}')} (a rollback "
            f"snapshot of the target is saved first). Creates {_labels(changes.get('create'))}; existing and different, "
            f"{replaced}: {_labels(changes.get('replace'))}; different but kept in either mode: "
            f"{_labels(changes.get('cannot_replace'))}.")


def _migration_lines(plan: RestorePlan) -> list[str]:
    """The transformations: what each changed, the queues they refused, and the diff against the backup's definitions."""
    m = plan.migration
    if not m:
        return []
    lines = ["", f"**Transformations** {', '.join(md_code(t) for t in m['transformations'])} for the target's RabbitMQ "
                 f"{md_code(m['target_version'])}: {len(m['changes'])} changes, {len(m['converted'])} queues become quorum."]
    lines += [f"- {md_code(c['transformation'])} {md_code(_object(c))} **{printable(c['action'])}**: {md_code(c['detail'])}"
              for c in m["changes"][:CHANGES_SHOWN]]
    if len(m["changes"]) > CHANGES_SHOWN:
        lines.append(f"- ... and {len(m['changes']) - CHANGES_SHOWN} more (the plan task's log lists every change)")
    if m["refused"]:
        lines += ["", f"**{len(m['refused'])} queues are refused** and left out with their bindings and messages; the "
                      "report fails naming them: " + "; ".join(md_code(f"{r['vhost']}/{r['queue']}") for r in m["refused"])]
    lines += ["", f"**Diff against the backup's definitions** ({m['diff_lines']} lines; `-` the backup's, `+` what is "
                  "imported instead):", ""]
    lines += [f"    {printable(line)}" for line in m["diff"][:DIFF_SHOWN]]
    if m["diff_lines"] > DIFF_SHOWN:
        lines.append(f"    ... and {m['diff_lines'] - DIFF_SHOWN} more lines")
    return lines


def _object(change: dict[str, str]) -> str:
    return f"{change['kind']} {change['vhost']}/{change['name']}"


def _labels(labels: list[str] | None, shown: int = 10) -> str:
    labels = labels or []
    if not labels:
        return "nothing"
    more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
    return f"{len(labels)} ({', '.join(md_code(x) for x in labels[:shown])}{more})"


def _window(plan: RestorePlan) -> str:
    if plan.window_start is None and plan.window_end is None:
        return "everything"
    return f"{_stamp(plan.window_start)} .. {_stamp(plan.window_end)}"


def _stamp(ms: int | None) -> str:
    return "open" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _duration(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:g} hours" if hours >= 1 else f"{delta.total_seconds():g} seconds"
