"""Exchange mode's routes: every (exchange, routing key) a queue's records will be published with, counted by the plan.

In ``publish_mode: exchange`` the records' own exchanges and routing keys decide where each message lands, so the
plan counts them while it reads and verifies every record of the window (:func:`~.plan.count_in_window`, one decode),
the plan's log lists them under each queue and the approval request shows them as a table per queue. A record of the
default exchange (``""``) is published to the target queue itself (the default exchange routes to the queue its
routing key names, and the target queue may be renamed), so its route is ``("", target queue)``: what the publish
step sends, not the key stored.

Exchange names and routing keys come from the messages of a backup (anyone who may publish writes them): the log
shows them through :func:`~airflow_rbak.display.printable`, the approval's Markdown through
:func:`~airflow_rbak.display.md_code`. A plan travels as XCom, so it keeps the :data:`MAX_PLAN_ROUTES` most used
routes of a queue and counts the rest; the request shows :data:`MAX_SHOWN_ROUTES` of them per queue and counts the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from airflow_rbak.display import md_code, printable

#: Routes of one queue a plan keeps, the most used first; the rest are counted (``routes_more``).
MAX_PLAN_ROUTES = 1000
#: Routes of one queue the approval request and the plan's log show; the rest are counted in one line.
MAX_SHOWN_ROUTES = 50
#: Distinct routes of one queue counted one by one while planning (memory); records of any further route are
#: counted together, and the routes left out are then "at least" so many.
MAX_COUNTED_ROUTES = 1_000_000
DEFAULT_EXCHANGE = "(AMQP default)"

Route = tuple[str, str, int]


def publish_route(exchange: str, routing_key: str, target_queue: str) -> tuple[str, str]:
    """Where exchange mode publishes a record: its exchange and routing key; the default exchange's to the target
    queue (as the publish step does)."""
    return ("", target_queue) if exchange == "" else (exchange, routing_key)


@dataclass
class RouteCounts:
    """One queue's routes as the plan reads its records in the window (and selection)."""

    target_queue: str
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Records of routes past :data:`MAX_COUNTED_ROUTES`, counted together.
    uncounted: int = 0

    def add(self, exchange: str, routing_key: str) -> None:
        """Count one record toward the route it will be published with."""
        route = publish_route(exchange, routing_key, self.target_queue)
        if route in self.counts or len(self.counts) < MAX_COUNTED_ROUTES:
            self.counts[route] = self.counts.get(route, 0) + 1
        else:
            self.uncounted += 1

    def _ranked(self) -> list[Route]:
        return [(e, k, n) for (e, k), n in sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))]

    def table(self) -> tuple[Route, ...]:
        """``(exchange, routing key, count)`` of the most used routes, most used first, at most :data:`MAX_PLAN_ROUTES`."""
        return tuple(self._ranked()[:MAX_PLAN_ROUTES])

    def more(self) -> tuple[int, int]:
        """The routes the table leaves out and their messages (routes at least so many when not :attr:`exact`)."""
        rest = self._ranked()[MAX_PLAN_ROUTES:]
        return len(rest), sum(n for _, _, n in rest) + self.uncounted

    @property
    def exact(self) -> bool:
        return self.uncounted == 0


class RoutedQueue(Protocol):
    """What the lines below read of a queue's plan (:class:`~.plan.QueuePlan`)."""

    @property
    def task_id(self) -> str: ...
    @property
    def target_vhost(self) -> str: ...
    @property
    def target_queue(self) -> str: ...
    @property
    def routes(self) -> tuple[Route, ...]: ...
    @property
    def routes_more(self) -> tuple[int, int]: ...
    @property
    def routes_exact(self) -> bool: ...


def _shown_and_rest(queue: RoutedQueue) -> tuple[tuple[Route, ...], int, int]:
    """The routes shown, and the routes and messages beyond them (the plan's own ``routes_more`` included)."""
    shown, rest = queue.routes[:MAX_SHOWN_ROUTES], queue.routes[MAX_SHOWN_ROUTES:]
    more_routes, more_messages = queue.routes_more
    return shown, len(rest) + more_routes, sum(n for _, _, n in rest) + more_messages


def _more_text(queue: RoutedQueue, routes: int, messages: int) -> str:
    at_least = "" if queue.routes_exact else "at least "
    return f"and {at_least}{routes} more routes ({messages} messages)"


def summary_lines(queue: RoutedQueue) -> list[str]:
    """A queue's routes as log lines under its line of the plan (empty when it has none: queue mode, replay)."""
    shown, more_routes, more_messages = _shown_and_rest(queue)
    lines = [printable(f"    route: exchange {e or DEFAULT_EXCHANGE!r} routing key {k!r}: {n} messages")
             for e, k, n in shown]
    if more_routes or more_messages:
        lines.append(f"    {_more_text(queue, more_routes, more_messages)}")
    return lines


def approval_lines(queues: Iterable[RoutedQueue]) -> list[str]:
    """Per queue, a Markdown table of its routes (exchange, routing key, messages); empty when no queue has any."""
    routed = sorted((q for q in queues if q.routes or any(q.routes_more)),
                    key=lambda q: (q.target_vhost, q.target_queue, q.task_id))
    if not routed:
        return []
    lines = ["", f"### Routes in exchange mode ({len(routed)} queues)", "",
             "Each record is published to its exchange with its routing key, and the target's bindings decide where it "
             f"lands; a record of the default exchange goes to the target queue itself. At most {MAX_SHOWN_ROUTES} "
             "routes per queue, the most used first."]
    for q in routed:
        shown, more_routes, more_messages = _shown_and_rest(q)
        lines += ["", f"#### {md_code(q.task_id)} into vhost {md_code(q.target_vhost)}", "",
                  "| exchange | routing key | messages |", "|---|---|---|"]
        lines += [f"| {_exchange_cell(e)} | {md_code(k, in_table=True) if k else '(empty)'} | {n} |" for e, k, n in shown]
        if more_routes or more_messages:
            lines += ["", _more_text(q, more_routes, more_messages) + "."]
    return lines


def _exchange_cell(exchange: str) -> str:
    """A name in a code span; the default exchange in words (no exchange's name is shown outside a code span)."""
    return md_code(exchange, in_table=True) if exchange else DEFAULT_EXCHANGE
