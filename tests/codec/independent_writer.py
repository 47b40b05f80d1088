"""A minimal RBAK writer written from ``docs/format.md`` alone: struct, zlib, hashlib, json, zstandard and lz4.

It shares no code with ``airflow_rbak``, and it makes the choices the format
allows another writer but ours never makes: names stored verbatim in keys
(only the vhost ``/`` becomes ``_default``), payloads of several compression
frames, with and without a declared content size, and records in any order
of ``backed_up_at``, the header stating its first and last record's stamps.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lz4.frame
import zstandard

EXTENSIONS = {0: "", 1: ".zst", 2: ".lz4"}
PROPERTIES = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to", "expiration",
              "message_id", "timestamp", "type_field", "user_id", "app_id", "cluster_id")


@dataclass
class SegmentSpec:
    """One segment to write: its records (JSON objects), its compression byte, and how many frames to cut it into."""

    records: list[dict[str, Any]]
    compression: int = 1
    frames: int = 1
    #: zstd and LZ4: whether each frame states its decompressed size.
    content_size: bool = True


@dataclass
class QueueSpec:
    vhost: str
    name: str
    queue_type: str = "classic"
    segments: list[SegmentSpec] = field(default_factory=list)


def record(body: bytes, backed_up_at: int, vhost: str, queue: str, tag: int, **properties: Any) -> dict[str, Any]:
    """A BackupRecord as the format's JSON object: every property present, ``body`` null when empty."""
    return {
        "body": list(body) or None,
        "properties": {name: properties.get(name) for name in PROPERTIES},
        "headers": properties.get("headers", []),
        "exchange": properties.get("exchange", ""),
        "routing_key": properties.get("routing_key", queue),
        "delivery_tag": tag,
        "redelivered": False,
        "backed_up_at": backed_up_at,
        "source_queue": queue,
        "source_vhost": vhost,
    }


def payload_of(records: list[dict[str, Any]]) -> bytes:
    """Each record as a u32 little-endian length and its compact JSON."""
    out = bytearray()
    for rec in records:
        text = json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()
        out += struct.pack("<I", len(text)) + text
    return bytes(out)


def compress(payload: bytes, compression: int, frames: int, content_size: bool) -> bytes:
    """The payload cut into ``frames`` pieces, each compressed as a frame of its own, concatenated."""
    if compression == 0:
        return payload
    step = -(-len(payload) // frames) or 1
    pieces = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
    if compression == 1:
        writer = zstandard.ZstdCompressor(level=3, write_content_size=content_size, write_checksum=True)
        return b"".join(writer.compress(piece) for piece in pieces)
    return b"".join(lz4.frame.compress(piece, store_size=content_size, content_checksum=True) for piece in pieces)


def segment(spec: SegmentSpec) -> tuple[bytes, int]:
    """The segment's bytes and its uncompressed payload size."""
    payload = payload_of(spec.records)
    first = spec.records[0]["backed_up_at"] if spec.records else 0
    last = spec.records[-1]["backed_up_at"] if spec.records else 0
    head = struct.pack("<4sBB2sQqq", b"RBAK", 1, spec.compression, b"\0\0", len(spec.records), first, last)
    body = head + compress(payload, spec.compression, spec.frames, spec.content_size)
    return body + struct.pack("<I", zlib.crc32(body)) + b"KABR", len(payload)


def write_backup(root: Path, backup_id: str, queues: list[QueueSpec], created_at: int) -> dict[str, Any]:
    """Write every segment and the manifest under ``root/backup_id``; return the manifest."""
    entries, total_bytes = [], 0
    for queue in queues:
        folder = f"{backup_id}/queues/{'_default' if queue.vhost == '/' else queue.vhost}/{queue.name}"
        metas = []
        for sequence, spec in enumerate(queue.segments, start=1):
            data, uncompressed = segment(spec)
            key = f"{folder}/segment-{sequence:04d}{EXTENSIONS[spec.compression]}"
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(data)
            stamps = [r["backed_up_at"] for r in spec.records]
            metas.append({
                "key": key, "sequence": sequence, "record_count": len(spec.records), "size_bytes": len(data),
                "uncompressed_bytes": uncompressed, "first_timestamp": stamps[0] if stamps else None,
                "last_timestamp": stamps[-1] if stamps else None, "checksum": hashlib.sha256(data).hexdigest(),
            })
            total_bytes += len(data)
        stamped = [m for m in metas if m["record_count"]]
        entries.append({
            "vhost": queue.vhost, "name": queue.name, "queue_type": queue.queue_type, "segments": metas,
            "message_count": sum(m["record_count"] for m in metas),
            "first_message_timestamp": stamped[0]["first_timestamp"] if stamped else None,
            "last_message_timestamp": stamped[-1]["last_timestamp"] if stamped else None,
        })
    manifest = {
        "backup_id": backup_id, "created_at": created_at, "completed_at": created_at + 1000, "source_cluster": "rabbit@elsewhere",
        "rabbitmq_version": "3.13.2", "backup_tool_version": "independent-writer", "definitions": None, "queues": entries,
        "total_messages": sum(e["message_count"] for e in entries), "total_bytes": total_bytes,
        "total_segments": sum(len(e["segments"]) for e in entries),
    }
    (root / backup_id / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
    return manifest
