"""The AMQP 0-9-1 basic content header's property list: a flag word, then each property present, in wire order.

The one decoder of it. The broker's pika objects (``broker/amqp_types.TypedBasicProperties``)
and the staged-record reader (``staged_records.py``, a delivery's record JSON at encode) both
read a delivery's properties here, its header table typed by ``field_table.py``; each says
what a short string becomes (pika gives ``str``, or ``bytes`` when it is not UTF-8; a record
holds text). Its encoder writes the list the restore publishes (:func:`encode_property_list`), byte for byte
what pika writes for the same values.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

from airflow_rbak.codec.field_table import decode_table
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.properties import OCTET, PIKA_NAMES, PROPERTIES, SHORT_STRING, TIMESTAMP
from airflow_rbak.exceptions import RbakError

#: The basic properties in wire order (pika's attribute names): the table's order, with ``headers`` third.
WIRE_ORDER = (*PIKA_NAMES[:2], "headers", *PIKA_NAMES[2:])
#: Each property's presence flag: bit 15 for the first, down to bit 2 (bit 0 says another flag word follows).
FLAGS = {name: 1 << (15 - n) for n, name in enumerate(WIRE_ORDER)}

_SHORT, _OCTET, _TIMESTAMP, _TABLE = range(4)
_KINDS = {SHORT_STRING: _SHORT, OCTET: _OCTET, TIMESTAMP: _TIMESTAMP}
#: (flag, index in ``PROPERTIES`` or -1 for headers, wire type) in wire order.
_LAYOUT = tuple(sorted(
    [(FLAGS[p.pika_name], index, _KINDS[p.kind]) for index, p in enumerate(PROPERTIES)] + [(FLAGS["headers"], -1, _TABLE)],
    reverse=True,
))
_KNOWN = sum(FLAGS.values())
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")

HeaderTable = tuple[tuple[str, HeaderValue], ...]


class PropertyListError(RbakError, ValueError):
    """A basic property list is malformed: it ends inside a value (its header table has ``FieldTableError``)."""


@functools.cache
def _present(flags: int) -> tuple[tuple[int, int], ...]:
    """The (index, wire type) of each property a flag word announces, in wire order (at most 2**14 flag words)."""
    return tuple((index, kind) for flag, index, kind in _LAYOUT if flags & flag)


def decode_property_list(
    data: bytes | memoryview, into: dict[str, Any], names: tuple[str, ...], not_utf8: Callable[[bytes | memoryview], Any]
) -> HeaderTable | None:
    """Decode the property list that ``data`` holds: set each property present in ``into`` under its name in
    ``names`` (the table's order), and return the typed header table (None when absent).

    A short string is text, or what ``not_utf8`` makes of its bytes when they are not UTF-8. Runs once per message
    read, so it touches only the properties present: ``into`` holds the absent ones already. Bytes after the last
    property present are left alone, as pika leaves them.
    """
    size = len(data)
    headers = None
    try:
        (flags,) = _U16.unpack_from(data, 0)
        pos, word = 2, flags
        while word & 1:  # another flag word: basic's 14 flags fit in the first, so the rest announce nothing
            (word,) = _U16.unpack_from(data, pos)
            pos += 2
        for index, kind in _present(flags & _KNOWN):
            if kind == _SHORT:
                end = pos + 1 + data[pos]
                if end > size:
                    raise PropertyListError(f"a short string of {end - pos - 1} bytes runs past the property list's {size}")
                raw = data[pos + 1 : end]
                try:
                    into[names[index]] = str(raw, "utf-8")
                except UnicodeDecodeError:
                    into[names[index]] = not_utf8(raw)
                pos = end
            elif kind == _OCTET:
                into[names[index]] = data[pos]
                pos += 1
            elif kind == _TIMESTAMP:
                (into[names[index]],) = _U64.unpack_from(data, pos)
                pos += 8
            else:
                headers, pos = decode_table(data, pos)
    except (struct.error, IndexError):
        raise PropertyListError(f"the property list ends inside a property (after {size} bytes)") from None
    return headers



_U8 = struct.Struct(">B")


def encode_property_list(values: tuple[Any, ...], table: bytes | None) -> bytes:
    """The property list of ``values`` (one per property, the table's order, ``None`` where absent) and an already
    encoded header ``table`` (``None`` for none): the bytes pika's ``BasicProperties.encode`` writes for the same
    values, without building pika's object (the restore's publish writes one per message).

    A short string over 255 bytes, an octet over 255 or a negative timestamp raise ``struct.error`` as pika's encoder
    does; a verified record holds none."""
    flags = 0
    pieces: list[bytes] = []
    append = pieces.append
    for flag, index, kind in _LAYOUT:
        value = table if index < 0 else values[index]
        if value is None:
            continue
        flags |= flag
        if kind == _SHORT:
            raw = value.encode() if isinstance(value, str) else value
            append(_U8.pack(len(raw)))
            append(raw)
        elif kind == _OCTET:
            append(_U8.pack(value))
        elif kind == _TIMESTAMP:
            append(_U64.pack(value))
        else:
            append(value)
    return _U16.pack(flags) + b"".join(pieces)
