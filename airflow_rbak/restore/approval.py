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
queue (in exchange mode with every exchange and routing key its records are
published with, :mod:`.exchange_routes`), and every definitions object the import creates or replaces with the
settings that act beyond it (a policy's pattern, apply-to, priority and
definition, and which existing queues it would also reach; queue and exchange
arguments; bindings from exchanges that already carry traffic on the target).
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
from typing import Any

import orjson

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore import exchange_routes, selection_report
from airflow_rbak.restore.errors import RestoreRejectedError
from airflow_rbak.restore.plan import QueuePlan, RestorePlan
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.size_limits import oversized

#: The sections of the definitions import, by kind, in the order the request shows them.
SECTIONS = {"vhosts": "Vhosts created", "policies": "Policies", "queues": "Queues declared",
            "exchanges": "Exchanges declared", "bindings": "Bindings"}
LIVE_TRAFFIC = "**from an exchange that exists on the target: its live traffic will be copied into this queue**"


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
    chosen = " selected" if plan.selection else ""
    return printable(f"Restore backup {plan.backup_id}: {plan.records_in_window}{chosen} records into {len(plan.queues)} "
                     f"queues of {target}?")


def approval_body(plan: RestorePlan, settings: RestoreRequest, rabbitmq_conn_id: str) -> str:
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
        f"{md_code(f'publish_mode: {settings.publish_mode}')}, "
        f"{md_code(f'on_existing_messages: {settings.on_existing_messages}')}"
        + (f"; only the selection {md_code(plan.selection)}." if plan.selection else "."),
        "",
        _definitions_line(plan, settings),
        "",
        "## Summary",
        "",
        *_summary(plan, settings),
        "",
        "## Full plan",
        "",
        *_queue_table(plan),
        *selection_report.approval_lines(plan),
        *exchange_routes.approval_lines(plan.queues),
        *_definitions_sections(plan, settings),
        *_migration_lines(plan),
        *_skipped_lines(plan),
        *_size_lines(plan),
        *_compatibility_lines(plan),
        *_not_imported_lines(plan),
        *_delivery_order_lines(plan),
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


def _definitions_line(plan: RestorePlan, settings: RestoreRequest) -> str:
    if not settings.restore_definitions:
        return "**Definitions**: not imported (`restore_definitions: false`)."
    return (f"**Definitions**: imported, {md_code(f'definitions_mode: {settings.definitions_mode}')} (a rollback "
            "snapshot of the target is saved first); every object imported is listed in the full plan below.")


def _summary(plan: RestorePlan, settings: RestoreRequest) -> list[str]:
    """Counts of everything the full plan lists, and the warnings that need a second look."""
    resumes = sum(1 for q in plan.queues if q.resumes and not q.completed_before)
    done = sum(1 for q in plan.queues if q.completed_before)
    lines = [f"- {len(plan.queues)} queues, {plan.records_in_window} records, {sum(q.to_add for q in plan.queues)} to "
             f"publish; {resumes} resume an earlier run of this restore, {done} were completed by one"]
    if settings.restore_definitions:
        entries, changes = plan.definitions_import or [], plan.definitions_changes or {}
        by_kind = {kind: [e for e in entries if e["kind"] == kind] for kind in SECTIONS}
        counted = ", ".join(f"{len(items)} {SECTIONS[kind].lower()}" for kind, items in by_kind.items())
        lines.append(f"- definitions import ({sum(1 for e in entries if e['action'] == 'create')} created, "
                     f"{sum(1 for e in entries if e['action'] == 'replace')} replaced): {counted}")
        reach = [e for e in by_kind["policies"] if e["notes"].get("matches_other_queues")]
        if reach:
            lines.append(f"- **{len(reach)} policies also apply to existing queues this restore does not bring**")
        live = [e for e in by_kind["bindings"] if e["notes"].get("from_existing_exchange")]
        if live:
            lines.append(f"- **{len(live)} bindings copy live traffic from existing exchanges into restored queues**")
        lines.append(f"- {len(_kept(changes))} objects differ from the backup's and are kept as the target has them")
    routed = [q for q in plan.queues if q.routes or any(q.routes_more)]
    if routed:
        lines.append(f"- exchange mode: {sum(len(q.routes) + q.routes_more[0] for q in routed)} routes (exchange and "
                     f"routing key) from {len(routed)} queues; the target's bindings decide where each lands (listed below)")
    if plan.migration:
        lines.append(f"- transformations: {len(plan.migration['changes'])} changes, "
                     f"{len(plan.migration['refused'])} queues refused")
    over = oversized(plan)
    if over:
        lines.append(f"- **{len(over)} records are larger than the target's max_message_size "
                     f"({plan.target_max_message_size} bytes): the restore is refused** (listed below)")
    if plan.skipped_segments:
        lines.append(f"- **{len(plan.skipped_segments)} damaged segments are skipped** "
                     f"({sum(s.record_count for s in plan.skipped_segments)} records)")
    return lines


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
                 md_code(q.target_queue, in_table=True) + (" (**replayed where each died, none into it**)" if q.replay else ""),
                 str(q.records_in_window), holds, str(q.to_add), _resume(q)]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _resume(q: QueuePlan) -> str:
    if q.completed_before:
        return "completed before: publishes nothing"
    if q.resumes:
        return f"**resumes** after {q.published_before} confirmed"
    return "fresh start"


