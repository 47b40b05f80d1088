"""Stream capture: from the last checkpointed offset to the stream's tail at start.

Reads over AMQP with ``x-stream-offset`` (the broker converts messages back
to AMQP 0-9-1, so properties and header types arrive as published); the
tail comes from the stream protocol (:mod:`stream_protocol`). Reading a
stream is not destructive and acks only grant credit. ``delivery_tag`` in a
record is the stream offset. The stored offsets of the stream's named
consumers are saved beside (checkpoint database and result), like
kafka-backup's consumer-group offsets.

Offsets can have gaps: a named consumer's stored offset is a tracking entry
in the stream's log and takes an offset of its own (measured on RabbitMQ 3.10). So the
checkpoint's ``target_count`` is the offset span, an upper bound on the
message count, and the next backup starts at ``last_offset + 1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pika

from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.amqp_client import CONNECTION_ERRORS, close_quietly, open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.broker.errors import StreamLeaderPendingError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.capture_options import CaptureOptions, CaptureResult, result_from
from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress
from airflow_rbak.capture.errors import CaptureInterruptedError
from airflow_rbak.capture.message_identity import stream_delivery_fingerprint
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.capture.stream_identity import StreamMark, fingerprint_at, offset_of, resume_offset
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, STREAM_BROKER_HEADERS
from airflow_rbak.repository.staging import StagedChunk, StagingWriter
from airflow_rbak.storage.base import Storage

_PREFETCH = 2000
_ACK_EVERY = 500
_STREAM_DROPPED = DROPPED_HEADERS.index(STREAM_BROKER_HEADERS)


@dataclass
class _StreamRead:
    """One pass over a stream so far: shared by the consumer, the staging writer's seal and its thread's checkpoints."""

    progress: QueueProgress
    next: int
    staged: int
    bytes: int
    fingerprint: str | None = None  # of the message at the end offset, once this pass read it


class StreamCapture:
    """Captures one stream's new messages into staging, resumably."""

    def __init__(
        self, connection: RabbitMQConnection, storage: Storage, checkpoints: CaptureCheckpoints, options: CaptureOptions
    ) -> None:
        self.connection, self.storage, self.checkpoints, self.options = connection, storage, checkpoints, options

    def capture(
        self,
        info: QueueInfo,
        start_offset: int = 0,
        consumer_names: Iterable[str] = (),
        management: ManagementClient | None = None,
        resume_after: StreamMark | None = None,
    ) -> CaptureResult:
        """Capture offsets ``[checkpoint or start, tail at start]`` and save named consumers' offsets.

        ``start`` is ``start_offset``, or with ``resume_after`` (the previous backup's end) the offset after it
        when the stream still holds that backup's last message, else 0 (:mod:`stream_identity`).
        """
        return self._on_member(info)._capture(info, start_offset, consumer_names, management, resume_after)

    def _on_member(self, info: QueueInfo) -> StreamCapture:
        """This capture reading from a node that hosts a member of the stream (:func:`stream_protocol.member_connection`;
        in a cluster, a stream need not have one on every node)."""
        try:
            member = stream_protocol.member_connection(self.connection, info.vhost, info.name)
        except StreamLeaderPendingError:
            raise CaptureInterruptedError(
                f"stream {info.name!r} in vhost {info.vhost!r} has no leader right now (an election is under way after "
                "a node was lost); nothing was read. Re-run the same backup_id to resume.") from None
        return StreamCapture(member, self.storage, self.checkpoints, self.options)

    def _capture(self, info: QueueInfo, start_offset: int, consumer_names: Iterable[str],
                 management: ManagementClient | None, resume_after: StreamMark | None) -> CaptureResult:
        started = time.monotonic()
        progress = self.checkpoints.get(self.options.backup_id, info.vhost, info.name)
        if progress is not None and progress.completed:
            result = result_from(progress, 0.0, skipped=True)
            return replace(result, last_fingerprint=self._fingerprint(info, progress, resume_after, None))
        if progress is None:
            end = self._tail(info)
            if resume_after is not None:
                start_offset = resume_offset(self.connection, info.vhost, info.name, resume_after, end, self._wait)
            progress = QueueProgress(
                self.options.backup_id, info.vhost, info.name, "stream", target_count=max(0, end - start_offset + 1),
                stream_start_offset=start_offset, stream_end_offset=end, stream_next_offset=start_offset,
            )
            self.checkpoints.save(progress)
        offsets = self._consumer_offsets(info, consumer_names, management)
        self.checkpoints.save_consumer_offsets(self.options.backup_id, info.vhost, info.name, offsets)
        progress, seen = self._read(info, progress)
        result = result_from(progress, time.monotonic() - started)
        return replace(result, consumer_offsets=offsets, last_offset=progress.stream_end_offset,
                       last_fingerprint=self._fingerprint(info, progress, resume_after, seen))

    @property
    def _wait(self) -> float:
        return max(3.0, self.connection.timeout / 2)

    def _fingerprint(self, info: QueueInfo, progress: QueueProgress, mark: StreamMark | None, seen: str | None) -> str | None:
        """The fingerprint of the message at the capture's last offset, for the next backup to check."""
        end = progress.stream_end_offset
        if seen is not None or end is None or end < 0:
            return seen
        if mark is not None and mark.last_offset == end and mark.fingerprint is not None:
            return mark.fingerprint  # nothing new: resume_offset has just checked that message
        return fingerprint_at(self.connection, info.vhost, info.name, end, self._wait)

    def _tail(self, info: QueueInfo) -> int:
        """The stream's last offset now, or -1 when it is empty.

        ``stream_tail`` answers None when no chunk arrives in time, which a very
        slow broker shares with an empty stream; the AMQP depth tells them apart,
        so a slow broker fails the capture instead of backing up nothing.
        """
        tail = stream_protocol.stream_tail(self.connection, info.vhost, info.name, wait=self._wait)
        if tail is not None:
            return tail
        conn = open_connection(self.connection, info.vhost)
        try:
            depth = conn.channel().queue_declare(info.name, passive=True).method.message_count
        except CONNECTION_ERRORS as exc:
            raise CaptureInterruptedError(
                f"cannot read the depth of stream {info.name!r} in vhost {info.vhost!r} ({type(exc).__name__}); re-run"
            ) from None
        finally:
            close_quietly(conn)
        if depth:
            raise CaptureInterruptedError(
                f"stream {info.name!r} in vhost {info.vhost!r} holds {depth} messages but its tail could not be read over "
                f"the stream protocol (port {self.connection.stream_port}) in time; re-run, or raise the connection timeout"
            )
        return -1

    def _consumer_offsets(self, info: QueueInfo, names: Iterable[str], management: ManagementClient | None) -> dict[str, int]:
        refs = set(names)
        if management is not None:
            for consumer in management.stream_consumers(info.vhost):
                props = consumer.get("properties") or {}
                if consumer.get("queue", {}).get("name") == info.name and props.get("name"):
                    refs.add(str(props["name"]))
        return stream_protocol.query_consumer_offsets(self.connection, info.vhost, info.name, refs)

    def _read(self, info: QueueInfo, progress: QueueProgress) -> tuple[QueueProgress, str | None]:
        """Stage offsets up to the end; also the last message's fingerprint when this pass read it."""
        end, next_offset = progress.stream_end_offset, progress.stream_next_offset
        assert end is not None and next_offset is not None
        state = _StreamRead(progress, next_offset, progress.staged_records, progress.staged_bytes)

        def on_chunk(chunk: StagedChunk) -> None:  # on the staging thread: the counts come from when the chunk closed
            staged, staged_bytes, following = chunk.state
            state.progress = replace(state.progress, staged_records=staged, staged_bytes=staged_bytes,
                                     last_chunk=chunk.sequence, stream_next_offset=following)
            self.checkpoints.save(state.progress)

        writer = StagingWriter(self.storage, self.options.backup_id, info.vhost, info.name,
                               next_sequence=progress.last_chunk + 1, compression=self.options.compression,
                               max_records=self.options.chunk_max_records, max_bytes=self.options.chunk_max_bytes,
                               on_chunk=on_chunk, seal_state=lambda: (state.staged, state.bytes, state.next),
                               background=True)
        try:
            if next_offset <= end:
                self._consume(info, end, state, writer)
            writer.flush()
        finally:
            writer.close()
        final = replace(state.progress, staged_records=state.staged, staged_bytes=state.bytes, stream_next_offset=state.next,
                        completed=True)
        self.checkpoints.save(final)
        return final, state.fingerprint

    def _consume(self, info: QueueInfo, end: int, state: _StreamRead, writer: StagingWriter) -> None:
        conn = open_connection(self.connection, info.vhost)
        try:
            channel = conn.channel()
            channel.basic_qos(prefetch_count=_PREFETCH)
            unacked = [0]

            def on_message(ch: object, method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> None:
                offset = offset_of(props)
                if offset is None:
                    raise CaptureInterruptedError("a stream delivery carried no x-stream-offset header")
                unacked[0] += 1
                if unacked[0] >= _ACK_EVERY:  # acks only grant credit on a stream
                    channel.basic_ack(method.delivery_tag, multiple=True)
                    unacked[0] = 0
                if offset < state.next or offset > end:
                    return
                now_ms = int(time.time() * 1000)
                record = stage_delivery(method, props, body, now_ms, _STREAM_DROPPED, delivery_tag=offset)
                if offset == end:
                    state.fingerprint = stream_delivery_fingerprint(method, props, body)
                state.next = offset + 1
                state.staged += 1
                state.bytes += len(body)
                writer.add(record, now_ms)

            channel.basic_consume(info.name, on_message, auto_ack=False, arguments={"x-stream-offset": state.next})
            idle_since = time.monotonic()
            while state.next <= end:
                before = state.next
                conn.process_data_events(time_limit=0.25)
                if state.next != before:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > self.options.idle_timeout:
                    raise CaptureInterruptedError(
                        f"stream {info.name!r} in vhost {info.vhost!r} stopped delivering at offset {state.next} "
                        f"(tail at start {end}); the offsets may have been truncated by retention. Re-run to resume."
                    )
        except CONNECTION_ERRORS as exc:
            raise CaptureInterruptedError(
                f"capture of stream {info.name!r} in vhost {info.vhost!r} was interrupted ({type(exc).__name__}) at "
                f"offset {state.next}; a stream is not changed by reading. Re-run the same backup_id to resume."
            ) from None
        finally:
            close_quietly(conn)
