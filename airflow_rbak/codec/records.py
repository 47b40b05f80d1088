"""BackupRecord and BackupProperties, and their JSON form as the reference tool writes it.

Writing follows serde's output exactly: compact JSON, fields in the spec's
order, ``body`` as an array of byte values or ``null`` when empty. Reading
accepts the fields in any order, and refuses a record that names a key twice
in any of its objects: the C reader and orjson would keep different ones, so
what was verified might not be what is published.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import orjson

from airflow_rbak.codec.bounded_json import RepeatedKeyError, loads_unique
from airflow_rbak.codec.headers import VOID_VALUE, HeaderValue, HeaderValueError, headers_from_json, headers_to_json
from airflow_rbak.codec.properties import OCTET, PROPERTIES, PROPERTY_NAMES, SHORT_STRING, TIMESTAMP
from airflow_rbak.exceptions import RbakError

try:  # the optional C accelerator (setup.py); without it the Python path below gives the same results
    from airflow_rbak.codec import _speedups
except ImportError:  # pragma: no cover - exercised where no compiler was available
    _speedups = None
if getattr(_speedups, "API_VERSION", None) != 8:  # pragma: no cover - built from older sources: `pip install -e .`
    _speedups = None
#: The accelerator's body-array writer and reader (None without it): ``format_byte_array(body)`` is the JSON array,
#: ``parse_byte_array(data, offset)`` the bytes of the array at ``offset`` and the offset after it.
format_byte_array: Callable[[bytes | memoryview], bytes] | None = getattr(_speedups, "format_byte_array", None)
parse_byte_array: Callable[[bytes | memoryview, int], tuple[bytes, int]] | None = getattr(_speedups, "parse_byte_array", None)

_PROPERTY_TYPES = tuple(str if p.kind == SHORT_STRING else int for p in PROPERTIES)
_U8_PROPERTIES = tuple(p.json_name for p in PROPERTIES if p.kind == OCTET)
_I64_PROPERTIES = tuple(p.json_name for p in PROPERTIES if p.kind == TIMESTAMP)
_U64_MAX = 2**64 - 1
_I64 = (-(2**63), 2**63 - 1)


class RecordError(RbakError, ValueError):
    """A record's JSON is not a valid BackupRecord; the codec wraps it with the segment's name."""


@dataclass(frozen=True, slots=True)
class BackupProperties:
    """The AMQP basic properties of a message (headers are kept on the record)."""

    content_type: str | None = None
    content_encoding: str | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type_field: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The properties object, every field present, in the spec's order."""
        return dict(zip(PROPERTY_NAMES, _PROPERTY_VALUES(self)))

    @classmethod
    def from_values(cls, values: Iterable[Any]) -> BackupProperties:
        """Properties from their values in the table's order (``PROPERTIES``), unchecked, as the constructor takes
        them: for values that are of each property's type already (a delivery's, decoded by pika)."""
        return _build(cls, _PROPERTY_SETTERS, values)

    @classmethod
    def from_json(cls, data: Any) -> BackupProperties:
        """Parse a properties object; absent fields are ``None``, unknown ones ignored."""
        if not isinstance(data, dict):
            raise RecordError(f"properties: expected an object, got {type(data).__name__}")
        values = [data.get(name) for name in PROPERTY_NAMES]
        for name, value, expected in zip(PROPERTY_NAMES, values, _PROPERTY_TYPES):
            if value is not None and type(value) is not expected:
                raise RecordError(f"properties.{name}: invalid value {value!r:.40}")
        for name in _U8_PROPERTIES:
            value = data.get(name)
            if value is not None and not 0 <= value <= 255:
                raise RecordError(f"properties.{name}: invalid value {value!r:.40}")
        for name in _I64_PROPERTIES:
            value = data.get(name)
            if value is not None and not _I64[0] <= value <= _I64[1]:
                raise RecordError(f"properties.{name}: invalid value {value!r:.40}")
        return _build(cls, _PROPERTY_SETTERS, values)


_PROPERTY_VALUES = operator.attrgetter(*PROPERTY_NAMES)
if tuple(f.name for f in fields(BackupProperties)) != PROPERTY_NAMES:  # pragma: no cover - caught by any test run
    raise ImportError("BackupProperties' fields differ from codec.properties.PROPERTIES")
_NO_PROPERTIES = BackupProperties()