def _definitions_sections(plan: RestorePlan, settings: RestoreRequest) -> list[str]:
    """Every object the import creates or replaces, by kind, with what acts beyond it; then what it keeps."""
    if not settings.restore_definitions:
        return []
    entries, changes = plan.definitions_import or [], plan.definitions_changes or {}
    lines: list[str] = []
    for kind, title in SECTIONS.items():
        items = [e for e in entries if e["kind"] == kind]
        lines += ["", f"### {title} ({len(items)})", ""]
        lines += [f"- **{e['action']}** {_describe(kind, e)}" for e in items] or ["- none"]
    kept = _kept(changes)
    lines += ["", f"### Kept as the target has them, different from the backup's ({len(kept)})", ""]
    lines += [f"- {md_code(label)}" for label in kept] or ["- none"]
    return lines


def _kept(changes: dict[str, Any]) -> list[str]:
    """Objects that differ from the backup's and that the mode leaves as the target has them, sorted."""
    replaced = [] if changes.get("mode") == "replace" else changes.get("replace") or []
    return sorted((changes.get("cannot_replace") or []) + replaced)


def _describe(kind: str, entry: dict[str, Any]) -> str:
    item, notes = entry["item"], entry["notes"]
    if kind == "vhosts":
        return md_code(item.get("name"))
    where = f"in vhost {md_code(item.get('vhost'))}"
    if kind == "policies":
        reach = notes.get("matches_other_queues")
        text = (f"{md_code(item.get('name'))} {where}: pattern {md_code(item.get('pattern'))}, apply-to "
                f"{md_code(item.get('apply-to', 'all'))}, priority {md_code(item.get('priority', 0))}, definition "
                f"{md_code(_json(item.get('definition')))}")
        if isinstance(reach, str):
            return f"{text}; **existing queues it also reaches: {printable(reach)}**"
        if reach:
            return (f"{text}; **also applies to {len(reach)} existing queues this restore does not bring**: "
                    + ", ".join(md_code(n) for n in reach))
        return text
    if kind in ("queues", "exchanges"):
        extra = {k: v for k, v in item.items() if k not in ("name", "vhost", "arguments")}
        return (f"{md_code(item.get('name'))} {where}: {md_code(_json(extra))}, arguments "
                f"{md_code(_json(item.get('arguments') or {}))}")
    text = (f"{where}: exchange {md_code(item.get('source'))} -> {md_code(item.get('destination_type'))} "
            f"{md_code(item.get('destination'))}, routing key {md_code(item.get('routing_key', ''))}, arguments "
            f"{md_code(_json(item.get('arguments') or {}))}")
    return f"{text}; {LIVE_TRAFFIC}" if notes.get("from_existing_exchange") else text


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def _migration_lines(plan: RestorePlan) -> list[str]:
    """The transformations: every change, the queues they refused, and the diff against the backup's definitions."""
    m = plan.migration
    if not m:
        return []
    lines = ["", f"### Transformations {', '.join(md_code(t) for t in m['transformations'])} for the target's "
                 f"RabbitMQ {md_code(m['target_version'])}", "",
             f"{len(m['changes'])} changes, {len(m['converted'])} queues become quorum.", ""]
    changes = sorted(m["changes"], key=lambda c: (c["kind"], c["vhost"], c["name"], c["transformation"]))
    lines += [f"- {md_code(c['transformation'])} {md_code(_object(c))} **{printable(c['action'])}**: {md_code(c['detail'])}"
              for c in changes]
    if m["refused"]:
        lines += ["", f"**{len(m['refused'])} queues are refused** and left out with their bindings and messages; the "
                      "report fails naming them: " + "; ".join(md_code(f"{r['vhost']}/{r['queue']}") for r in m["refused"])]
    lines += ["", f"**Diff against the backup's definitions** ({m['diff_lines']} lines; `-` the backup's, `+` what is "
                  "imported instead; every object imported is listed above):", ""]
    lines += [f"    {printable(line)}" for line in m["diff"]]
    if m["diff_lines"] > len(m["diff"]):
        lines.append(f"    ({m['diff_lines'] - len(m['diff'])} more lines in the transformed definitions file)")
    return lines


