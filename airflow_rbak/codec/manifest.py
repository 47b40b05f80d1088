"""The manifest models of the RBAK v1 format (docs/format.md), written in the schema's field order.

Fields this tool adds beyond the schema (stream consumer offsets, a rebuilt
manifest's notes) live in ``extensions`` and are written after the schema's
fields; unknown fields read from a manifest are kept there too, so a manifest
written by a newer tool survives a round trip through this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict, overload

import orjson

from airflow_rbak.codec.bounded_json import value_bound
from airflow_rbak.codec.errors import ManifestError

QUEUE_TYPES = ("classic", "quorum", "stream")
#: The largest manifest readers accept and the writer produces (64 MiB, about 190,000 segments). A manifest is
#: read whole and parsed into objects several times its size, so an unbounded one is a way to exhaust memory.
MAX_MANIFEST_BYTES = 64 * 1024**2
#: The most values (array elements and object members) a manifest may hold, about 110,000 segment entries. Parsed,
#: a value costs up to about 70 bytes more than its text (an empty object is 2 bytes of JSON, 64 in memory), so
#: this, not the byte cap, is what bounds the memory a dense manifest of nothing but ``{}`` would take.
MAX_MANIFEST_VALUES = 1_000_000
#: The manifest extension naming the vhosts a backup was asked for (absent: every vhost).
SELECTED_VHOSTS = "selected_vhosts"
#: More selected vhosts than this is not a selection any backup made (RabbitMQ itself is not built for so many).
MAX_SELECTED_VHOSTS = 100_000
#: The schema's integers: counts and sizes are u64, times i64; a number outside is none any writer can mean.
_U64 = (0, 2**64 - 1)
_I64 = (-(2**63), 2**63 - 1)


@overload
def _int(obj: dict[str, Any], name: str, path: str, *, nullable: Literal[False] = False, unsigned: bool = True) -> int: ...
@overload
def _int(obj: dict[str, Any], name: str, path: str, *, nullable: bool, unsigned: bool = True) -> int | None: ...
def _int(obj: dict[str, Any], name: str, path: str, *, nullable: bool = False, unsigned: bool = True) -> int | None:
    if name not in obj:
        if nullable:
            return None
        raise ManifestError(f"{path}.{name} is missing", segment="manifest.json")
    value = obj[name]
    if value is None and nullable:
        return None
    low, high = _U64 if unsigned else _I64
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        kind = "an unsigned 64-bit integer" if unsigned else "a signed 64-bit integer"
        raise ManifestError(f"{path}.{name} must be {kind}, got {value!r:.40}", segment="manifest.json")
    return value


@overload
def _str(obj: dict[str, Any], name: str, path: str, *, nullable: Literal[False] = False) -> str: ...
@overload
def _str(obj: dict[str, Any], name: str, path: str, *, nullable: bool) -> str | None: ...
def _str(obj: dict[str, Any], name: str, path: str, *, nullable: bool = False) -> str | None:
    value = obj.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise ManifestError(f"{path}.{name} must be a string, got {value!r:.40}", segment="manifest.json")
    return value


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{path} must be an object", segment="manifest.json")
    return value


def _extensions(obj: dict[str, Any], cls: type) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in obj.items() if k not in known}


def _with_extensions(body: dict[str, Any], extensions: dict[str, Any]) -> dict[str, Any]:
    for key, value in extensions.items():
        body.setdefault(key, value)
    return body


@dataclass
class SegmentMetadata:
    """One segment as the manifest lists it; ``checksum`` is the SHA-256 hex of the whole file."""

    key: str
    sequence: int
    record_count: int
    size_bytes: int
    uncompressed_bytes: int
    first_timestamp: int | None
    last_timestamp: int | None
    checksum: str
    extensions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = {
            "key": self.key,
            "sequence": self.sequence,
            "record_count": self.record_count,
            "size_bytes": self.size_bytes,
            "uncompressed_bytes": self.uncompressed_bytes,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "checksum": self.checksum,
        }
        return _with_extensions(body, self.extensions)

    @classmethod
    def from_json(cls, obj: Any, path: str = "segment") -> SegmentMetadata:
        obj = _object(obj, path)
        checksum = _str(obj, "checksum", path)
        if len(checksum) != 64 or any(c not in "0123456789abcdefABCDEF" for c in checksum):
            raise ManifestError(f"{path}.checksum must be 64 hex digits", segment="manifest.json")
        return cls(
            key=_str(obj, "key", path),
            sequence=_int(obj, "sequence", path),
            record_count=_int(obj, "record_count", path),
            size_bytes=_int(obj, "size_bytes", path),
            uncompressed_bytes=_int(obj, "uncompressed_bytes", path),
            first_timestamp=_int(obj, "first_timestamp", path, nullable=True, unsigned=False),
            last_timestamp=_int(obj, "last_timestamp", path, nullable=True, unsigned=False),
            checksum=checksum.lower(),
            extensions=_extensions(obj, cls),
        )


@dataclass
class QueueBackup:
    """One queue's part of a backup: its segments in sequence order and their totals."""

    vhost: str
    name: str
    queue_type: str
    segments: list[SegmentMetadata] = field(default_factory=list)
    message_count: int = 0
    first_message_timestamp: int | None = None
    last_message_timestamp: int | None = None
    extensions: dict[str, Any] = field(default_factory=dict)

    def stored_order(self) -> list[SegmentMetadata]:
        """The segments in the order their records were stored, by sequence, however a manifest lists them: the
        order every reader follows, so a record's position in its queue is the same to each of them."""
        return sorted(self.segments, key=lambda s: s.sequence)

    def refresh_totals(self) -> None:
        """Derive the message count and timestamps from the segments."""
        self.segments = self.stored_order()
        self.message_count = sum(s.record_count for s in self.segments)
        stamped = [s for s in self.segments if s.record_count]
        self.first_message_timestamp = stamped[0].first_timestamp if stamped else None
        self.last_message_timestamp = stamped[-1].last_timestamp if stamped else None

    def to_json(self) -> dict[str, Any]:
        body = {
            "vhost": self.vhost,
            "name": self.name,
            "queue_type": self.queue_type,
            "segments": [s.to_json() for s in self.segments],
            "message_count": self.message_count,
            "first_message_timestamp": self.first_message_timestamp,
            "last_message_timestamp": self.last_message_timestamp,
        }
        return _with_extensions(body, self.extensions)

    @classmethod
    def from_json(cls, obj: Any, path: str = "queue") -> QueueBackup:
        obj = _object(obj, path)
        segments = obj.get("segments")
        if not isinstance(segments, list):
            raise ManifestError(f"{path}.segments must be an array", segment="manifest.json")
        return cls(
            vhost=_str(obj, "vhost", path),
            name=_str(obj, "name", path),
            queue_type=_str(obj, "queue_type", path),
            segments=[SegmentMetadata.from_json(s, f"{path}.segments[{i}]") for i, s in enumerate(segments)],
            message_count=_int(obj, "message_count", path),
            first_message_timestamp=_int(obj, "first_message_timestamp", path, nullable=True, unsigned=False),
            last_message_timestamp=_int(obj, "last_message_timestamp", path, nullable=True, unsigned=False),
            extensions=_extensions(obj, cls),
        )


