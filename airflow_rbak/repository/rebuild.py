"""Rebuilds a lost or damaged manifest from the self-describing segments.

Like kafka-backup's index, the manifest must never be the only record of what
a backup holds: segment keys give vhost, queue and sequence, headers give
counts and timestamps, records give ``source_vhost``/``source_queue``, and the
definitions export (when present) gives queue types and the broker version.
What only the original run knew is estimated and marked as such in the
manifest's ``rebuilt`` field.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak import __version__
from airflow_rbak.codec import BackupManifest, CodecError, DefinitionsBackup, QueueBackup, SegmentMetadata
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS, loads_bounded
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.layout import (
    check_backup_id,
    manifest_key,
    parse_segment_key,
    queue_prefix,
    segment_file,
    verbatim_queue_prefix,
)
from airflow_rbak.codec.segment import decode_payload, iter_payload_records
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.ownership import is_interim_copy
from airflow_rbak.repository.writer import now_ms
from airflow_rbak.storage.base import Storage, StorageError
from airflow_rbak.storage.json_objects import read_json_text

REBUILT_KEY_SUFFIX = "manifest.rebuilt.json"


class NothingToRebuildError(RbakError):
    """The backup folder holds no segment and no definitions export: there is nothing to rebuild from."""


@dataclass
class RebuildResult:
    """The rebuilt manifest, where it was written, and what could not be recovered."""

    manifest: BackupManifest
    key: str
    unrecovered: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "backup_id": self.manifest.backup_id,
            "written_to": self.key,
            "queues": len(self.manifest.queues),
            "segments": self.manifest.total_segments,
            "messages": self.manifest.total_messages,
            "unrecovered": self.unrecovered,
        }


def rebuild_manifest(
    storage: Storage, backup_id: str, *, replace: bool = False, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> RebuildResult:
    """Rebuild ``manifest.json`` from the segments.

    Writes ``manifest.json`` when there is none. When one exists it is kept and
    the result goes to ``manifest.rebuilt.json`` beside it, unless ``replace``
    is set (then the old one is kept as ``manifest.json.replaced-<ms>``).
    """
    check_backup_id(backup_id)
    unrecovered: list[str] = []
    definitions, types, version = _read_definitions(storage, backup_id, unrecovered, max_decompressed_bytes)
    queues = _read_queues(storage, backup_id, types, unrecovered, max_decompressed_bytes)
    if not queues and definitions is None:  # a typo must not leave an empty "complete" backup behind
        unreadable = f"; not recovered: {'; '.join(unrecovered[:3])[:600]}" if unrecovered else ""
        raise NothingToRebuildError(f"{storage.url}: backup {backup_id!r} holds no readable segment and no definitions "
                                    f"export to rebuild a manifest from; nothing was written (is the backup id "
                                    f"right?){unreadable}")
    manifest = _assemble(backup_id, queues, definitions, version, unrecovered)
    key = _target_key(storage, backup_id, replace)
    ManifestStore(storage).save(manifest, key)
    return RebuildResult(manifest, key, unrecovered)


def _target_key(storage: Storage, backup_id: str, replace: bool) -> str:
    key = manifest_key(backup_id)
    if not storage.exists(key):
        return key
    if not replace:
        return f"{backup_id}/{REBUILT_KEY_SUFFIX}"
    storage.put(f"{key}.replaced-{now_ms()}", storage.get(key))
    return key


def _read_queues(
    storage: Storage, backup_id: str, types: dict[tuple[str, str], str], unrecovered: list[str], cap: int
) -> list[QueueBackup]:
    grouped: dict[tuple[str, str], list[SegmentMetadata]] = defaultdict(list)
    for key, parsed in _segment_keys(storage, backup_id, unrecovered):
        found = _segment_metadata(storage, key, parsed, unrecovered, cap)
        if found is not None:
            grouped[found[0]].append(found[1])
    queues = []
    for (vhost, name), segments in sorted(grouped.items()):
        queue = QueueBackup(vhost=vhost, name=name, queue_type=types.get((vhost, name), "classic"), segments=segments)
        queue.refresh_totals()
        sequences = [s.sequence for s in queue.segments]
        if sequences != list(range(1, len(sequences) + 1)):
            unrecovered.append(f"queue {vhost!r}/{name!r}: segment sequences {sequences[:10]} have gaps")
        if (vhost, name) not in types:
            queue.extensions["queue_type_unknown"] = True
        queues.append(queue)
    return queues


def _segment_keys(storage: Storage, backup_id: str, unrecovered: list[str]) -> list[tuple[str, tuple]]:
    """The segment keys to read: one per queue folder and sequence.

    A compaction's interim copy (``segment-0NNNN``) holds the same sequence as
    the canonical segment it becomes; read both and each message counts
    twice. The canonical key wins; an interim copy is read only where its
    canonical segment is absent (a compaction stopped between its rounds).
    """
    chosen: dict[tuple[str, int], tuple[str, tuple]] = {}
    for info in storage.list(f"{backup_id}/queues/"):
        parsed = parse_segment_key(info.key) or _deeper_segment_key(backup_id, info.key)
        if parsed is None:
            unrecovered.append(f"{info.key}: not a segment key; left out")
            continue
        slot = (info.key.rsplit("/", 1)[0], parsed[3])
        held = chosen.get(slot)
        if held is None or (is_interim_copy(held[0]) and not is_interim_copy(info.key)):
            if held is not None:
                unrecovered.append(f"{held[0]}: interim compaction copy of {info.key}; left out")
            chosen[slot] = (info.key, parsed)
        else:
            what = "interim compaction copy" if is_interim_copy(info.key) else "another object with the sequence"
            unrecovered.append(f"{info.key}: {what} of {held[0]}; left out")
    return [chosen[slot] for slot in sorted(chosen)]


def _deeper_segment_key(backup_id: str, key: str) -> tuple | None:
    """A segment in a deeper folder: the format's layout stores names as they are, so a ``/`` in a vhost or queue
    name adds folders. Only the records can tell which names; until they are read, both are unknown (None)."""
    found = segment_file(key)
    if found is None or len(key.split("/")) < 6:
        return None
    return (backup_id, None, None, *found)


def _segment_metadata(
    storage: Storage, key: str, parsed: tuple, unrecovered: list[str], cap: int
) -> tuple[tuple[str, str], SegmentMetadata] | None:
    """The segment's queue and entry; its records must all belong to the folder its key names."""
    backup_id, vhost, name, sequence, _ = parsed
    try:
        data = storage.get(key)
        header, payload = decode_payload(data, key, cap)
        records = list(iter_payload_records(payload, header.record_count, key))
    except (CodecError, StorageError) as exc:
        unrecovered.append(f"{key}: {exc.reason if isinstance(exc, CodecError) else exc}; segment left out")
        return None
    if records:  # the records name the queue exactly, even where its key holds a shortened or verbatim name
        vhost, name = records[0].source_vhost, records[0].source_queue
    elif vhost is None:
        unrecovered.append(f"{key}: an empty segment in a folder whose names only its records could give; left out")
        return None
    folder = key.rsplit("/", 1)[0] + "/"
    # Our folders escape names; the format's own layout (other writers) keeps them as they are. Either way, every
    # record must name the queue whose folder holds it.
    strangers = sum(1 for r in records if folder not in (queue_prefix(backup_id, r.source_vhost, r.source_queue),
                                                          verbatim_queue_prefix(backup_id, r.source_vhost, r.source_queue)))
    if strangers:
        unrecovered.append(f"{key}: {strangers} records name another queue than its key; segment left out")
        return None
    return (vhost, name), SegmentMetadata(
        key=key,
        sequence=sequence,
        record_count=header.record_count,
        size_bytes=len(data),
        uncompressed_bytes=len(payload),
        first_timestamp=header.first_timestamp if header.record_count else None,
        last_timestamp=header.last_timestamp if header.record_count else None,
        checksum=hashlib.sha256(data).hexdigest(),
    )


