"""What bounds a capture in time, and when a queue that stopped delivering may be taken as drained.

*Consumer timeout.* The broker closes a channel whose oldest unacked
delivery is older than ``consumer_timeout`` (30 min by default; checked on
the channel's tick, every 60 s by default, so it may close late but never
early). A capture holds every message it has read until it gives them all
back, so it must finish within that time from its first delivery (the
:class:`Deadline` counts from the first consumer, a little earlier): the
:class:`Deadline` leaves a margin for the return itself and stops the
capture when it is reached, or earlier when the rate so far says the rest
cannot be read in time.

*A depth of 0.* A queue that stops delivering before the capture has its
target was either drained by another client (the capture then backs up
what the queue held for it) or the broker is slow to answer (RabbitMQ 3.10
answers 0 for a quorum queue whose leader is busy or unreachable). Only
evidence decides: a classic queue's AMQP count is exact; a quorum queue's 0
counts only when the management API agrees *and* its figures already show
the messages this capture holds (so they were sampled after it started).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.broker.errors import BrokerError
from airflow_rbak.broker.management import ManagementClient


@dataclass
class Deadline:
    """The latest moment a capture may still hold messages, counted from its first consumer (or ``basic.get``)."""

    timeout_ms: int
    started: float | None = None

    @property
    def budget_s(self) -> float:
        """The timeout less a margin for giving everything back (10%, at least 5 s, at most half)."""
        timeout = self.timeout_ms / 1000
        return timeout - min(max(timeout * 0.1, 5.0), timeout * 0.5)

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def exceeded(self, received: int, target: int) -> str | None:
        """Why the capture must stop now, or None: out of time, or the rate so far cannot finish in time."""
        if self.started is None or received <= 0:
            return None
        elapsed = time.monotonic() - self.started
        if elapsed >= self.budget_s:
            return f"held its messages for {elapsed:.0f} s, the most it may within a consumer_timeout of {self.timeout_ms} ms"
        projected = elapsed * target / received
        if elapsed >= self.budget_s / 4 and projected > self.budget_s:
            return (f"would need about {projected:.0f} s for {target} messages at the rate so far ({received} in "
                    f"{elapsed:.0f} s), more than a consumer_timeout of {self.timeout_ms} ms allows")
        return None


def management_counts(connection: RabbitMQConnection, info: QueueInfo) -> tuple[int, int] | None:
    """(ready, unacknowledged) by the management API, or None when it has no figures or cannot be reached."""
    try:
        with ManagementClient(connection) as client:
            data = client.queue(info.vhost, info.name)
    except BrokerError:
        return None
    if data.get("messages_ready") is None or data.get("messages_unacknowledged") is None:
        return None
    return int(data["messages_ready"]), int(data["messages_unacknowledged"])


def drained_by_others(amqp_depth: int, counts: tuple[int, int] | None, queue_type: str, held: int) -> bool:
    """Whether a queue that stopped delivering holds nothing more for this capture (module docstring)."""
    if amqp_depth:
        return False
    if queue_type != "quorum":
        return True
    if counts is None:
        return False
    ready, unacked = counts
    return ready == 0 and unacked >= held