class DefinitionCounts(TypedDict):
    """The manifest's count fields of a definitions export: how many of each section it holds."""

    vhost_count: int
    queue_count: int
    exchange_count: int
    user_count: int


def count_definitions(doc: Any) -> DefinitionCounts:
    """How many vhosts, queues, exchanges and users a definitions document holds, by count field.

    The one summary of an export: the backup and the rebuild write it to the manifest, validate checks it.
    A section that is absent or null counts 0, and so does every section of a document that is not an object.
    """
    sections = doc if isinstance(doc, dict) else {}

    def count(section: str) -> int:
        return len(sections.get(section) or [])

    return DefinitionCounts(vhost_count=count("vhosts"), queue_count=count("queues"), exchange_count=count("exchanges"),
                            user_count=count("users"))


@dataclass
class DefinitionsBackup:
    """Where the definitions export is stored and what it holds; ``size_bytes`` is uncompressed."""

    key: str
    vhost_count: int
    queue_count: int
    exchange_count: int
    user_count: int
    size_bytes: int
    extensions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = {
            "key": self.key,
            "vhost_count": self.vhost_count,
            "queue_count": self.queue_count,
            "exchange_count": self.exchange_count,
            "user_count": self.user_count,
            "size_bytes": self.size_bytes,
        }
        return _with_extensions(body, self.extensions)

    @classmethod
    def from_json(cls, obj: Any, path: str = "definitions") -> DefinitionsBackup:
        obj = _object(obj, path)
        counts = {n: _int(obj, n, path) for n in (*DefinitionCounts.__annotations__, "size_bytes")}
        return cls(key=_str(obj, "key", path), **counts, extensions=_extensions(obj, cls))

    @classmethod
    def of(cls, key: str, doc: Any, size_bytes: int) -> DefinitionsBackup:
        """The entry of a definitions document stored at ``key`` (``size_bytes`` uncompressed), with its counts."""
        return cls(key=key, **count_definitions(doc), size_bytes=size_bytes)


