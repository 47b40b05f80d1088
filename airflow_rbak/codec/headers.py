"""AMQP header values as the spec's tagged variants (``{"Long": 3}``, ``"Void"``).

A header value keeps its variant so that a restore republishes the same AMQP
field type that was captured: ``Short(5)`` and ``Long(5)`` are different
messages to a consumer.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from airflow_rbak.exceptions import RbakError

LONG_STRING = "LongString"
SHORT_STRING = "ShortString"
LONG = "Long"
SHORT = "Short"
BOOL = "Bool"
BYTES = "Bytes"
TIMESTAMP = "Timestamp"
FLOAT = "Float"
DOUBLE = "Double"
VOID = "Void"
TABLE = "Table"
ARRAY = "Array"

KINDS = (LONG_STRING, SHORT_STRING, LONG, SHORT, BOOL, BYTES, TIMESTAMP, FLOAT, DOUBLE, VOID, TABLE, ARRAY)

_I64 = (-(2**63), 2**63 - 1)
_I16 = (-(2**15), 2**15 - 1)
_U64 = (0, 2**64 - 1)
#: Nesting deeper than this is refused on read: hostile input must not exhaust the stack.
MAX_DEPTH = 64

HeaderScalar = str | int | float | bool | bytes | None


class HeaderValueError(RbakError, ValueError):
    """A header value does not fit its variant (wrong type or out of range)."""


def _shortest_f32(value: float) -> float:
    """Round to float32 and return the shortest decimal that reads back to the same f32.

    That is what serde writes for an ``f32``, so our JSON matches the reference
    tool's and a restore packs the identical 32-bit pattern.
    """
    if not math.isfinite(value):
        return value
    try:
        bits = struct.pack("<f", value)
    except OverflowError:
        raise HeaderValueError(f"Float: {value!r} is out of range for a 32-bit float") from None
    exact = struct.unpack("<f", bits)[0]
    for digits in range(1, 10):
        candidate = float(f"{exact:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == bits:
                return candidate
        except OverflowError:  # rounding near the f32 maximum overshoots it
            continue
    return exact


@dataclass(frozen=True, slots=True)
class HeaderValue:
    """One header value: a spec variant name and its Python value.

    Tables are tuples of ``(key, HeaderValue)`` pairs (order and duplicate keys
    kept, as in the spec's array of pairs); arrays are tuples of values.
    """

    kind: str
    value: Any = None

    def __post_init__(self) -> None:
        _check(self.kind, self.value)

    # Constructors named after the variants keep call sites readable.
    @classmethod
    def long_string(cls, v: str) -> HeaderValue:
        return cls(LONG_STRING, v)

    @classmethod
    def short_string(cls, v: str) -> HeaderValue:
        return cls(SHORT_STRING, v)

    @classmethod
    def long(cls, v: int) -> HeaderValue:
        return cls(LONG, v)

    @classmethod
    def short(cls, v: int) -> HeaderValue:
        return cls(SHORT, v)

    @classmethod
    def bool_(cls, v: bool) -> HeaderValue:
        return cls(BOOL, v)

    @classmethod
    def bytes_(cls, v: bytes) -> HeaderValue:
        return cls(BYTES, bytes(v))

    @classmethod
    def timestamp(cls, v: int) -> HeaderValue:
        return cls(TIMESTAMP, v)

    @classmethod
    def float32(cls, v: float) -> HeaderValue:
        return cls(FLOAT, _shortest_f32(float(v)))

    @classmethod
    def double(cls, v: float) -> HeaderValue:
        return cls(DOUBLE, float(v))

    @classmethod
    def void(cls) -> HeaderValue:
        return cls(VOID, None)

    @classmethod
    def table(cls, pairs: Any) -> HeaderValue:
        return cls(TABLE, tuple((str(k), v) for k, v in pairs))

    @classmethod
    def array(cls, values: Any) -> HeaderValue:
        return cls(ARRAY, tuple(values))

    def to_json(self) -> Any:
        """The serde form: ``"Void"`` or a one-key object ``{variant: value}``."""
        kind, value = self.kind, self.value
        if kind == VOID:
            return VOID
        if kind == BYTES:
            return {BYTES: list(value)}
        if kind == TABLE:
            return {TABLE: [[k, v.to_json()] for k, v in value]}
        if kind == ARRAY:
            return {ARRAY: [v.to_json() for v in value]}
        if kind in (FLOAT, DOUBLE) and not math.isfinite(value):
            # serde_json writes non-finite floats as null; so do we (see docs/format.md).
            return {kind: None}
        return {kind: value}

    @classmethod
    def from_json(cls, data: Any, depth: int = 0) -> HeaderValue:
        """Parse the serde form; :class:`HeaderValueError` on anything else."""
        if depth > MAX_DEPTH:
            raise HeaderValueError(f"header values nested deeper than {MAX_DEPTH}")
        if data == VOID:
            return VOID_VALUE
        if not isinstance(data, dict) or len(data) != 1:
            raise HeaderValueError(f"expected a one-key object or \"Void\", got {_brief(data)}")
        ((kind, value),) = data.items()
        if kind == BYTES:
            value = _bytes_from_json(value)
        elif kind == TABLE:
            value = tuple(_pair_from_json(p, depth) for p in _list(value, kind))
        elif kind == ARRAY:
            value = tuple(cls.from_json(v, depth + 1) for v in _list(value, kind))
        elif kind in (FLOAT, DOUBLE) and value is None:
            value = math.nan
        elif kind == FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = _shortest_f32(float(value))
        elif kind == DOUBLE and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        _check(kind, value)
        return _trusted(kind, value)


def headers_to_json(
    headers: tuple[tuple[str, HeaderValue], ...], leave_out: frozenset[str] = frozenset()
) -> list[list[Any]]:
    """Serialise a header table as the spec's array of ``[key, value]`` pairs, without the keys in ``leave_out``."""
    return [[k, v.to_json()] for k, v in headers if k not in leave_out]


def headers_from_json(data: Any) -> tuple[tuple[str, HeaderValue], ...]:
    """Parse the spec's array of ``[key, value]`` pairs."""
    return tuple(_pair_from_json(p, 0) for p in _list(data, "headers"))


def _pair_from_json(pair: Any, depth: int) -> tuple[str, HeaderValue]:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str):
        raise HeaderValueError(f"expected a [key, value] pair, got {_brief(pair)}")
    return pair[0], HeaderValue.from_json(pair[1], depth + 1)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise HeaderValueError(f"{what}: expected an array, got {_brief(value)}")
    return value


