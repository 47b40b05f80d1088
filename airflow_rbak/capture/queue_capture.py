"""Non-destructive capture of classic and quorum queues over AMQP.

How it works, and why:

* Before the first message is received, the queue's arguments and
  effective policy are read again (a policy may have changed since
  discovery) and :mod:`.queue_features` decides how it is read: the
  staircase below, one consumer at a time (single active consumer), or
  ``basic.get`` (auto-delete), or why it is left out untouched.
* Every message present at the start (the passive-declare depth, the
  *target*) is consumed without ack and staged as it arrives; memory holds
  one staging chunk, never the queue.
* Consumer *k* gets prefetch ``min(window, target - already requested)``.
  Without acks a consumer gets exactly its prefetch and then nothing
  (measured on RabbitMQ 3.10), so the prefetches add up to the target, every message
  goes to exactly one consumer, the total never exceeds the target, and
  neither the 16-bit prefetch nor the quorum default of 2,000 caps the
  depth. The consumers form a staircase: *k+1* opens only when *k* is
  full, so each holds one run of the queue (quorum returns go back per
  consumer) and the client never has more than one window in flight.
  Opening a classic queue's consumers all at once let the broker push the
  whole queue at the client, which buffered it (measured: 95-190 MiB of
  client memory for 200,000 messages of 32 bytes, against 18 MiB for the
  staircase, which was also no slower).
* At the end every consumer is cancelled first (nothing can be delivered
  to us any more), then everything goes back in order, by closing the
  channels that hold the messages or by ``basic.nack`` (:mod:`.returns`
  says which, and why), and the capture waits until the queue's depth
  shows them back.
  Quorum queues count every return toward ``x-delivery-count``; where a
  delivery limit is in force the capture is refused before the first
  message, unless explicitly allowed (:mod:`.returns`), and after an
  allowed capture stopped short of the limit until the risk is gone
  (:mod:`.limit_stops`).
"""

from __future__ import annotations

import time

from airflow_rbak.broker.amqp_client import CONNECTION_ERRORS, close_quietly, open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo, describe_queue
from airflow_rbak.broker.errors import QueueNotFoundError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.capture_options import (  # noqa: F401 - the capture's public names, re-exported
    MAX_PREFETCH,
    CaptureOptions,
    CaptureResult,
    fingerprint,
    result_from,
)
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.errors import CaptureInterruptedError, DeliveryLimitRiskError, UnsafeQueueError
from airflow_rbak.capture.limit_stops import LimitStops, default_state_dir, open_ledger
from airflow_rbak.capture.queue_features import CaptureMethod, Facts, QueueDecision, decide
from airflow_rbak.capture.queue_run import QueueRun
from airflow_rbak.display import package_logger
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)