@dataclass
class BackupManifest:
    """The manifest of one backup; ``completed_at`` stays ``None`` until the backup has finished."""

    backup_id: str
    created_at: int
    backup_tool_version: str
    completed_at: int | None = None
    source_cluster: str | None = None
    rabbitmq_version: str | None = None
    definitions: DefinitionsBackup | None = None
    queues: list[QueueBackup] = field(default_factory=list)
    total_messages: int = 0
    total_bytes: int = 0
    total_segments: int = 0
    extensions: dict[str, Any] = field(default_factory=dict)

    def refresh_totals(self) -> None:
        """Derive every total from the queues' segments."""
        for queue in self.queues:
            queue.refresh_totals()
        self.total_messages = sum(q.message_count for q in self.queues)
        self.total_bytes = sum(s.size_bytes for q in self.queues for s in q.segments)
        self.total_segments = sum(len(q.segments) for q in self.queues)

    def queue(self, vhost: str, name: str) -> QueueBackup | None:
        return next((q for q in self.queues if q.vhost == vhost and q.name == name), None)

    def selected_vhosts(self) -> tuple[str, ...] | None:
        """The vhosts the backup was asked for, or None for every vhost. Read from a location, so untrusted: a value
        that is not a list of names (or an absurdly long one) counts as saying nothing."""
        value = self.extensions.get(SELECTED_VHOSTS)
        if not isinstance(value, list) or not 0 < len(value) <= MAX_SELECTED_VHOSTS \
                or not all(isinstance(v, str) and v for v in value):
            return None
        return tuple(value)

    def to_json(self) -> dict[str, Any]:
        body = {
            "backup_id": self.backup_id,
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "source_cluster": self.source_cluster,
            "rabbitmq_version": self.rabbitmq_version,
            "backup_tool_version": self.backup_tool_version,
            "definitions": self.definitions.to_json() if self.definitions else None,
            "queues": [q.to_json() for q in self.queues],
            "total_messages": self.total_messages,
            "total_bytes": self.total_bytes,
            "total_segments": self.total_segments,
        }
        return _with_extensions(body, self.extensions)

    def to_bytes(self) -> bytes:
        """Pretty JSON, as the reference tool writes its manifest."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def from_json(cls, obj: Any) -> BackupManifest:
        obj = _object(obj, "manifest")
        queues = obj.get("queues")
        if not isinstance(queues, list):
            raise ManifestError("manifest.queues must be an array", segment="manifest.json")
        definitions = obj.get("definitions")
        return cls(
            backup_id=_str(obj, "backup_id", "manifest"),
            created_at=_int(obj, "created_at", "manifest", unsigned=False),
            completed_at=_int(obj, "completed_at", "manifest", nullable=True, unsigned=False),
            source_cluster=_str(obj, "source_cluster", "manifest", nullable=True),
            rabbitmq_version=_str(obj, "rabbitmq_version", "manifest", nullable=True),
            backup_tool_version=_str(obj, "backup_tool_version", "manifest"),
            definitions=DefinitionsBackup.from_json(definitions) if definitions is not None else None,
            queues=[QueueBackup.from_json(q, f"manifest.queues[{i}]") for i, q in enumerate(queues)],
            total_messages=_int(obj, "total_messages", "manifest"),
            total_bytes=_int(obj, "total_bytes", "manifest"),
            total_segments=_int(obj, "total_segments", "manifest"),
            extensions=_extensions(obj, cls),
        )

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "manifest.json") -> BackupManifest:
        """Parse a manifest file; :class:`ManifestError` names what is wrong (also when it is over the cap)."""
        check_manifest_bytes(data, name)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"not valid JSON: {exc}", segment=name) from None
        try:
            return cls.from_json(obj)
        except ManifestError as exc:
            raise ManifestError(exc.reason, segment=name) from None


def check_manifest_size(size: int, name: str = "manifest.json") -> None:
    """Refuse a manifest over :data:`MAX_MANIFEST_BYTES` before it is read or written."""
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{size} bytes, over the {MAX_MANIFEST_BYTES // 1024**2} MiB a manifest may hold",
                            segment=name)


def check_manifest_bytes(data: bytes, name: str = "manifest.json") -> None:
    """Refuse a manifest over :data:`MAX_MANIFEST_BYTES` or :data:`MAX_MANIFEST_VALUES`, before parsing or writing it."""
    check_manifest_size(len(data), name)
    values = value_bound(data)  # an upper bound, counted without parsing
    if values > MAX_MANIFEST_VALUES:
        raise ManifestError(f"holds up to {values} values, over the {MAX_MANIFEST_VALUES} a manifest may hold",
                            segment=name)