def _bytes_from_json(value: Any) -> bytes:
    if not isinstance(value, list):
        raise HeaderValueError(f"Bytes: expected an array of bytes, got {_brief(value)}")
    try:
        return bytes(value)
    except (TypeError, ValueError):
        raise HeaderValueError("Bytes: array holds a value that is not a byte (0-255)") from None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _in(v: Any, bounds: tuple[int, int]) -> bool:
    return _is_int(v) and bounds[0] <= v <= bounds[1]


def _table_ok(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], HeaderValue) for p in value
    )


_CHECKS = {
    LONG_STRING: lambda v: isinstance(v, str),
    SHORT_STRING: lambda v: isinstance(v, str),
    LONG: lambda v: _in(v, _I64),
    SHORT: lambda v: _in(v, _I16),
    TIMESTAMP: lambda v: _in(v, _U64),
    BOOL: lambda v: isinstance(v, bool),
    BYTES: lambda v: isinstance(v, bytes),
    FLOAT: lambda v: isinstance(v, float),
    DOUBLE: lambda v: isinstance(v, float),
    VOID: lambda v: v is None,
    TABLE: _table_ok,
    ARRAY: lambda v: isinstance(v, tuple) and all(isinstance(x, HeaderValue) for x in v),
}


def _check(kind: str, value: Any) -> None:
    check = _CHECKS.get(kind)
    if check is None:
        raise HeaderValueError(f"unknown header variant {kind!r}")
    if not check(value):
        raise HeaderValueError(f"{kind}: invalid value {_brief(value)}")


def _trusted(kind: str, value: Any) -> HeaderValue:
    """Build a value already checked by the parser, skipping the constructor's second check (hot on read)."""
    hv = object.__new__(HeaderValue)
    object.__setattr__(hv, "kind", kind)
    object.__setattr__(hv, "value", value)
    return hv


#: The one ``Void`` value the reader returns for every ``"Void"``.
VOID_VALUE = HeaderValue(VOID, None)
