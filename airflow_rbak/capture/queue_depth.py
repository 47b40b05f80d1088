"""How many ready messages a queue holds, read exactly over AMQP, and the management API where AMQP misreports.

A capture reads a queue's depth three times: at its start (the target it consumes up to), while giving the
messages back one consumer group at a time (each group must be back before the next), and after the return (the
report's ``depth_after``). Quorum queues make the first and the last hard: RabbitMQ 3.10 answers 0 for a quorum
queue whose count query times out, and quorum queues apply returns asynchronously, so the depth is waited for and
checked against the management API's (sampled) count rather than taken at its word.
"""

from __future__ import annotations

import time

from pika.adapters.blocking_connection import BlockingChannel

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.capture_options import management_counts
from airflow_rbak.capture.errors import CaptureStalledError
from airflow_rbak.display import package_logger

log = package_logger(__name__)


class QueueDepth:
    """A queue's ready messages: exact over AMQP on its own channel (which holds no messages), corrected where a
    quorum queue misreports by the management API."""

    def __init__(self, channel: BlockingChannel, connection: RabbitMQConnection, info: QueueInfo,
                 idle_timeout: float) -> None:
        self.channel, self.connection, self.info, self.idle_timeout = channel, connection, info, idle_timeout

    def now(self) -> int:
        """Ready messages now (exact, unlike the management API's sampled figure)."""
        return int(self.channel.queue_declare(self.info.name, passive=True).method.message_count)

    def management_ready(self) -> int | None:
        """Ready messages by the management API (sampled, a few seconds old); None when it has no figure."""
        counts = management_counts(self.connection, self.info)
        return None if counts is None else counts[0]

    def initial(self) -> int:
        """The target: the exact ready count over AMQP, except where RabbitMQ 3.10 misreports it.

        3.10 answers 0 for a quorum queue whose count query times out (measured: for minutes after repeated
        returns of 50,000+ messages). A 0 the management API contradicts is re-read briefly, then replaced by
        the management API's ready count (sampled, so a few seconds old: too high ends in the idle check,
        which settles on what was received), never taken as an empty queue.
        """
        depth = self.now()
        if depth or self.info.queue_type != "quorum":
            return depth
        reported = self.management_ready()
        deadline = time.monotonic() + 10.0  # no figure yet: the management API samples every 5 s
        while reported is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if depth := self.now():
                return depth
            reported = self.management_ready()
        deadline = time.monotonic() + min(self.idle_timeout, 3.0)
        while reported and time.monotonic() < deadline:
            time.sleep(0.5)
            if depth := self.now():
                return depth
        if reported is None:
            raise CaptureStalledError(
                f"quorum queue {self.info.name!r} in vhost {self.info.vhost!r} reports 0 messages over AMQP and the "
                "management API has no count for it: cannot tell whether it is empty. Nothing was read; re-run later")
        if reported:
            log.warning("quorum queue %r in vhost %r reports 0 ready messages over AMQP but %d in the management API; "
                        "capturing by the management API's count", self.info.name, self.info.vhost, reported)
        return reported

    def reaches(self, expected: int, wait: float) -> int:
        """Poll the exact depth until it reaches ``expected`` or ``wait`` seconds pass; return the last answer."""
        deadline = time.monotonic() + wait
        depth = self.now()
        while depth < expected and time.monotonic() < deadline:
            time.sleep(0.02)
            depth = self.now()
        return depth

    def settled(self, target: int, wait: float | None = None) -> int:
        """Depth after the return; quorum queues apply returns asynchronously (and may answer 0, see
        :meth:`initial`), so wait, then ask the management API.

        A busy broker re-enqueues tens of thousands of returns slowly (measured on 3.10 at load 8: 12,256 of
        70,000 after 20 s), so the wait grows with the number returned, up to two minutes; it ends as soon as
        the depth is back. The figure is a report: the messages are back either way.
        """
        if wait is None:
            wait = min(10.0 + target / 1000, 120.0)
        depth = self.reaches(target, wait)
        # The management API's figure is sampled every few seconds: give it one more interval to catch up.
        deadline = time.monotonic() + wait
        while depth < target and self.info.queue_type == "quorum" and time.monotonic() < deadline:
            depth = max(depth, self.management_ready() or 0)
            if depth < target:
                time.sleep(1.0)
        return depth
