"""Storage keys of a backup (docs/format.md), and the reversible encoding of names in them.

Vhost ``/`` is stored as ``_default``. A vhost or queue name that cannot be
a path segment as it is (``/``, ``.``/``..``, ``%``, ``\\``, control
characters, or a vhost literally named ``_default``) is percent-encoded, so
every name maps to exactly one segment and no key can leave ``{backup_id}/``.

A name whose encoding is longer than :data:`MAX_NAME_SEGMENT_BYTES` (a
255-byte queue name full of ``/`` encodes to 765 bytes; file systems allow
255 per path segment, S3 1024 per key) is shortened to the start of its
encoding, ``%~`` and 32 hex digits of its SHA-256. Encoding never produces
``%~`` otherwise (every ``%`` is escaped), so shortened segments cannot
collide with plain ones; they are not reversible, and readers take such a
queue's names from its records (:func:`is_shortened`).
"""

from __future__ import annotations

import hashlib
import re

from airflow_rbak.codec.constants import Compression
from airflow_rbak.exceptions import ConfigurationError

DEFAULT_VHOST_DIR = "_default"
MANIFEST_NAME = "manifest.json"
LOCK_NAME = "lock.json"
#: Longest path segment a vhost or queue name becomes as it is; longer ones are shortened with a hash.
MAX_NAME_SEGMENT_BYTES = 200
CHECKPOINT_NAME = "progress.json"
SHORTENED_MARK = "%~"
_DIGEST_HEX = 32

_UNSAFE = re.compile(r"[%/\\\x00-\x1f\x7f]")
_SEGMENT_RE = re.compile(r"^segment-(\d{4,})(\.zst|\.lz4)?$")
_BACKUP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$")


def encode_name(name: str) -> str:
    """Encode a queue or vhost name as one path segment: reversibly, or shortened when too long."""
    if name in ("", ".", ".."):
        return "".join(f"%{b:02X}" for b in name.encode()) or "%"
    encoded = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), name)
    if len(encoded.encode("utf-8", "surrogatepass")) <= MAX_NAME_SEGMENT_BYTES:
        return encoded
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]
    return f"{_cut(encoded, MAX_NAME_SEGMENT_BYTES - len(SHORTENED_MARK) - _DIGEST_HEX)}{SHORTENED_MARK}{digest}"


def _cut(encoded: str, limit: int) -> str:
    """The longest start of ``encoded`` within ``limit`` UTF-8 bytes, never ending inside a character or an escape."""
    head = encoded.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", errors="ignore")
    return re.sub(r"%[0-9A-F]?$", "", head)


def is_shortened(segment: str) -> bool:
    """True for a path segment :func:`encode_name` shortened (its name is only in the records and manifest)."""
    return SHORTENED_MARK in segment


def decode_name(segment: str) -> str:
    """Invert :func:`encode_name` (a shortened segment comes back as it is stored)."""
    if is_shortened(segment):
        return segment
    if segment == "%":
        return ""
    if "%" not in segment:
        return segment
    out = bytearray()
    i = 0
    raw = segment.encode()
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw) and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", errors="surrogateescape")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789ABCDEFabcdef" for c in pair)


def vhost_dir(vhost: str) -> str:
    """The path segment of a vhost: ``_default`` for ``/``."""
    if vhost == "/":
        return DEFAULT_VHOST_DIR
    if vhost == DEFAULT_VHOST_DIR:
        return "%5Fdefault"
    return encode_name(vhost)


def vhost_from_dir(segment: str) -> str:
    """Invert :func:`vhost_dir` (a shortened segment comes back as it is stored)."""
    return "/" if segment == DEFAULT_VHOST_DIR else decode_name(segment)


def check_backup_id(backup_id: str) -> str:
    """Return ``backup_id`` if it is usable as a key prefix, else raise ConfigurationError."""
    if not isinstance(backup_id, str) or not _BACKUP_ID_RE.match(backup_id) or ".." in backup_id:
        raise ConfigurationError(
            f"invalid backup_id {backup_id!r}: use 1-200 characters from letters, digits and . _ : + -, "
            "starting with a letter or digit"
        )
    return backup_id


