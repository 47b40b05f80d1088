"""What planning one queue gathers from its records while its segments are verified.

:func:`~airflow_rbak.restore.plan.count_in_window` reads every record of a segment once and takes the collectors
that need them one by one: the exchanges the records name, the records too large for some targets
(:mod:`.message_sizes`), the visit of a selective restore (:mod:`.selection`) and of a dead-letter replay
(:mod:`.dead_letters`), and exchange mode's route counts (:mod:`.exchange_routes`). A :class:`QueueScan` builds
them from the request for one queue and turns what they gathered into the queue plan's fields, or the queue's
refusal; so the planner reads a queue without naming the features that look at its records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak.codec import QueueBackup
from airflow_rbak.restore import exchange_routes, selection
from airflow_rbak.restore.dead_letters import DeathRoutes
from airflow_rbak.restore.message_sizes import LargeMessage
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueueRefusal, SegmentPlan


def chosen_queues(request: RestoreRequest, entries: Sequence[QueueBackup]
                  ) -> tuple[list[QueueBackup], dict[tuple[str, str], tuple[int, ...]]]:
    """The queues a restore reads and the positions chosen in each: chosen positions restore only the queues they
    name (a queue they name that the backup lacks is refused by :func:`.selection.chosen_for`)."""
    chosen = selection.chosen_for(request.positions, [(q.vhost, q.name) for q in entries])
    if request.positions:
        entries = [q for q in entries if (q.vhost, q.name) in chosen]
    return list(entries), chosen


def check_total(selected: Sequence[tuple[tuple[int, int], ...] | None]) -> None:
    """Refuse a selection whose ranges over every queue are more than a plan carries."""
    selection.check_ranges(sum(len(ranges or ()) for ranges in selected))


@dataclass
class QueueScan:
    """The collectors one queue's records fill while its segments are verified, and what they found."""

    entry: QueueBackup
    chosen: tuple[int, ...] | None
    scan: selection.SelectionScan | None
    deaths: DeathRoutes | None
    published: exchange_routes.RouteCounts | None
    exchanges: set[str] = field(default_factory=set)
    large: list[LargeMessage] = field(default_factory=list)

    @classmethod
    def start(cls, entry: QueueBackup, request: RestoreRequest, chosen: tuple[int, ...] | None) -> QueueScan:
        """The collectors the request asks for; chosen positions past the queue's end are refused before any read."""
        if chosen is not None:
            selection.check_in_range(_label(entry), chosen, sum(m.record_count for m in entry.stored_order()), ())
        scan = selection.SelectionScan(request.select, chosen) if request.selective else None
        deaths = DeathRoutes() if request.replays(entry.name) else None
        published = (exchange_routes.RouteCounts(request.target_queue(entry.name))
                     if request.publish_mode == "exchange" and deaths is None else None)
        return cls(entry, chosen, scan, deaths, published)

    @property
    def narrows(self) -> bool:
        """True when records are chosen one by one, so a segment holding none of them is left out."""
        return self.scan is not None

    def visit(self, first_ordinal: int) -> selection.Visit:
        """The per-record visit of the segment whose first record is at ``first_ordinal``."""
        return selection.Visit(first_ordinal, self.scan, self.deaths)

    def check_damaged(self, request: RestoreRequest, total: int, damaged: set[str]) -> None:
        """Refuse chosen positions that lie in segments skipped as damaged (they cannot be published)."""
        if self.chosen is not None and request.skip_damaged_segments:
            spans = selection.spans(self.entry.stored_order(), damaged)
            selection.check_in_range(_label(self.entry), self.chosen, total, spans)

    def refusal(self) -> QueueRefusal | None:
        """The queue's refusal: a dead-letter replay whose records give no route to replay them to."""
        reason = None if self.deaths is None else self.deaths.refusal(_label(self.entry))
        return None if reason is None else QueueRefusal(self.entry.vhost, self.entry.name, reason)

    def plan_fields(self, segments: Sequence[SegmentPlan]) -> dict[str, Any]:
        """What the collectors found, as the queue plan's fields."""
        scan, deaths = self.scan, self.deaths
        fields: dict[str, Any] = {
            "exchanges": tuple(sorted(deaths.exchanges() if deaths is not None else self.exchanges)),
            "large_messages": selection.selected_large(self.large, {s.key: s.first_ordinal for s in segments},
                                                       None if scan is None else scan.ranges),
            "selected": None if scan is None else tuple((a, b) for a, b in scan.ranges),
            "chosen": None if self.chosen is None else len(self.chosen),
            "first_matches": () if scan is None else tuple(scan.first_matches),
            "replay": deaths is not None, "replay_routes": () if deaths is None else deaths.table(),
        }
        if self.published is not None:  # exchange mode's routes (none in queue mode, or for a replay)
            fields |= {"routes": self.published.table(), "routes_more": self.published.more(),
                       "routes_exact": self.published.exact}
        return fields


def _label(entry: QueueBackup) -> str:
    return f"{entry.vhost}/{entry.name}"