class QueueCapture:
    """Captures one classic or quorum queue into staging, resumably."""

    def __init__(
        self,
        connection: RabbitMQConnection,
        storage: Storage,
        checkpoints: CaptureCheckpoints,
        options: CaptureOptions,
        stops: LimitStops | None = None,
    ) -> None:
        self.connection = connection
        self.storage = storage
        self.checkpoints = checkpoints
        self.options = options
        #: The delivery-limit stops (:mod:`.limit_stops`); default: the ledger in ``default_state_dir()``, sealed as
        #: the checkpoints are.
        self.stops = stops or LimitStops(storage, open_ledger(default_state_dir()), checkpoints.seal)

    def capture(self, info: QueueInfo, broker_version: str) -> CaptureResult:
        """Capture every message present at the start, return them all, and report."""
        opts, started = self.options, time.monotonic()
        done = self.checkpoints.get(opts.backup_id, info.vhost, info.name)
        if done is not None and done.completed:
            return result_from(done, 0.0, skipped=True)
        info, decision = self.decide(info, broker_version)
        if decision.reason is not None:
            return self._leave_out(info, decision.reason)
        conn = open_connection(self.connection, info.vhost)
        run: QueueRun | None = None
        try:
            run = QueueRun(self, conn, info, decision, done)
            try:
                run.consume()
            finally:
                run.give_back()
            # The broker re-enqueues while the last chunk is written; the depth check then confirms it.
            run.finish_staging()
            depth_after = run.settled_depth()
        except DeliveryLimitRiskError as exc:
            raise self._record_stop(info, decision, exc) from None
        except CONNECTION_ERRORS as exc:
            if run is not None:
                run.writer.close()  # the chunk being stored commits its checkpoint first
                run.raise_if_timed_out(exc)
            raise CaptureInterruptedError(
                f"capture of {info.queue_type} queue {info.name!r} in vhost {info.vhost!r} was interrupted "
                f"({type(exc).__name__}) after {run_staged(self, info)} staged messages. No message was removed: "
                "unacknowledged messages go back to the queue when the connection drops. Re-run the same backup_id "
                "to resume."
            ) from None
        finally:
            if run is not None:
                run.writer.close()
            close_quietly(conn)
        return run.result(time.monotonic() - started, depth_after)

    def decide(self, info: QueueInfo, broker_version: str) -> tuple[QueueInfo, QueueDecision]:
        """The queue as it is now, not as discovery saw it (a policy may have changed since), and what to do with it."""
        try:
            with ManagementClient(self.connection) as client:
                info = describe_queue(client, info.vhost, info.name)
        except QueueNotFoundError:
            return info, QueueDecision(CaptureMethod.LEAVE_OUT, "the queue no longer exists (deleted since discovery)")
        decision = decide(info, Facts(broker_version, self.options.allow_delivery_count_increase))
        plan = decision.return_plan
        if plan is None or not plan.counts or plan.limit is None:
            return info, decision
        # Returns count and the user allowed it: unless an earlier capture stopped short of the limit, or a stop this
        # one makes could not be remembered outside the location (:mod:`.limit_stops`).
        reason = self.stops.reason(info, plan.limit, lambda: self._exact_depth(info))
        if reason is None and (problem := self.stops.unwritable()) is not None:
            reason = (f"a stop at its delivery limit of {plan.limit} could not be remembered outside the backup "
                      f"location: this deployment's ledger of delivery-limit stops ([rbak] state_dir) {problem}")
        return info, decision if reason is None else QueueDecision(CaptureMethod.LEAVE_OUT, reason)

    def _exact_depth(self, info: QueueInfo) -> int:
        """The queue's ready messages over AMQP (exact, where the management API's count is sampled)."""
        conn = open_connection(self.connection, info.vhost)
        try:
            return int(conn.channel().queue_declare(info.name, passive=True).method.message_count)
        finally:
            close_quietly(conn)

    def _record_stop(self, info: QueueInfo, decision: QueueDecision, exc: DeliveryLimitRiskError) -> DeliveryLimitRiskError:
        """Remember the stop in the location and the ledger (:mod:`.limit_stops`): later captures leave the queue out."""
        assert decision.return_plan is not None and decision.return_plan.limit is not None
        failed = self.stops.record(info, decision.return_plan.limit, self.options.backup_id)
        places, clear = self.stops.places(info.vhost, info.name), self.stops.how_to_clear(info.vhost, info.name)
        if len(failed) == 2:
            return DeliveryLimitRiskError(
                f"{exc} The stop could not be recorded in {' nor in '.join(failed)}: the next capture of this queue with "
                "allow_delivery_count_increase would bring its messages to the delivery limit; do not run one")
        kept = f"Later backups leave it out while either of {places} records it (both are cleared by a backup that " \
               f"sees the queue empty or its limit raised, or by {clear})."
        if failed:
            return DeliveryLimitRiskError(f"{exc} {kept} But the stop could not be written to {failed[0]}: it is "
                                          "remembered in one place only")
        return DeliveryLimitRiskError(f"{exc} {kept}")

    def _leave_out(self, info: QueueInfo, reason: str) -> CaptureResult:
        """Leave a queue out before its first message is received (or fail, under ``on_unsafe_queue=fail``)."""
        what = f"{info.queue_type} queue {info.name!r} in vhost {info.vhost!r}"
        if self.options.on_unsafe_queue == "fail":
            raise UnsafeQueueError(f"{what} cannot be backed up without changing it: {reason}. Nothing was read from it; "
                                   "set on_unsafe_queue=skip to back up the other queues without it")
        log.warning("%s is left out of backup %s: %s. Nothing was read from it", what, self.options.backup_id, reason)
        return CaptureResult(vhost=info.vhost, queue=info.name, queue_type=info.queue_type, messages=0, bytes=0,
                             staged_chunks=0, duration_s=0.0, target=0, left_out=reason, method=CaptureMethod.LEAVE_OUT.value)


def run_staged(capture: QueueCapture, info: QueueInfo) -> int:
    progress = capture.checkpoints.get(capture.options.backup_id, info.vhost, info.name)
    return progress.staged_records if progress else 0
