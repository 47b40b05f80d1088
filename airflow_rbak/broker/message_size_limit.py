"""The largest message a broker accepts (its ``max_message_size``), read from the broker itself.

RabbitMQ refuses a publish whose body is larger than ``max_message_size`` by closing the channel (4.0 lowered the
default from 128 MiB to 16 MiB), so a restore must know the limit before it publishes. Neither the management API
nor AMQP 0-9-1 tells it to a client; AMQP 1.0 does: from RabbitMQ 4.0 every node speaks it on its AMQP port, and
its answer to a client's sending link (``attach``) carries the node's ``max-message-size``. So this module opens
an AMQP 1.0 connection (SASL PLAIN, the same user, vhost and TLS as the AMQP 0-9-1 one), attaches one sending
link to the anonymous terminus (no queue or exchange is named, so nothing in the vhost is touched or created),
reads the answer and closes. A node that does not speak AMQP 1.0 (3.x without the plugin) gives no reading:
:func:`message_size_limit` then falls back on the version's default, and says so.

Only the few AMQP 1.0 types these frames use are encoded; the decoder reads any primitive and skips arrays and maps.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.versions import MAX_MESSAGE_SIZE

#: RabbitMQ's default ``max_message_size``: 128 MiB before 4.0, 16 MiB from 4.0 on (the version table's row).
DEFAULT_BEFORE_4: int = MAX_MESSAGE_SIZE.steps[0].value
DEFAULT_FROM_4: int = MAX_MESSAGE_SIZE.steps[-1].value
#: The most this probe reads of one frame: the broker's answers here are a few hundred bytes.
MAX_FRAME = 64 * 1024
_SASL_HEADER, _AMQP_HEADER = b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00"
_SASL_MECHANISMS, _SASL_INIT, _SASL_OUTCOME = 0x40, 0x41, 0x44
_OPEN, _BEGIN, _ATTACH, _DETACH, _CLOSE = 0x10, 0x11, 0x12, 0x16, 0x18
_TARGET = 0x29
#: Position of ``max-message-size`` in an ``attach`` performative's fields.
_ATTACH_MAX_MESSAGE_SIZE = 10


@dataclass(frozen=True)
class MessageSizeLimit:
    """The limit a target applies to one message's body, and where it was read (``source``, for the plan)."""

    max_bytes: int | None
    source: str


class Amqp10Unavailable(Exception):
    """The node did not complete an AMQP 1.0 handshake (not spoken, refused, or an answer this probe cannot read)."""


def message_size_limit(connection: RabbitMQConnection, vhost: str, version: tuple[int, int, int]) -> MessageSizeLimit:
    """The target's ``max_message_size``: read over AMQP 1.0 where the node speaks it, else its version's default."""
    try:
        value = probe_max_message_size(connection, vhost)
    except (OSError, Amqp10Unavailable) as exc:
        default = MAX_MESSAGE_SIZE.value(version)
        return MessageSizeLimit(default, f"the default of RabbitMQ {'.'.join(map(str, version))} (the node did not "
                                         f"tell its max_message_size over AMQP 1.0: {str(exc)[:200]})")
    return MessageSizeLimit(value, "max_message_size, as the target node announces it (AMQP 1.0 attach)")


def probe_max_message_size(connection: RabbitMQConnection, vhost: str) -> int | None:
    """The node's ``max-message-size`` from an AMQP 1.0 sending link's attach (None: no limit announced), asked of
    the first of the connection's nodes that takes a TCP connection (a cluster's nodes share the setting)."""
    *others, last = connection.each_node()
    for node in others:
        try:
            raw = socket.create_connection((node.host, node.amqp_port), timeout=min(node.timeout, 30))
        except OSError:
            continue
        return _probe(node, raw, vhost)
    return _probe(last, socket.create_connection((last.host, last.amqp_port), timeout=min(last.timeout, 30)), vhost)


def _probe(connection: RabbitMQConnection, raw: socket.socket, vhost: str) -> int | None:
    context = connection.ssl_context()
    sock = context.wrap_socket(raw, server_hostname=connection.host) if context else raw
    with sock:
        sock.sendall(_SASL_HEADER)
        _expect_header(sock, _SASL_HEADER)
        _expect(sock, _SASL_MECHANISMS)
        response = b"\x00" + connection.username.encode() + b"\x00" + connection.password.encode()
        sock.sendall(_frame(1, _performative(_SASL_INIT, [_sym("PLAIN"), _bin(response)])))
        outcome = _expect(sock, _SASL_OUTCOME)
        if not outcome or outcome[0] != 0:
            raise Amqp10Unavailable(f"SASL authentication refused (code {outcome[0] if outcome else '?'})")
        sock.sendall(_AMQP_HEADER)
        _expect_header(sock, _AMQP_HEADER)
        sock.sendall(_frame(0, _performative(_OPEN, [_str("airflow-rbak"), _str(f"vhost:{vhost}"), _uint(MAX_FRAME)])))
        _expect(sock, _OPEN)
        sock.sendall(_frame(0, _performative(_BEGIN, [b"\x40", _uint(0), _uint(16), _uint(16)])))
        _expect(sock, _BEGIN)
        target = b"\x00\x53" + bytes([_TARGET]) + _list([])  # the anonymous terminus: no address
        attach = [_str("rbak-max-message-size"), _uint(0), b"\x42", b"\x40", b"\x40", b"\x40", target, b"\x40", b"\x40",
                  _uint(0)]
        sock.sendall(_frame(0, _performative(_ATTACH, attach)))
        fields = _expect(sock, _ATTACH)
        try:
            sock.sendall(_frame(0, _performative(_CLOSE, [])))
        except OSError:
            pass
    value = fields[_ATTACH_MAX_MESSAGE_SIZE] if len(fields) > _ATTACH_MAX_MESSAGE_SIZE else None
    return int(value) if isinstance(value, int) and value > 0 else None


