"""AMQP 0-9-1 basic properties with the header table typed, and a BackupRecord's properties as pika's.

A delivery becomes a record at encode, from its staged property list (``codec/staged_records.py``), without pika.

The properties are those of ``codec/properties.py``'s table; the header table
is decoded and encoded by ``codec/field_table.py``, never by pika (see
:class:`TypedBasicProperties`).
"""

from __future__ import annotations

import struct
from typing import Any

from pika import spec

from airflow_rbak.codec.field_table import FieldTableError, encode_table, plain_table
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.properties import PIKA_NAMES
from airflow_rbak.codec.property_list import decode_property_list

_ABSENT = dict.fromkeys(PIKA_NAMES)
#: What pika's ``__init__`` leaves without arguments (pika builds each incoming instance that way).
_NO_ARGUMENTS = {**_ABSENT, "_plain_headers": None}


class TypedBasicProperties(spec.BasicProperties):
    """pika's BasicProperties plus ``typed_headers``: the header table decoded without loss.

    Our connections (``pika_connection.py``) decode every ``basic`` content header into this class.

    The table is decoded once, by :func:`decode_table`, never by pika: pika's
    decoder loses types, costs as much again per message, and raises
    ``OverflowError`` on a timestamp past year 9999 (one such message would
    stop every capture of its queue). ``headers`` is a plain-dict view built
    from ``typed_headers`` on first use. Set ``typed_headers`` before
    publishing to send exactly those wire types (pika's encoder would turn
    every ``int`` into ``I``/``l``).
    """

    def __init__(
        self,
        *args: Any,
        typed_headers: tuple[tuple[str, HeaderValue], ...] | None = None,
        raw_headers: bytes | None = None,
        **kwargs: Any,
    ) -> None:
        if args or kwargs:
            super().__init__(*args, **kwargs)
        else:  # how pika builds every incoming instance: skip its fourteen setattr calls
            self.__dict__.update(_NO_ARGUMENTS)
        self.typed_headers = typed_headers
        #: An already encoded field table (length prefix included) to send as is: tests use it for every wire type.
        self.raw_headers = raw_headers

    @property
    def headers(self) -> dict[str, Any] | None:
        plain = self.__dict__.get("_plain_headers", _UNSET)
        if plain is _UNSET:
            typed = self.__dict__.get("typed_headers")
            plain = None if typed is None else plain_table(typed)
            self.__dict__["_plain_headers"] = plain
        return plain

    @headers.setter
    def headers(self, value: dict[str, Any] | None) -> None:
        self.__dict__["_plain_headers"] = value

    def decode(self, encoded: bytes, offset: int = 0) -> TypedBasicProperties:
        """Decode a content header's property list in one pass (``codec/property_list.py``): pika's values, the
        header table typed. Short strings are ``str`` when UTF-8 and ``bytes`` otherwise, as pika gives them."""
        attributes = self.__dict__
        attributes.update(_ABSENT)
        typed = decode_property_list(memoryview(encoded)[offset:] if offset else encoded, attributes, PIKA_NAMES, bytes)
        attributes["typed_headers"] = typed
        attributes["_plain_headers"] = None if typed is None else _UNSET
        return self

    def encode(self) -> list[bytes]:
        raw = getattr(self, "raw_headers", None)
        if raw is None and self.typed_headers is None:
            return super().encode()
        marker = object.__new__(spec.BasicProperties)
        marker.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _OWN_ATTRIBUTES})
        marker.headers = {"__rbak__": 0}  # placeholder: one S-free int field, replaced below
        pieces = spec.BasicProperties.encode(marker)
        placeholder = b"".join(pieces)
        encoded_placeholder = _placeholder_table()
        index = placeholder.index(encoded_placeholder)
        table = raw if raw is not None else encode_table(self.typed_headers or ())
        return [placeholder[:index] + table + placeholder[index + len(encoded_placeholder) :]]


_UNSET: Any = object()
_OWN_ATTRIBUTES = frozenset({"typed_headers", "raw_headers", "_plain_headers", "raw"})


class DeliveredProperties(TypedBasicProperties):
    """A delivery's properties as received: the content header's property list (``raw``), decoded on first use.

    Our connections hand every delivery these. The capture stages ``raw`` as it came (``capture/staged_delivery.py``)
    and reads no property of most deliveries, so their decoding, a fifth of the consuming thread's time per
    message, moves to the encode step. Reading any property, or encoding them again, decodes the whole list
    exactly as :meth:`TypedBasicProperties.decode` would have on receipt (and raises its errors then).
    """

    def __init__(self, raw: bytes) -> None:  # pika builds none of these: only pika_connection.decode_frame does
        self.__dict__["raw"] = raw

    def _decoded(self) -> None:
        if "typed_headers" not in self.__dict__:
            self.decode(self.__dict__["raw"])

    def __getattr__(self, name: str) -> Any:
        # Only for names not set on the instance: a property's first read, or a name that is not there at all.
        values = self.__dict__
        if name.startswith("__") or "typed_headers" in values or "raw" not in values:
            raise AttributeError(name)
        self._decoded()
        return getattr(self, name)

    @property
    def headers(self) -> dict[str, Any] | None:
        self._decoded()
        return super().headers

    @headers.setter
    def headers(self, value: dict[str, Any] | None) -> None:
        self.__dict__["_plain_headers"] = value

    def encode(self) -> list[bytes]:
        self._decoded()
        return super().encode()


def _placeholder_table() -> bytes:
    key = b"__rbak__"
    body = bytes([len(key)]) + key + struct.pack(">ci", b"I", 0)
    return struct.pack(">I", len(body)) + body


def headers_of(props: spec.BasicProperties) -> tuple[tuple[str, HeaderValue], ...]:
    """The typed header table of delivered properties (empty when the message has none)."""
    typed = getattr(props, "typed_headers", None)
    if typed is not None:
        return typed
    if props.headers:
        raise FieldTableError("properties were decoded by a plain pika connection, not pika_connection.blocking_connection(); "
                              "header types would be lost")
    return ()