def _skipped_lines(plan: RestorePlan) -> list[str]:
    if not plan.skipped_segments:
        return []
    lines = ["", f"### Damaged segments skipped ({len(plan.skipped_segments)})", ""]
    return lines + [f"- {md_code(s.key)} ({s.record_count} records of {md_code(f'{s.vhost}/{s.queue}')}): "
                    f"{md_code('; '.join(s.reasons))}" for s in sorted(plan.skipped_segments, key=lambda s: s.key)]


def _size_lines(plan: RestorePlan) -> list[str]:
    """The target's message size limit, and every record over it (each refuses the restore)."""
    if plan.target_max_message_size is None:
        return []
    lines = ["", "### Message size", "", f"The target takes messages of at most {plan.target_max_message_size} bytes "
             f"({printable(plan.target_message_size_source or 'max_message_size')})."]
    over = oversized(plan)
    if over:
        lines += ["", f"**{len(over)} records are larger, so the restore is refused:**", ""]
        lines += [f"- {md_code(where)} segment {md_code(key)} record {index}: {size} bytes"
                  for where, (key, index, size) in over]
    return lines


def _compatibility_lines(plan: RestorePlan) -> list[str]:
    """The definitions the target's version treats differently: applied, changed or refused (which refuses the run)."""
    findings = plan.definitions_compatibility or []
    if not findings:
        return []
    refused = sum(1 for f in findings if f["outcome"] == "refused")
    lines = ["", f"### Definitions the target's RabbitMQ treats differently ({len(findings)})", ""]
    if refused:
        lines += [f"**{refused} are refused by the target, so the restore is refused.**", ""]
    return lines + [f"- {md_code(f['kind'] + ' ' + f['vhost'] + '/' + f['name'])} **{printable(f['outcome'])}**: "
                    f"{md_code(f['detail'])}" for f in sorted(findings, key=lambda f: (f["kind"], f["vhost"], f["name"]))]


def _not_imported_lines(plan: RestorePlan) -> list[str]:
    """The runtime parameters of the imported vhosts that the restore leaves to the target's operator."""
    left = plan.definitions_not_imported or []
    if not left:
        return []
    return ["", f"### Not imported: runtime parameters of these vhosts ({len(left)})", "",
            "A restore imports no runtime parameters (operator policies, shovels, federation upstreams): set them on "
            "the target yourself where the queues need them.", ""] + [
        f"- {md_code(p['kind'] + ' ' + p['vhost'] + '/' + p['name'])}" for p in left]


def _delivery_order_lines(plan: RestorePlan) -> list[str]:
    """The queues whose target delivers messages of different priorities in another order than the source did."""
    warned = [q for q in plan.queues if q.delivery_order_warning]
    if not warned:
        return []
    return ["", f"### Delivery order ({len(warned)} queues)", ""] + [
        f"- {md_code(f'{q.target_vhost}/{q.target_queue}')}: {md_code(q.delivery_order_warning or '')}" for q in warned]


def _object(change: dict[str, str]) -> str:
    return f"{change['kind']} {change['vhost']}/{change['name']}"


def _window(plan: RestorePlan) -> str:
    if plan.window_start is None and plan.window_end is None:
        return "everything"
    return f"{_stamp(plan.window_start)} .. {_stamp(plan.window_end)}"


def _stamp(ms: int | None) -> str:
    return "open" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _duration(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:g} hours" if hours >= 1 else f"{delta.total_seconds():g} seconds"
