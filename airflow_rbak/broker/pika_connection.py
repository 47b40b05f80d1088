"""This project's pika connections: header tables decoded typed (when read), wider socket reads, pipelined publisher
confirms, and nothing changed for others.

pika decodes a content header with the class it finds in ``pika.spec.props``, a
registry shared by every pika user in the process. Rather than replace that
entry (which would hand :class:`~airflow_rbak.broker.amqp_types.TypedBasicProperties`
to every other pika connection in an Airflow worker), our connections use
:class:`RbakSelectConnection`, which decodes ``basic`` content headers itself
into :class:`~airflow_rbak.broker.amqp_types.DeliveredProperties` (the property
list kept as received, decoded on first read), and leaves every other frame to
pika. It also reads :data:`SOCKET_READ_BYTES`
per socket read, on its own transport only.

pika offers neither as a setting, nor a blocking channel whose publishes do not
each wait for their confirm (:class:`ConfirmChannel`), nor a way to send a message
whose frames are already written, nor a way to end a connection without rejecting what
it holds, so this relies on seven of its internals, each checked by
``tests/broker/test_pika_connection.py`` (which fails when a pika release changes them):
``Connection._read_frame()`` (how a connection decodes its buffer),
``BaseConnection._proto_connection_made(transport)`` (where it receives its
transport) with the transport's ``_MAX_RECV_BYTES`` and ``_sock`` (:func:`drop`: a
connection ended without pika's rejects), ``BlockingConnection``'s ``_impl_class``
argument and its ``_impl`` (the asynchronous connection under it),
``BlockingChannel._impl`` (the asynchronous channel under a blocking one), and
``Connection._output_marshaled_frames`` with ``_body_max_length`` (where a publish's
frames go out, and the negotiated body size of one frame). Nothing outside this
module touches pika's internals.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pika
import pika.exceptions
import pika.frame
from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties

#: Bytes per socket read. pika reads 4 KiB (three or four 1 KiB messages) and re-slices its frame buffer once per
#: frame, so far larger reads cost more than they save; 16 KiB took 6-11% less client CPU per message (measured).
SOCKET_READ_BYTES = 16384
#: A frame's type, channel and size; a content header's class, weight and body size.
_FRAME_START = struct.Struct(">BHL")
_CONTENT_HEADER = struct.Struct(">HHQ")
#: A content header frame's start: frame start, then class, weight and body size.
_HEADER_FRAME = struct.Struct(">BHLHHQ")
_FRAME_END = bytes([spec.FRAME_END])
#: How many bytes of written frames :meth:`ConfirmChannel.publish_encoded` gathers before handing them to pika's
#: transport as one write (pika hands each frame to the socket on its own: three sends per message).
FLUSH_BYTES = 65536
#: How many (exchange, routing key, mandatory) method frames a confirm channel keeps written.
_METHOD_CACHE = 1024


def decode_frame(data: bytes) -> tuple[int, Any]:
    """pika's ``frame.decode_frame``, but a ``basic`` content header's properties are :class:`TypedBasicProperties`."""
    if len(data) < _FRAME_START.size or data[0] != spec.FRAME_HEADER:
        return pika.frame.decode_frame(data)
    _type, channel, size = _FRAME_START.unpack_from(data)
    end = spec.FRAME_HEADER_SIZE + size + spec.FRAME_END_SIZE
    if end > len(data):
        return 0, None
    if data[end - 1] != spec.FRAME_END:
        raise pika.exceptions.InvalidFrameError("Invalid FRAME_END marker")
    class_id, _weight, body_size = _CONTENT_HEADER.unpack_from(data, spec.FRAME_HEADER_SIZE)
    if class_id != spec.BasicProperties.INDEX:
        return pika.frame.decode_frame(data)
    properties = DeliveredProperties(data[spec.FRAME_HEADER_SIZE + _CONTENT_HEADER.size : end - 1])
    return end, pika.frame.Header(channel, body_size, properties)


class RbakSelectConnection(pika.SelectConnection):
    """pika's SelectConnection with typed header tables and :data:`SOCKET_READ_BYTES` reads, for this connection only."""

    def _read_frame(self) -> tuple[int, Any]:
        return decode_frame(self._frame_buffer)

    def _proto_connection_made(self, transport: Any) -> None:
        if isinstance(getattr(transport, "_MAX_RECV_BYTES", None), int):  # a pika whose transport differs reads as it does
            transport._MAX_RECV_BYTES = SOCKET_READ_BYTES
        self.rbak_transport = transport
        super()._proto_connection_made(transport)


def drop(conn: pika.BlockingConnection, wait: float = 10.0) -> None:
    """Drop a connection of :func:`blocking_connection` without AMQP's closing handshake, so that the broker gives its
    unacknowledged deliveries back itself, each channel's in delivery order.

    pika's own close first rejects every delivery it holds but has not handed over, and a quorum queue before RabbitMQ
    4.3 appends a rejected message behind those waiting (``versions.QUORUM_RETURN_METHOD``): a queue whose order
    matters (the journal) would change. Shuts the transport's socket down (``_sock``, checked by
    tests/broker/test_pika_connection.py); pika then sees the stream end, as when the network drops it.
    """
    sock = getattr(getattr(conn._impl, "rbak_transport", None), "_sock", None)  # noqa: SLF001 - the connection under it
    if sock is None or not conn.is_open:
        if conn.is_open:
            conn.close()
        return
    with _quiet(_DROP_LOGGERS):  # pika logs a stream it did not close as four errors: here it is intended
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # gone already
            pass
        deadline = time.monotonic() + wait
        while conn.is_open and time.monotonic() < deadline:
            try:
                conn.process_data_events(time_limit=0.1)  # until pika sees the socket gone (it rejects nothing)
            except pika.exceptions.AMQPError:
                break