@dataclass(frozen=True, slots=True)
class BackupRecord:
    """One captured message, as stored in a segment."""

    body: bytes
    properties: BackupProperties = _NO_PROPERTIES
    headers: tuple[tuple[str, HeaderValue], ...] = ()
    exchange: str = ""
    routing_key: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    backed_up_at: int = 0
    source_queue: str = ""
    source_vhost: str = "/"

    def to_json(self) -> dict[str, Any]:
        """The record object in the spec's field order."""
        return record_object(
            self.body, self.properties.to_json(), headers_to_json(self.headers), self.exchange, self.routing_key,
            self.delivery_tag, self.redelivered, self.backed_up_at, self.source_queue, self.source_vhost,
        )


def record_object(
    body: bytes | memoryview, properties: dict[str, Any], headers: list[list[Any]], exchange: str, routing_key: str,
    delivery_tag: int, redelivered: bool, backed_up_at: int, source_queue: str, source_vhost: str,
) -> dict[str, Any]:
    """A record's JSON object from its parts already in JSON form; for :func:`encode_record_object`.

    The capture builds records this way straight from each delivery, without a BackupRecord in between.
    """
    return {
        "body": _body_json(body) if body else None,
        "properties": properties,
        "headers": headers,
        "exchange": exchange,
        "routing_key": routing_key,
        "delivery_tag": delivery_tag,
        "redelivered": redelivered,
        "backed_up_at": backed_up_at,
        "source_queue": source_queue,
        "source_vhost": source_vhost,
    }


T = TypeVar("T")
#: A slot descriptor's ``__set__``: (instance, value).
_Setter = Callable[[Any, Any], None]


def _setters(cls: type) -> tuple[_Setter, ...]:
    return tuple(cls.__dict__[f.name].__set__ for f in fields(cls))


_PROPERTY_SETTERS = _setters(BackupProperties)
_RECORD_SETTERS = _setters(BackupRecord)


def _build(cls: type[T], setters: tuple[_Setter, ...], values: Iterable[Any]) -> T:
    """Fill a frozen, slotted instance through its slot descriptors.

    The generated ``__init__`` of a frozen dataclass goes through
    ``object.__setattr__`` once per field, which dominated decoding; the
    values here were checked by the parser already.
    """
    obj = object.__new__(cls)
    for setter, value in zip(setters, values):
        setter(obj, value)
    return obj


def _body_json(body: bytes | memoryview) -> Any:
    """The body array for orjson: written by the C accelerator, or by orjson from a uint8 view (no Python int per
    byte); the bytes are the same."""
    if format_byte_array is not None:
        return orjson.Fragment(format_byte_array(body))
    import numpy  # only without the accelerator: every command would otherwise pay numpy's import

    return numpy.frombuffer(body, numpy.uint8)


def encode_record(record: BackupRecord) -> bytes:
    """Serialise one record as compact JSON (no length prefix)."""
    if accelerated_encode is not None:
        raw = accelerated_encode(record)
        if raw is not None:
            return raw
    return encode_record_object(record.to_json())


def encode_record_object(obj: dict[str, Any]) -> bytes:
    """Serialise a record object (:meth:`BackupRecord.to_json`, :func:`record_object`) as compact JSON."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise RecordError(f"record cannot be written as JSON: {exc}") from None


def decode_record(data: bytes | memoryview) -> BackupRecord:
    """Parse one record's JSON; :class:`RecordError` says what is wrong."""
    if accelerated_decode is not None:
        record = accelerated_decode(data)
        if record is not None:
            return record
    if parse_byte_array is not None:
        record = _decode_with_body_reader(data)
        if record is not None:
            return record
    try:
        obj = loads_unique(data)
    except RepeatedKeyError as exc:  # readers keeping the first and the last of two would see two records
        raise RecordError(f"record is damaged: {exc}") from None
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"record is not valid JSON: {exc}") from None
    return record_from_json(obj)


_BODY_FIRST = b'{"body":['
_BODY_START = len(_BODY_FIRST)


def _decode_with_body_reader(data: bytes | memoryview) -> BackupRecord | None:
    """The usual record, body first: its byte array read in C, the rest by orjson; None: use the generic path.

    The generic path then reads whatever this does not take (another key order, whitespace after the array, a
    repeated ``body`` or other key, malformed JSON), so results and errors are the generic path's.
    """
    read_array = parse_byte_array
    if read_array is None or data[:_BODY_START] != _BODY_FIRST:
        return None
    try:
        body, end = read_array(data, _BODY_START)
        if data[end : end + 1] != b",":
            return None
        obj = loads_unique(b"{" + bytes(data[end + 1 :]))
    except ValueError:  # orjson.JSONDecodeError and RepeatedKeyError are ValueErrors: the generic path names them
        return None
    if not isinstance(obj, dict) or not obj or "body" in obj:
        return None
    obj["body"] = None
    record = record_from_json(obj)
    _RECORD_SETTERS[0](record, body)
    return record


