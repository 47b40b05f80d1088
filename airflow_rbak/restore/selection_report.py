"""A selective restore and a dead-letter replay as the plan's log, the approval request and the report name them.

Every name and id shown comes from the messages of a backup (anyone with a queue may write them), so the log lines
go through :func:`~airflow_rbak.display.printable` and the approval's Markdown through
:func:`~airflow_rbak.display.md_code`. A body is never shown: it is sensitive, and its size is what a plan needs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.dead_letters import route_label
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection


def summary_lines(plan: RestorePlan) -> list[str]:
    """The selection, each queue's count and first matches, each replay route and each refused queue, as log lines."""
    lines = []
    if plan.selection:
        lines.append(printable(f"  selection: {plan.selection}: {plan.records_in_window} records selected in "
                               f"{len(plan.queues)} queues"))
    for q in plan.queues:
        if q.selected is not None:
            chosen = f" of {q.chosen} chosen positions" if q.chosen is not None else ""
            lines.append(printable(f"  {q.task_id}: {q.records_in_window} selected{chosen}; the first "
                                   f"{len(q.first_matches)}:"))
            lines += [printable(f"    {match_text(m)}") for m in q.first_matches]
        lines += [printable(f"  {q.task_id}: dead-letter replay, {n} messages to {route_label(e, k)} in vhost "
                            f"{q.target_vhost!r} (none into {q.target_queue!r})") for e, k, n in q.replay_routes]
    lines += [printable(f"  REFUSED {r.vhost}/{r.queue}: {r.reason}") for r in plan.refused_queues]
    return lines


def match_text(match: dict[str, Any]) -> str:
    """One selected record as the plan shows it: position, ids, route, time and size, never the body."""
    return (f"position {match['position']}: message_id {match['message_id']!r}, correlation_id "
            f"{match['correlation_id']!r}, exchange {match['exchange']!r}, routing key {match['routing_key']!r}, "
            f"backed up at {match['backed_up_at']}, {match['body_bytes']} bytes")


def approval_lines(plan: RestorePlan) -> list[str]:
    """The selection and the replay as Markdown sections of the approval request (empty without either)."""
    lines: list[str] = []
    if plan.selection:
        lines += ["", f"### Selection: {md_code(plan.selection)}", "",
                  f"Only the selected records are published: {plan.records_in_window} in {len(plan.queues)} queues, "
                  "in their stored order.", ""]
        lines += [f"- {md_code(q.task_id)}: {_counts(q)}" for q in _sorted(plan) if q.selected is not None]
    replays = [q for q in _sorted(plan) if q.replay]
    if replays:
        lines += ["", f"### Dead-letter replay ({len(replays)} queues)", "",
                  "These queues' records are published where they died (their `x-death`), **never into the queue "
                  "itself**:", ""]
        lines += [f"- {md_code(q.task_id)}: {n} messages to exchange {md_code(e or '(AMQP default)')} with routing key "
                  f"{md_code(k)} in vhost {md_code(q.target_vhost)}" for q in replays for e, k, n in q.replay_routes]
    if plan.refused_queues:
        lines += ["", f"### Refused ({len(plan.refused_queues)} queues): left out, the report fails naming them", ""]
        lines += [f"- {md_code(r.vhost + '/' + r.queue)}: {md_code(r.reason)}" for r in plan.refused_queues]
    return lines


def _counts(q: QueuePlan) -> str:
    chosen = f" (of {q.chosen} chosen positions)" if q.chosen is not None else ""
    first = ", ".join(str(m["position"]) for m in q.first_matches)
    return f"{q.records_in_window} selected{chosen}, first positions {first or 'none'}"


def _sorted(plan: RestorePlan) -> list[QueuePlan]:
    return sorted(plan.queues, key=lambda q: (q.target_vhost, q.target_queue, q.source_vhost, q.source_queue))


def report_fields(plan: RestorePlan) -> dict[str, Any]:
    """What the report adds: the selection, its count per queue, the replay routes, the refused queues."""
    return {
        "selection": plan.selection,
        "selected": {q.task_id: q.records_in_window for q in plan.queues if q.selected is not None},
        "replayed": {q.task_id: [list(r) for r in q.replay_routes] for q in plan.queues if q.replay},
        "refused_queues": [asdict(r) for r in plan.refused_queues],
    }


def refused_error(plan: RestorePlan) -> RestoreRefusedError | None:
    """The error a report ends with when queues were refused (the others were restored); None when none was."""
    if not plan.refused_queues:
        return None
    return RestoreRefusedError(f"{len(plan.refused_queues)} queues were refused and left out, the others restored: "
                               + " | ".join(r.reason for r in plan.refused_queues))


class Selection(PlanSection):
    """A selective restore and a dead-letter replay: what they select, where replayed records go, what they refuse."""

    name = "selection"
    placement = Placement(log=50, report=20)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """The selection, each queue's count and first matches, each replay route and each refused queue."""
        return summary_lines(plan)

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """The selection, the replay and the refused queues as Markdown sections."""
        return approval_lines(plan)

    def report_fields(self, plan: RestorePlan) -> dict[str, Any]:
        """The selection, its count per queue, the replay routes, the refused queues."""
        return report_fields(plan)

    def left_out(self, plan: RestorePlan) -> RestoreRefusedError | None:
        """The queues refused and left out, the others restored."""
        return refused_error(plan)


SECTION = Selection()