_DROP_LOGGERS = ("pika.adapters.utils.io_services_utils", "pika.adapters.base_connection",
                 "pika.adapters.blocking_connection")


@contextlib.contextmanager
def _quiet(names: tuple[str, ...]) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def blocking_connection(parameters: pika.connection.Parameters | Sequence[pika.connection.Parameters]) -> pika.BlockingConnection:
    """A blocking connection of this project: deliveries carry ``typed_headers`` (see ``amqp_types.headers_of``).

    Given several parameters (a cluster's nodes), pika connects to the first that takes the connection."""
    return pika.BlockingConnection(parameters, _impl_class=RbakSelectConnection)


class ConfirmChannel:
    """A channel of a blocking connection in confirm mode whose publishes do not wait for their confirm.

    pika's ``BlockingChannel`` in confirm mode waits for each publish's confirm, a round trip a message (about ten
    times slower on this machine than a window of them in flight). The asynchronous channel under it takes
    callbacks instead: ``on_confirm`` gets each ``basic.ack``/``basic.nack`` frame and ``on_return`` each
    ``basic.return`` (an unroutable ``mandatory`` publish), while the connection's ``process_data_events`` runs.
    """

    def __init__(self, conn: pika.BlockingConnection, on_confirm: Callable[[pika.frame.Method], None],
                 on_return: Callable[[Any, spec.Basic.Return, spec.BasicProperties, bytes], None] | None = None) -> None:
        self.channel = conn.channel()
        self._async = self.channel._impl  # noqa: SLF001 - the one use of this internal; its test checks it
        #: Why the broker closed the channel (``reply_code``, ``reply_text``), once it did: a publish it refuses
        #: outright (a message over ``max_message_size``) closes the channel, and its confirm never comes.
        self.closed_by_broker: tuple[int, str] | None = None
        self._async.add_on_close_callback(self._on_close)
        if on_return is not None:
            self._async.add_on_return_callback(on_return)
        self._conn = conn._impl  # noqa: SLF001 - the asynchronous connection: where written frames go out
        self._number = self.channel.channel_number
        self._methods: dict[tuple[str, str, bool], bytes] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        ready: list[bool] = []
        self._async.confirm_delivery(ack_nack_callback=on_confirm, callback=lambda _frame: ready.append(True))
        while not ready:
            conn.process_data_events(time_limit=0.1)

    def publish(self, exchange: str, routing_key: str, body: bytes, properties: spec.BasicProperties, *,
                mandatory: bool = False) -> None:
        """Send one message; its confirm (and its return, if unroutable and ``mandatory``) reaches the callbacks later."""
        self.flush()
        self._async.basic_publish(exchange, routing_key, body, properties, mandatory=mandatory)

    def publish_encoded(self, exchange: str, routing_key: str, body: bytes, property_list: bytes, *,
                        mandatory: bool = False) -> None:
        """Send one message whose content header's property list is already written (``property_list``): the same
        frames pika's ``basic_publish`` writes (a test holds them equal), gathered and handed to pika's transport
        :data:`FLUSH_BYTES` at a time. Call :meth:`flush` before waiting for anything the broker answers."""
        if not self._async.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        key = (exchange, routing_key, mandatory)
        method = self._methods.get(key)
        if method is None:
            if len(self._methods) >= _METHOD_CACHE:
                self._methods.clear()
            method = pika.frame.Method(self._number, spec.Basic.Publish(
                exchange=exchange, routing_key=routing_key, mandatory=mandatory)).marshal()
            self._methods[key] = method
        number, size = self._number, len(body)
        out = self._out
        out.append(method)
        out.append(_HEADER_FRAME.pack(spec.FRAME_HEADER, number, _CONTENT_HEADER.size + len(property_list),
                                      spec.BasicProperties.INDEX, 0, size))
        out.append(property_list)
        out.append(_FRAME_END)
        step = self._conn._body_max_length  # noqa: SLF001 - the negotiated frame size; its test checks it
        for start in range(0, size, step):
            chunk = body[start:start + step]
            out.append(_FRAME_START.pack(spec.FRAME_BODY, number, len(chunk)))
            out.append(chunk)
            out.append(_FRAME_END)
        self._out_bytes += len(method) + len(property_list) + size + 30
        if self._out_bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Hand the frames :meth:`publish_encoded` gathered to pika's transport (sent as the connection runs). On a
        closed connection they are dropped: nothing more of it can reach the broker."""
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            if self._conn.is_open:
                self._conn._output_marshaled_frames([data])  # noqa: SLF001 - its test checks it

    def _on_close(self, _channel: Any, reason: Exception) -> None:
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            self.closed_by_broker = (reason.reply_code, reason.reply_text)

    @property
    def is_open(self) -> bool:
        """Whether the channel is still open."""
        return bool(self.channel.is_open)

    def close(self) -> None:
        """Close the channel (pika's errors propagate: a caller closing a broken channel decides what they mean)."""
        self.flush()
        self.channel.close()