def _frame(kind: int, body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, kind, 0) + body


def _performative(code: int, fields: list[bytes]) -> bytes:
    return b"\x00\x53" + bytes([code]) + _list(fields)


def _list(fields: list[bytes]) -> bytes:
    body = b"".join(fields)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(fields)) + body


def _uint(n: int) -> bytes:
    return b"\x70" + struct.pack(">I", n)


def _str(text: str) -> bytes:
    data = text.encode()
    return b"\xb1" + struct.pack(">I", len(data)) + data


def _sym(text: str) -> bytes:
    data = text.encode()
    return b"\xb3" + struct.pack(">I", len(data)) + data


def _bin(data: bytes) -> bytes:
    return b"\xb0" + struct.pack(">I", len(data)) + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise Amqp10Unavailable("the node closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _expect_header(sock: socket.socket, header: bytes) -> None:
    got = _read_exact(sock, 8)
    if got != header:
        raise Amqp10Unavailable(f"the node answered protocol header {got!r}, not AMQP 1.0's")


def _expect(sock: socket.socket, code: int) -> list[Any]:
    """Read frames until the performative ``code``; its fields. A close or detach instead is the broker's refusal."""
    while True:
        size, doff = struct.unpack(">IB", _read_exact(sock, 5))
        if not 8 <= size <= MAX_FRAME or doff < 2:
            raise Amqp10Unavailable(f"a frame of {size} bytes (data offset {doff}) is not one this probe reads")
        rest = _read_exact(sock, size - 5)
        body = rest[doff * 4 - 5:]
        if not body:
            continue  # an empty frame: a heartbeat
        found, fields = _decode_performative(body)
        if found == code:
            return fields
        if found in (_CLOSE, _DETACH):
            raise Amqp10Unavailable(f"the node ended the probe: {fields!r:.200}")


def _decode_performative(body: bytes) -> tuple[int, list[Any]]:
    if body[:2] != b"\x00\x53":
        raise Amqp10Unavailable("a frame that is not a described performative")
    value, _ = _decode(body, 3)
    return body[2], value if isinstance(value, list) else []


_FIXED = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0, 0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1,
          0x56: 1, 0x60: 2, 0x61: 2, 0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
          0x94: 16, 0x98: 16}
_UNSIGNED = {0x50: ">B", 0x52: ">B", 0x53: ">B", 0x60: ">H", 0x70: ">I", 0x80: ">Q", 0x51: ">b", 0x54: ">b",
             0x55: ">b", 0x61: ">h", 0x71: ">i", 0x81: ">q"}


def _decode(data: bytes, at: int) -> tuple[Any, int]:
    """One value at ``at`` and the offset after it: ints, booleans, strings, lists; others as None."""
    if at >= len(data):
        raise Amqp10Unavailable("a frame ends inside a value")
    code = data[at]
    at += 1
    if code == 0x00:  # described: skip the descriptor, keep the value
        _, at = _decode(data, at)
        return _decode(data, at)
    if code in _FIXED:
        width = _FIXED[code]
        raw = data[at:at + width]
        if code in (0x41, 0x42, 0x56):
            return (code == 0x41 or raw == b"\x01"), at + width
        if code in (0x43, 0x44):
            return 0, at
        fmt = _UNSIGNED.get(code)
        return (struct.unpack(fmt, raw)[0] if fmt else None), at + width
    if code in (0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3):
        wide = code >= 0xb0
        length = struct.unpack_from(">I" if wide else ">B", data, at)[0]
        at += 4 if wide else 1
        raw = data[at:at + length]
        return (raw.decode("utf-8", "replace") if code & 0x0f != 0 else raw), at + length
    if code in (0xc0, 0xd0):
        wide = code == 0xd0
        size, count = struct.unpack_from(">II" if wide else ">BB", data, at)
        end = at + (4 if wide else 1) + size
        at += 8 if wide else 2
        items = []
        for _ in range(count):
            value, at = _decode(data, at)
            items.append(value)
        return items, end
    if code in (0xc1, 0xd1, 0xe0, 0xf0):  # maps and arrays: skipped whole
        wide = code in (0xd1, 0xf0)
        size = struct.unpack_from(">I" if wide else ">B", data, at)[0]
        return None, at + (4 if wide else 1) + size
    raise Amqp10Unavailable(f"an AMQP 1.0 type 0x{code:02x} this probe does not read")