def _read_definitions(
    storage: Storage, backup_id: str, unrecovered: list[str], cap: int
) -> tuple[DefinitionsBackup | None, dict[tuple[str, str], str], str | None]:
    keys = [i.key for i in storage.list(f"{backup_id}/definitions/definitions.json")]
    if not keys:
        unrecovered.append("definitions: no export found; queue types default to classic")
        return None, {}, None
    key = keys[0]
    try:
        text = read_json_text(storage, key, DEFINITIONS_LIMITS)
        parsed = loads_bounded(text, key, DEFINITIONS_LIMITS)
        queues = parsed.get("queues") or []
    except (CodecError, StorageError, AttributeError) as exc:
        unrecovered.append(f"{key}: cannot be read ({exc}); queue types default to classic")
        return None, {}, None
    types = {(q.get("vhost", "/"), q.get("name", "")): (q.get("arguments") or {}).get("x-queue-type", "classic") for q in queues}
    definitions = DefinitionsBackup.of(key, parsed, len(text))
    return definitions, types, parsed.get("rabbitmq_version") or parsed.get("rabbit_version")


def _assemble(
    backup_id: str, queues: list[QueueBackup], definitions: DefinitionsBackup | None, version: str | None, unrecovered: list[str]
) -> BackupManifest:
    firsts = [q.first_message_timestamp for q in queues if q.first_message_timestamp is not None]
    lasts = [q.last_message_timestamp for q in queues if q.last_message_timestamp is not None]
    rebuilt_at = now_ms()
    manifest = BackupManifest(
        backup_id=backup_id,
        created_at=min(firsts) if firsts else rebuilt_at,
        completed_at=max(lasts) if lasts else rebuilt_at,
        backup_tool_version=__version__,
        rabbitmq_version=version,
        definitions=definitions,
        queues=queues,
    )
    manifest.refresh_totals()
    manifest.extensions["rebuilt"] = {
        "rebuilt_at": rebuilt_at,
        "unknown_fields": ["created_at", "completed_at", "source_cluster", "backup_tool_version"]
        + ([] if version else ["rabbitmq_version"]),
        "note": "created_at/completed_at are estimated from the first and last record's backed_up_at",
        "unrecovered": list(unrecovered),
    }
    return manifest