def record_from_json(obj: Any) -> BackupRecord:
    """Build a record from its parsed JSON object, checking every field's type."""
    if not isinstance(obj, dict):
        raise RecordError(f"record: expected an object, got {type(obj).__name__}")
    try:
        body = obj["body"]
        if body is None:
            body_bytes = b""
        elif isinstance(body, list):
            body_bytes = bytes(body)
        else:
            raise RecordError("body: expected an array of bytes or null")
        values = (
            body_bytes,
            BackupProperties.from_json(obj["properties"]),
            headers_from_json(obj["headers"]),
            _str(obj, "exchange"),
            _str(obj, "routing_key"),
            _uint(obj, "delivery_tag"),
            _bool(obj, "redelivered"),
            _i64(obj, "backed_up_at"),
            _str(obj, "source_queue"),
            _str(obj, "source_vhost"),
        )
        record = _build(BackupRecord, _RECORD_SETTERS, values)
    except KeyError as exc:
        raise RecordError(f"record: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, RecordError):
            raise
        if isinstance(exc, HeaderValueError):
            raise RecordError(f"headers: {exc}") from None
        raise RecordError(f"body: {exc}") from None
    return record


def _str(obj: dict[str, Any], name: str) -> str:
    value = obj[name]
    if not isinstance(value, str):
        raise RecordError(f"{name}: expected a string")
    return value


def _uint(obj: dict[str, Any], name: str) -> int:
    value = obj[name]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _U64_MAX:
        raise RecordError(f"{name}: expected an unsigned 64-bit integer")
    return value


def _i64(obj: dict[str, Any], name: str) -> int:
    value = obj[name]
    if not isinstance(value, int) or isinstance(value, bool) or not _I64[0] <= value <= _I64[1]:
        raise RecordError(f"{name}: expected a signed 64-bit integer")
    return value


def _bool(obj: dict[str, Any], name: str) -> bool:
    value = obj[name]
    if not isinstance(value, bool):
        raise RecordError(f"{name}: expected true or false")
    return value


def _header_value_json(value: HeaderValue) -> bytes:
    return orjson.dumps(value.to_json())


def _header_value_from_json(data: Any) -> HeaderValue:
    return HeaderValue.from_json(data, 1)  # depth 1: a value directly in the header table


# The C reader and writer handle the common shapes and answer None for anything else; they
# call back here for the header variants they leave to Python (floats, bytes, tables, arrays).
#: A record's JSON, or None: use the Python path.
accelerated_encode: Callable[[BackupRecord], bytes | None] | None = None
#: A record from its JSON, or None: use the Python path.
accelerated_decode: Callable[[bytes | memoryview], BackupRecord | None] | None = None
#: Frames a record into the writer's buffer at an offset; the new size, or -1: use the Python path.
accelerated_append: Callable[[bytearray, int, BackupRecord], int] | None = None
#: Decodes up to ``limit`` framed records from an offset: (records, the offset after them).
accelerated_read: Callable[[bytes | memoryview, int, int], tuple[list[BackupRecord], int]] | None = None
#: Checks up to ``limit`` framed records from an offset without keeping them, as ``accelerated_read`` reads them:
#: (the offset after them, count, records from another vhost/queue, first, last, lowest and highest ``backed_up_at``).
accelerated_scan: Callable[[bytes | bytearray | memoryview, int, int, str, str], tuple[int, ...]] | None = None
#: Decodes up to ``limit`` framed records from an offset, building only those a filter may select (see
#: ``record_stream.Prefilter``): ((index in the run, record) pairs, the offset after them, records read).
accelerated_select: Callable[..., tuple[list[tuple[int, BackupRecord]], int, int]] | None = None
#: A staged record's JSON and ``backed_up_at`` (``staged_records.read_staged``), or None: use the Python path.
accelerated_staged: Callable[[bytes | memoryview, str, str], tuple[bytes, int] | None] | None = None
#: Gives ``accelerated_staged`` the reader of a header table it calls (``staged_records`` does, on import).
configure_staged: Callable[[Callable[[bytes, int, int], tuple[bytes, int]]], None] | None = None
if _speedups is not None:
    _speedups.configure(
        BackupRecord, BackupProperties, tuple((p.json_name, p.kind) for p in PROPERTIES), HeaderValue, VOID_VALUE,
        _header_value_from_json, _header_value_json, orjson.loads,
    )
    accelerated_encode, accelerated_decode = _speedups.encode_record, _speedups.decode_record
    accelerated_append, accelerated_read = _speedups.append_record, _speedups.read_records
    accelerated_scan, accelerated_select = _speedups.scan_records, _speedups.select_records
    accelerated_staged, configure_staged = _speedups.staged_json, _speedups.configure_staged
