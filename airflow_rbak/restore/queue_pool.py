"""Several queues of a restore published at once (``publish_threads``), each on its own connection and thread.

Each queue's restore is the one :func:`.queue_restore.restore_queue` does alone (its order, claim, checkpoint, rate
limit and stop on failure are its own), so running them side by side changes only when they run. A failure of one
queue never stops or hides the others: every queue is attempted, and the caller gets every queue's outcome, in the
group's order, to report the results and fail naming each failed queue. ``in_order`` (a recovery to a point in time,
whose journal's records must follow the snapshot's queues) publishes one queue at a time and stops at the first
failure: what follows a failed queue is not started (``QueueOutcome.started`` False).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

Q = TypeVar("Q")
R = TypeVar("R")


@dataclass(frozen=True)
class QueueOutcome(Generic[Q, R]):
    """One queue of a group: its result, or the error that stopped it."""

    queue: Q
    result: R | None = None
    error: Exception | None = None
    started: bool = True


def publish_each(queues: Sequence[Q], publish: Callable[[Q], R], threads: int, *,
                 in_order: bool = False) -> list[QueueOutcome[Q, R]]:
    """``publish`` of every queue, at most ``threads`` at once (one, ``in_order``); outcomes in the queues' order, once
    all have ended."""
    def attempt(queue: Q) -> QueueOutcome[Q, R]:
        try:
            return QueueOutcome(queue, result=publish(queue))
        except Exception as exc:  # kept for the caller, beside the others' results
            return QueueOutcome(queue, error=exc)

    if in_order:
        outcomes: list[QueueOutcome[Q, R]] = []
        for queue in queues:
            failed = any(o.error is not None for o in outcomes)
            outcomes.append(QueueOutcome(queue, started=False) if failed else attempt(queue))
        return outcomes
    if threads <= 1 or len(queues) <= 1:
        return [attempt(q) for q in queues]
    with ThreadPoolExecutor(max_workers=min(threads, len(queues)), thread_name_prefix="rbak-publish") as pool:
        return list(pool.map(attempt, queues))