def manifest_key(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{MANIFEST_NAME}"


def queue_prefix(backup_id: str, vhost: str, queue: str) -> str:
    """The folder of one queue's segments, ending in ``/``."""
    return f"{check_backup_id(backup_id)}/queues/{vhost_dir(vhost)}/{encode_name(queue)}/"


def verbatim_queue_prefix(backup_id: str, vhost: str, queue: str) -> str:
    """The folder the format's own layout gives a queue: names as they are (a ``/`` in one is a deeper folder),
    only ``/`` as ``_default``. Other writers use it; ours escapes names (:func:`queue_prefix`)."""
    return f"{check_backup_id(backup_id)}/queues/{DEFAULT_VHOST_DIR if vhost == '/' else vhost}/{queue}/"


def segment_file(key: str) -> tuple[int, Compression] | None:
    """The sequence and compression a key's last part names (``segment-NNNN[.zst|.lz4]``), or None."""
    match = _SEGMENT_RE.match(key.rsplit("/", 1)[-1])
    return (int(match.group(1)), compression_from_key(key)) if match else None


def segment_key(backup_id: str, vhost: str, queue: str, sequence: int, compression: Compression) -> str:
    """``{backup_id}/queues/{vhost}/{queue}/segment-NNNN.ext`` (four digits, more past 9999)."""
    if sequence < 1:
        raise ConfigurationError(f"segment sequence numbers start at 1, got {sequence}")
    return f"{queue_prefix(backup_id, vhost, queue)}segment-{sequence:04d}{compression.extension}"


def interim_segment_key(key: str) -> str:
    """A segment key with one more leading zero in its number: the same sequence, another object.

    Compaction writes its outputs there first, so a manifest saved mid-compaction may name them.
    """
    head, _, name = key.rpartition("/segment-")
    return f"{head}/segment-0{name}"


def staging_prefix(backup_id: str, vhost: str, queue: str) -> str:
    """The folder where capture stages one queue's records for the encode job, ending in ``/``."""
    return f"{check_backup_id(backup_id)}/staging/{vhost_dir(vhost)}/{encode_name(queue)}/"


def definitions_key(backup_id: str, compression: Compression) -> str:
    return f"{check_backup_id(backup_id)}/definitions/definitions.json{compression.extension}"


def rollback_definitions_key(backup_id: str, timestamp: str, compression: Compression) -> str:
    return f"{check_backup_id(backup_id)}/definitions/rollback-before-import-{timestamp}{compression.extension}"


def transformed_definitions_key(backup_id: str, timestamp: str) -> str:
    """Where a restore that transforms definitions stores what it would import (plain JSON, importable by hand)."""
    return f"{check_backup_id(backup_id)}/definitions/transformed-{timestamp}.json"


def is_backup_content(key: str) -> bool:
    """Whether ``key`` is part of what a backup *is* (its manifest, segments, definitions export), as opposed to the
    state runs keep beside it (locks, checkpoints, staging, reports, restore snapshots).

    Content is written once and never changed, so it is what S3 Object Lock locks (docs/operations.md#immutable-backups);
    state must stay writable and deletable, or a lock could never be released and a checkpoint never advance.
    """
    backup_id, _, rest = key.partition("/")
    if not rest or not _BACKUP_ID_RE.match(backup_id):
        return False
    return rest == MANIFEST_NAME or rest.startswith("queues/") or rest.startswith("definitions/definitions.json")


def lock_key(backup_id: str) -> str:
    """Where the lock of a running backup lives (``repository.lock``)."""
    return f"{check_backup_id(backup_id)}/{LOCK_NAME}"


#: The location-wide lock under which retention decides and deletes, and runs pick and link stream chains.
#: At the location's root and starting with ``_``: no backup id can start so, and the catalog reads a backup
#: id only from keys with a ``/``, so it never shows as a backup.
CHAIN_LOCK_KEY = "_chains.lock.json"


#: Location-wide state that belongs to no backup. ``_`` starts no backup id, and the catalog skips keys under it.
LOCATION_STATE_PREFIX = "_state/"


def is_location_state(key: str) -> bool:
    """Whether ``key`` is location-wide state (:data:`LOCATION_STATE_PREFIX`), not part of any backup."""
    return key.startswith(LOCATION_STATE_PREFIX)


def preflight_probe_key(token: str) -> str:
    """The object ``rbak doctor`` writes, reads back and deletes to prove a location writable: location state, which
    no backup lists (:data:`LOCATION_STATE_PREFIX`)."""
    return f"{LOCATION_STATE_PREFIX}preflight/probe-{token}"


def delivery_limit_stop_key(vhost: str, queue: str) -> str:
    """Where a capture that stopped at a quorum queue's delivery limit records it, for every later backup of the
    location (:mod:`airflow_rbak.capture.limit_stops`)."""
    return f"{LOCATION_STATE_PREFIX}delivery-limit-stops/{vhost_dir(vhost)}/{encode_name(queue)}.json"


def state_key(backup_id: str) -> str:
    """The SQLite summary of a backup's capture checkpoints that ``finish`` writes for foreign readers (docs/format.md)."""
    return f"{check_backup_id(backup_id)}/state/offsets.db"


def checkpoint_dir_key(backup_id: str, vhost_part: str, queue_part: str) -> str:
    """The capture checkpoint of the queue staged under ``staging/{vhost_part}/{queue_part}/``: one object per queue,
    in a folder named as the queue (a suffix on the name itself would pass the path segment limit)."""
    return f"{check_backup_id(backup_id)}/state/queues/{vhost_part}/{queue_part}/{CHECKPOINT_NAME}"


def checkpoint_key(backup_id: str, vhost: str, queue: str) -> str:
    """Where one queue's capture checkpoint lives, so that no two capture tasks ever write the same object."""
    return checkpoint_dir_key(backup_id, vhost_dir(vhost), encode_name(queue))


def restore_state_prefix(backup_id: str) -> str:
    """Where restores of this backup keep their checkpoints when they share the backup's storage."""
    return f"{check_backup_id(backup_id)}/state/restore/"


def reports_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/reports/"


def compression_from_key(key: str) -> Compression:
    """The compression a stored object's extension names (``.zst``, ``.lz4``, or none)."""
    if key.endswith(".zst"):
        return Compression.ZSTD
    if key.endswith(".lz4"):
        return Compression.LZ4
    return Compression.NONE


def parse_segment_key(key: str) -> tuple[str, str, str, int, Compression] | None:
    """Split a segment key into (backup_id, vhost, queue, sequence, compression), or None.

    A shortened vhost or queue segment comes back as it is stored (see :func:`is_shortened`).
    """
    parts = key.split("/")
    found = segment_file(key)
    if len(parts) != 5 or parts[1] != "queues" or found is None:
        return None
    return parts[0], vhost_from_dir(parts[2]), decode_name(parts[3]), *found
