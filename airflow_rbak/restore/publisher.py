"""Publishes one queue's records with publisher confirms, the mandatory flag and exact resume.

Why it is built this way:

* Confirms are pipelined: up to ``max_in_flight`` messages are unconfirmed
  at once (waiting for each confirm costs a round trip per message, about
  ten times slower on this machine). pika's blocking channel only offers
  per-message confirms, so the pipeline publishes through
  :class:`~airflow_rbak.broker.pika_connection.ConfirmChannel`.
* Every message is published ``mandatory``: the broker returns an
  unroutable one (``basic.return`` before its ``basic.ack``). Returns are
  matched to the oldest unconfirmed message with the same exchange, routing
  key and body, recorded with their backup positions, and reported.
* The checkpoint is committed as confirms arrive, with the target's depth
  at that point. Messages in flight at a crash may have been enqueued; the
  re-run reads the depth, and the difference is exactly how many of the
  next records are already there (one channel keeps publish order). So no
  duplicate and no gap, as long as nothing else consumes from or publishes
  to the target queue meanwhile. In ``exchange`` mode a message may land in
  several queues or none, so there the re-run is at-least-once.
* A re-run never counts a message as its own unless what was in flight can
  explain it. Before it sends past the checkpoint's ``sent_bound`` the
  pipeline commits a larger one (the records confirmed, those in flight, and
  :func:`bound_step` more: ``max(max_in_flight, 500)``, so the bound rides on
  the commits made every 500 confirms and adds almost no writes). A re-run
  whose target grew by more than ``sent_bound - published`` is refused, naming
  both numbers (:func:`reconcile`). A checkpoint of an older version has no
  bound: then ``max_in_flight + 500`` (the current setting's) stands for it,
  what an attempt of that version could have sent beyond its last commit.
* A stopped attempt leaves its checkpoint exact (:meth:`ConfirmPipeline.stop`). Whatever stopped it, it first
  waits briefly for the confirms still due; any that never come, it closes its connection (so nothing more of it
  can land), counts how many of them reached the target by its settled depth, and writes the checkpoint with no
  room at all. Only where the target cannot be measured (the broker is unreachable) does it write exactly how many
  were in flight. So between a stop and its re-run, any message another publisher adds is more than the
  checkpoint explains, and the re-run refuses it.
* What stays undetectable for a classic or quorum queue: an attempt killed outright (SIGKILL, the OOM killer) has
  no stop; its last commit's bound stands, and another publisher adding no more than the room it leaves
  (``sent_bound - published`` less what the killed attempt got in; at most ``max_in_flight +
  max(max_in_flight, 500)``) between the kill and the re-run is counted as delivered, skipping as many records. A
  classic or quorum queue cannot be read without marking its messages (redelivered, delivery counts), so the re-run
  does not look. A stream is read back instead: the messages at the offsets the re-run would count as its own are
  compared, body and ids, with the records it would skip (:mod:`.stream_resume`), so there a foreign message
  refuses the re-run.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import pika
import pika.exceptions

from airflow_rbak.broker.pika_connection import ConfirmChannel
from airflow_rbak.display import package_logger
from airflow_rbak.restore.checkpoints import QueueCheckpoint, RestoreCheckpointStore, Unroutable
from airflow_rbak.restore.errors import PublishError, TargetChangedError, UnexpectedMessagesError
from airflow_rbak.restore.records import Positioned

log = package_logger(__name__)
_COMMIT_EVERY = 500
_CONFIRM_TIMEOUT = 120.0
#: How long a stopped attempt waits for the confirms still due before it counts what landed.
_STOP_WAIT = 15.0
#: ``max_in_flight`` of the restores before the sent bound, for a checkpoint that has none (the request's default).
_LEGACY_IN_FLIGHT = 1000


def bound_step(max_in_flight: int) -> int:
    """How far past what it has sent the pipeline moves the sent bound at each commit."""
    return max(max_in_flight, _COMMIT_EVERY)


def sent_allowance(cp: QueueCheckpoint, max_in_flight: int = _LEGACY_IN_FLIGHT) -> int:
    """How many records past ``cp.published`` an earlier attempt may have sent: by its sent bound, or for a checkpoint
    written before the bound existed, a window and a commit interval (what such an attempt could leave unrecorded)."""
    if cp.sent_bound is None:
        return max_in_flight + _COMMIT_EVERY
    return max(cp.sent_bound - cp.published, 0)


@dataclass
class _InFlight:
    tag: int
    item: Positioned
    exchange: str
    routing_key: str
    target_offset: int | None = None
    confirmed: bool = False
    returned: str | None = None


class ConfirmPipeline:
    """One channel in confirm mode: publish, track confirms and returns, commit checkpoints."""

    def __init__(self, conn: pika.BlockingConnection, checkpoints: RestoreCheckpointStore, checkpoint: QueueCheckpoint,
                 max_in_flight: int, max_rate: float | None = None, track_offsets: bool = False) -> None:
        self.conn, self.checkpoints, self.cp = conn, checkpoints, checkpoint
        self.max_in_flight, self.max_rate, self.track_offsets = max_in_flight, max_rate, track_offsets
        self.pending: deque[_InFlight] = deque()
        self.by_tag: dict[int, _InFlight] = {}
        self.next_tag = 1
        self.published = self.confirmed = self.unroutable = 0
        self.started = time.monotonic()
        self._uncommitted = 0
        self._offset_pairs: list[tuple[int, int]] = []
        self._nacked: int | None = None
        self.channel = ConfirmChannel(conn, self._on_confirm, self._on_return)

    def publish(self, item: Positioned, exchange: str, routing_key: str, property_list: bytes,
                target_offset: int | None = None) -> None:
        """Send one message (its content header's ``property_list`` already written), first waiting while the window
        is full or the rate limit is ahead. Sends are gathered a few dozen at a time and go out at the latest when
        the pipeline next waits on the broker (:meth:`_pump`)."""
        while len(self.pending) >= self.max_in_flight:
            self._pump(0.05)
        self._throttle()
        self._check_open()
        if self.cp.published + len(self.pending) >= (self.cp.sent_bound or 0):
            self._commit()  # the bound is written ahead of the sends it covers
        entry = _InFlight(self.next_tag, item, exchange, routing_key, target_offset)
        self.channel.publish_encoded(exchange, routing_key, item.record.body, property_list, mandatory=True)
        self.pending.append(entry)
        self.by_tag[entry.tag] = entry
        self.next_tag += 1
        self.published += 1
        if self.published % 200 == 0:
            self._pump(0)

    def drain(self) -> None:
        """Wait for every outstanding confirm and commit the checkpoint."""
        deadline = time.monotonic() + _CONFIRM_TIMEOUT
        while self.pending:
            self._check_open()
            if time.monotonic() > deadline:
                raise PublishError(f"{len(self.pending)} publishes to {self.cp.target_vhost}/{self.cp.target_queue} were "
                                   f"not confirmed within {_CONFIRM_TIMEOUT:.0f} s; re-run to resume")
            self._pump(0.05)
        self._commit()

    def _throttle(self) -> None:
        if not self.max_rate:
            return
        ahead = self.started + self.published / self.max_rate - time.monotonic()
        if ahead > 0.002:
            self._pump(ahead)

    def _pump(self, time_limit: float) -> None:
        try:
            self.channel.flush()
            self.conn.process_data_events(time_limit=time_limit)
        except pika.exceptions.AMQPError as exc:
            self._commit()
            raise PublishError(
                f"publishing to {self.cp.target_vhost}/{self.cp.target_queue} stopped ({type(exc).__name__}: {exc}); "
                f"{self.cp.published} records are confirmed and checkpointed; re-run to resume") from None
        self._advance()
        self._check_open()
        if self._nacked is not None:
            self._commit()
            raise PublishError(
                f"the broker refused (basic.nack) a message for {self.cp.target_vhost}/{self.cp.target_queue}; "
                f"{self.cp.published} records are confirmed and checkpointed; check the queue's limits, then re-run"
            )

    def _check_open(self) -> None:
        """Raise what the broker said when it closed the channel: its confirms will never come, so waiting for them
        would only end in a timeout that names the wrong cause."""
        if self.channel.closed_by_broker is None:
            return
        code, text = self.channel.closed_by_broker
        self._commit()
        first = (f" (the first: segment {self.pending[0].item.segment_key} record {self.pending[0].item.index})"
                 if self.pending else "")
        raise PublishError(
            f"the broker closed the channel publishing to {self.cp.target_vhost}/{self.cp.target_queue} "
            f"(reply {code}: {text}); {self.cp.published} records are confirmed and checkpointed, {len(self.pending)} "
            f"publishes were not confirmed{first}. Fix the cause, then re-run")

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        nack = isinstance(method, pika.spec.Basic.Nack)
        if method.multiple:  # the window is in tag order: walk it from the oldest
            entries = [e for e in itertools.takewhile(lambda e: e.tag <= method.delivery_tag, self.pending)]
        else:
            entry = self.by_tag.get(method.delivery_tag)
            entries = [entry] if entry is not None else []
        for entry in entries:
            if self.by_tag.pop(entry.tag, None) is None:
                continue
            if nack:
                self._nacked = entry.tag if self._nacked is None else min(self._nacked, entry.tag)
            else:
                entry.confirmed = True

    def _on_return(self, _channel: object, method: pika.spec.Basic.Return, _props: object, body: bytes) -> None:
        for entry in self.pending:
            if (entry.returned is None and not entry.confirmed and entry.exchange == method.exchange
                    and entry.routing_key == method.routing_key and entry.item.record.body == body):
                entry.returned = f"{method.reply_code} {method.reply_text}"
                return
        log.error("a returned message matched no unconfirmed publish (%s %s)", method.exchange, method.routing_key)

    def _advance(self, commit: bool = True) -> None:
        """Move the confirmed prefix of the window into the checkpoint (committed every few hundred)."""
        done = enqueued = 0
        last: _InFlight | None = None
        while self.pending and self.pending[0].confirmed:
            entry = last = self.pending.popleft()
            done += 1
            if entry.returned is not None:
                self.unroutable += 1
                item = entry.item
                self.checkpoints.add_unroutable(self.cp, Unroutable(item.ordinal, item.segment_key, item.index,
                                                                    entry.exchange, entry.routing_key, entry.returned))
                continue
            enqueued += 1
            if self.track_offsets and entry.target_offset is not None:
                self._offset_pairs.append((entry.item.record.delivery_tag, entry.target_offset))
        if last is None:
            return
        cp = self.cp
        depth = None if cp.depth_base is None else cp.depth_base + enqueued
        self.cp = replace(cp, next_ordinal=last.item.ordinal + 1, published=cp.published + done, depth_base=depth)
        self.confirmed += done
        self._uncommitted += done
        if commit and self._uncommitted >= _COMMIT_EVERY:
            self._commit()

    def _commit(self) -> None:
        self._save(max(self.cp.sent_bound or 0, self.cp.published + len(self.pending) + bound_step(self.max_in_flight)))

    def _save(self, bound: int) -> None:
        if self._offset_pairs:
            self.checkpoints.add_stream_offsets(self.cp, self._offset_pairs)
            self._offset_pairs = []
        self.cp = replace(self.cp, sent_bound=bound)
        self.checkpoints.save(self.cp)
        self._uncommitted = 0

    def stop(self, measure: Callable[[], int | None] | None) -> None:
        """After any failure: leave the checkpoint saying exactly what this attempt may have put in the target.

        Waits up to ``_STOP_WAIT`` for the confirms still due. Publishes that stay unconfirmed: the connection is
        closed, then ``measure`` (the target's settled depth once the broker holds no connection of this restore;
        ``None`` where it cannot tell) says how many landed, and those count as published; the checkpoint then
        allows nothing more. Without a measurement it allows exactly the publishes in flight. Never raises."""
        try:
            self._await_confirms(time.monotonic() + _STOP_WAIT)
        except Exception:  # noqa: BLE001 - a stop must still write what it knows
            pass
        if self.pending:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass
            try:
                depth = measure() if measure is not None else None
            except Exception as exc:  # noqa: BLE001
                log.warning("could not measure %s/%s after the stop (%s)", self.cp.target_vhost, self.cp.target_queue,
                            type(exc).__name__)
                depth = None
            if depth is not None:
                self._count_landed(depth)
        try:
            self._save(self.cp.published + len(self.pending))
        except Exception as exc:  # noqa: BLE001 - the last commit's (larger) bound stands
            log.error("could not write the checkpoint of %s/%s after the stop (%s); its last commit stands",
                      self.cp.target_vhost, self.cp.target_queue, type(exc).__name__)

    def _await_confirms(self, deadline: float) -> None:
        while self.pending and self._nacked is None and time.monotonic() < deadline:
            if self.channel.closed_by_broker is not None or not self.channel.is_open or not self.conn.is_open:
                return
            self.channel.flush()
            self.conn.process_data_events(time_limit=0.05)
            self._advance(commit=False)

    def _count_landed(self, depth: int) -> None:
        """Count the first ``depth - depth_base`` unconfirmed publishes as delivered: one channel keeps their order, and
        the connection is closed, so exactly those landed. A depth outside what was in flight is left to the re-run,
        which refuses it."""
        base = self.cp.depth_base
        landed = -1 if base is None else depth - base
        if not 0 <= landed <= len(self.pending) or any(e.returned for e in itertools.islice(self.pending, landed)):
            log.warning("%s/%s holds %d messages after the stop; %s were in flight: left to the re-run to judge",
                        self.cp.target_vhost, self.cp.target_queue, depth, len(self.pending))
            return
        if landed:
            last = self.pending[landed - 1]
            self.cp = replace(self.cp, next_ordinal=last.item.ordinal + 1, published=self.cp.published + landed,
                              depth_base=depth)
            log.info("%s/%s: %d unconfirmed publishes reached the queue before the stop; counted as published",
                     self.cp.target_vhost, self.cp.target_queue, landed)
        self.pending.clear()  # the rest never will: the connection is closed and the depth has settled
        self.by_tag.clear()

    def close(self) -> None:
        try:
            if self.channel.is_open:
                self.channel.close()
        except pika.exceptions.AMQPError:
            pass


def reconcile(cp: QueueCheckpoint, depth: int, skip: list[Positioned], allowance: int | None = None) -> QueueCheckpoint:
    """Account for records a crashed run got into the target unconfirmed: ``skip`` are the next records, ``allowance``
    how many an earlier attempt may have sent past ``published`` (default: :func:`sent_allowance`)."""
    if cp.depth_base is None:
        return cp
    extra = depth - cp.depth_base
    if extra < 0:
        raise TargetChangedError(
            f"{cp.target_vhost}/{cp.target_queue} holds {depth} messages but the checkpoint expects at least "
            f"{cp.depth_base}: something consumed or purged it during the restore, or the broker restarted and dropped "
            "its transient (delivery_mode 1) messages. Restore into an empty queue with a fresh checkpoint_state")
    allowed = min(sent_allowance(cp) if allowance is None else allowance, len(skip))
    if extra > allowed:
        raise UnexpectedMessagesError(
            f"{cp.target_vhost}/{cp.target_queue} holds {extra} more messages than the checkpoint accounts for "
            f"({depth} now, {cp.depth_base} when {cp.published} records were confirmed), but an earlier attempt can have "
            f"left at most {allowed} in flight: something else publishes to it. Nothing was published by this run. "
            "Stop the other publisher and re-run; or purge the target queue and restore with a fresh checkpoint_state")
    if extra == 0:
        return cp
    log.info("%s/%s: %d records of the interrupted run reached the queue unconfirmed; not publishing them again",
             cp.target_vhost, cp.target_queue, extra)
    return replace(cp, next_ordinal=skip[extra - 1].ordinal + 1, published=cp.published + extra, depth_base=depth)
