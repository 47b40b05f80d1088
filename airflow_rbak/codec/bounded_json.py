"""Bounded parsing of a JSON document read from a location: a byte cap and a value cap, both checked before parsing.

Why a value cap: parsed, a JSON value costs far more than its text. An empty
object is 2 bytes of JSON and about 64 bytes in memory, so 16 MiB of ``{},``
parses to about 470 MiB although it passes any byte cap a real definitions
export needs. The values are counted without parsing and without allocating
(``bytes.count`` of ``,``, ``[`` and ``{``, an upper bound: every value but
the outermost is the first of its container or follows a comma; a comma or
bracket inside a string only makes the bound looser), so a dense document is
refused at the cost of reading its bytes once.

Why unique keys: two readers of one document must see the same thing. orjson
(like Python's ``json``) keeps the last of two equal keys, a hand-written
reader may keep the first, so a document with a repeated key can be verified
as one thing and acted on as another. :func:`loads_unique` refuses it.

The caps of each kind of object this provider writes are :class:`JsonLimits`
constants next to the reader that uses them (:data:`DEFINITIONS_LIMITS` here,
the manifest's in ``manifest.py``); docs/reliability.md says how they were chosen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from airflow_rbak.codec.errors import CodecError
from airflow_rbak.exceptions import RbakError

_MiB = 1024**2


@dataclass(frozen=True)
class JsonLimits:
    """The most bytes and values one kind of document may hold; ``what`` names the kind in errors."""

    max_bytes: int
    max_values: int
    what: str = "a JSON document"

    def __post_init__(self) -> None:
        if self.max_bytes < 2 or self.max_values < 1:
            raise ValueError(f"JsonLimits for {self.what}: caps must be positive")


#: A definitions export (``GET /api/definitions``, decompressed). 100,000 queues with four arguments each, as many
#: exchanges and 200,000 bindings measure 70 MiB and 3.5 million values; a broker with more is not one RabbitMQ
#: serves well. Parsed at the value cap, a document takes at most about 300 MiB.
DEFINITIONS_LIMITS = JsonLimits(max_bytes=128 * _MiB, max_values=4_000_000, what="a definitions export")


class JsonLimitError(CodecError):
    """A JSON document is over its byte or value cap: refused before it was parsed."""


class JsonContentError(CodecError):
    """A JSON document is not valid JSON, or repeats a key in one of its objects."""


class RepeatedKeyError(RbakError, ValueError):
    """An object of a JSON document names a key twice, or nests too deep to be checked (:func:`loads_unique`)."""


def value_bound(data: bytes | bytearray | memoryview) -> int:
    """An upper bound of the values in ``data`` (objects, arrays and scalars), counted without parsing."""
    raw = data if isinstance(data, (bytes, bytearray)) else bytes(data)
    return raw.count(b",") + raw.count(b"[") + raw.count(b"{") + 1


def check_json_bytes(data: bytes | bytearray | memoryview, name: str, limits: JsonLimits) -> None:
    """Refuse ``data`` over ``limits``, before anything parses it; :class:`JsonLimitError` names ``name``."""
    check_json_size(len(data), name, limits)
    values = value_bound(data)
    if values > limits.max_values:
        raise JsonLimitError(f"holds up to {values} JSON values, over the {limits.max_values} {limits.what} may hold",
                             segment=name)


def check_json_size(size: int, name: str, limits: JsonLimits) -> None:
    """Refuse a document of ``size`` bytes over the byte cap (a size a stat or listing gave, before reading)."""
    if size > limits.max_bytes:
        raise JsonLimitError(f"{size} bytes, over the {limits.max_bytes} bytes {limits.what} may hold", segment=name)


def loads_bounded(data: bytes | bytearray | memoryview, name: str, limits: JsonLimits, *, unique_keys: bool = False) -> Any:
    """Parse ``data`` after checking it against ``limits``; with ``unique_keys``, refuse a repeated key too.

    Raises :class:`JsonLimitError` (over a cap, nothing parsed) or :class:`JsonContentError` (not JSON, or a
    repeated key), both naming ``name``.
    """
    check_json_bytes(data, name, limits)
    try:
        return loads_unique(data) if unique_keys else orjson.loads(data)
    except RepeatedKeyError as exc:
        raise JsonContentError(str(exc), segment=name) from None
    except orjson.JSONDecodeError as exc:
        raise JsonContentError(f"not valid JSON: {exc}", segment=name) from None


def loads_unique(data: bytes | bytearray | memoryview | str) -> Any:
    """orjson's reading of ``data``, refused with :class:`RepeatedKeyError` if any object repeats a key.

    orjson parses (its values and its refusals are the ones every reader here uses) but keeps no trace of a
    repeated key, so the keys are counted: each key of the text is followed by one ``:``, and other colons can
    only be inside strings, so when the parsed objects hold as many keys as the text has colons, none was
    repeated. Otherwise (a colon in a string, or a repeat) Python's ``json`` walks the text again to see each
    object's keys: about four times orjson's cost, paid by documents and records whose strings hold colons.
    """
    value = orjson.loads(data)
    if isinstance(value, (dict, list)):
        text = data.encode() if isinstance(data, str) else data if isinstance(data, (bytes, bytearray)) else bytes(data)
        colons = text.count(b":")
        if colons < 2:  # one key at most: none can repeat
            return value
        try:
            if _keys_in(value) == colons:
                return value
            json.loads(text, object_pairs_hook=_keys_once, parse_float=_skip, parse_int=_skip, parse_constant=_skip)
        except RecursionError:
            raise RepeatedKeyError("nested too deep for its keys to be checked") from None
    return value


def _keys_in(value: dict[str, Any] | list[Any]) -> int:
    """The keys of every object in ``value``, not counting inside arrays that start with a number (a record's body):
    counting fewer can only send a document to the full check, never let a repeat pass."""
    if isinstance(value, dict):
        return len(value) + sum(_keys_in(v) for v in value.values() if isinstance(v, (dict, list)))
    if not value or isinstance(value[0], (int, float)):
        return 0
    return sum(_keys_in(v) for v in value if isinstance(v, (dict, list)))


def _keys_once(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) > 1:
        keys = {key for key, _ in pairs}
        if len(keys) != len(pairs):
            seen: set[str] = set()
            repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
            raise RepeatedKeyError(f"an object names the key {repeated[:100]!r} more than once")


def _skip(_text: str) -> None:
    return None
