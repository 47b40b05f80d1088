"""The definitions import as the plan's log and the approval list it: every object created or replaced, and what
acts beyond it.

For each object the import creates or replaces (:mod:`.import_view`) the approval shows the settings that act beyond
it: a policy's pattern, apply-to, priority and definition, and which existing queues it would also reach; queue and
exchange arguments; bindings from exchanges that already carry traffic on the target. Each kind is sorted, never in
the export's order, and nothing is cut short. Every name goes through :func:`~airflow_rbak.display.md_code`: it comes
from a broker anyone with a queue may write to.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection

#: The sections of the definitions import, by kind, in the order the request shows them.
SECTIONS = {"vhosts": "Vhosts created", "policies": "Policies", "queues": "Queues declared",
            "exchanges": "Exchanges declared", "bindings": "Bindings"}
LIVE_TRAFFIC = "**from an exchange that exists on the target: its live traffic will be copied into this queue**"


class DefinitionsListing(PlanSection):
    """The definitions import: what it creates, replaces and keeps."""

    name = "definitions"
    placement = Placement(log=10, summary=10)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """The changes the import makes, each object with what acts beyond it, and the vhosts it is limited to."""
        changes = plan.definitions_changes
        if not changes:
            return []
        lines = [f"  definitions ({changes['mode']} mode): create {changes['create'] or 'nothing'}; "
                 f"existing and different (replaced only in replace mode): {changes['replace'] or 'none'}; "
                 f"different but kept in either mode (delete them first to take the backup's): "
                 f"{changes.get('cannot_replace') or 'none'}"]
        for entry in plan.definitions_import or []:
            item = {k: v for k, v in entry["item"].items() if k != "vhost"}
            notes = {k: v for k, v in entry["notes"].items() if v}
            lines.append(f"    {entry['action']} {entry['label']}: {json.dumps(item, sort_keys=True)}"
                         + (f" {json.dumps(notes, sort_keys=True)}" if notes else ""))
        if plan.backup_vhosts:
            lines.append(f"  the backup was asked for vhosts {', '.join(map(repr, plan.backup_vhosts))}: "
                         "unless this restore names vhosts or a definitions selection, only their definitions")
        return lines

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Counts by kind, and the policies and bindings that reach beyond what the restore brings."""
        if not request.restore_definitions:
            return []
        entries, changes = plan.definitions_import or [], plan.definitions_changes or {}
        by_kind = {kind: [e for e in entries if e["kind"] == kind] for kind in SECTIONS}
        counted = ", ".join(f"{len(items)} {SECTIONS[kind].lower()}" for kind, items in by_kind.items())
        lines = [f"- definitions import ({sum(1 for e in entries if e['action'] == 'create')} created, "
                 f"{sum(1 for e in entries if e['action'] == 'replace')} replaced): {counted}"]
        reach = [e for e in by_kind["policies"] if e["notes"].get("matches_other_queues")]
        if reach:
            lines.append(f"- **{len(reach)} policies also apply to existing queues this restore does not bring**")
        live = [e for e in by_kind["bindings"] if e["notes"].get("from_existing_exchange")]
        if live:
            lines.append(f"- **{len(live)} bindings copy live traffic from existing exchanges into restored queues**")
        lines.append(f"- {len(_kept(changes))} objects differ from the backup's and are kept as the target has them")
        return lines

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every object the import creates or replaces, by kind, with what acts beyond it; then what it keeps."""
        if not request.restore_definitions:
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
        return _policy(item, notes, where)
    if kind in ("queues", "exchanges"):
        extra = {k: v for k, v in item.items() if k not in ("name", "vhost", "arguments")}
        return (f"{md_code(item.get('name'))} {where}: {md_code(_json(extra))}, arguments "
                f"{md_code(_json(item.get('arguments') or {}))}")
    text = (f"{where}: exchange {md_code(item.get('source'))} -> {md_code(item.get('destination_type'))} "
            f"{md_code(item.get('destination'))}, routing key {md_code(item.get('routing_key', ''))}, arguments "
            f"{md_code(_json(item.get('arguments') or {}))}")
    return f"{text}; {LIVE_TRAFFIC}" if notes.get("from_existing_exchange") else text


def _policy(item: dict[str, Any], notes: dict[str, Any], where: str) -> str:
    """A policy with everything that decides what it reaches, and the existing queues it also reaches."""
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


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


SECTION = DefinitionsListing()
