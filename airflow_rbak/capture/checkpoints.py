"""Capture checkpoints: one small JSON object per queue in the backup's storage.

``{backup_id}/state/queues/{vhost}/{queue}/progress.json`` holds the queue's target
count, the last staged chunk and how many records it ends at, a fingerprint
of the last staged message, completion, for streams the offsets and the
named consumers' offsets. Each capture task writes only its own queue's
object, and every write replaces it whole (storage writes are atomic), so
captures running at once on several workers never overwrite each other's
progress, and a task re-run on any worker resumes where the last one
stopped: nothing of it lives on a worker's disk (issue 16: a SQLite file per
backup, uploaded whole by every task, lost progress to the last writer).

A chunk is stored before its checkpoint, so a re-run rewrites at most the
chunks whose checkpoint was lost (same names, same records). Staged chunks
past ``last_chunk`` belong to no checkpoint; :func:`accounted_chunk_keys` is
what encode takes, so they are never encoded.

``finish`` summarises every checkpoint into ``state/offsets.db`` (the SQLite
layout the RBAK format gives it, docs/format.md) for foreign readers; nothing here reads that file.

Checkpoints are sealed (:mod:`airflow_rbak.storage.sealed`, bound to their key): a capture resumes only from one
that opens under the deployment's seal, and starts its queue again otherwise (a planted ``completed`` never ends a
capture). Encode and the summary read them as evidence, unverified: they only say which staged chunks of the same
location to take, and hold no key on a Spark cluster.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from airflow_rbak.codec.layout import (
    CHECKPOINT_NAME,
    checkpoint_dir_key,
    checkpoint_key,
    encode_name,
    staging_prefix,
    state_key,
    vhost_dir,
)
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal, UntrustedStateError, default_seal, read_state, unverified_body

log = package_logger(__name__)
#: The seal purpose of a capture checkpoint.
CAPTURE_PROGRESS = "capture-progress"

_CHUNK_RE = re.compile(r"/chunk-(\d{8})(?:\.[a-z0-9]+)?$")


class CheckpointFormatError(RbakError):
    """A stored capture checkpoint cannot be read; its key says which queue's."""


@dataclass(frozen=True)
class QueueProgress:
    """The checkpoint of one queue within one backup."""

    backup_id: str
    vhost: str
    queue: str
    queue_type: str
    target_count: int
    staged_records: int = 0
    staged_bytes: int = 0
    last_chunk: int = 0
    last_fingerprint: str | None = None
    completed: bool = False
    stream_start_offset: int | None = None
    stream_end_offset: int | None = None
    stream_next_offset: int | None = None


_COLUMNS = [f.name for f in fields(QueueProgress)]


class CaptureCheckpoints:
    """The capture checkpoints of a backup, in its storage (one object per queue).

    ``save(..., sync=False)`` keeps a checkpoint in this process only: a queue's first checkpoint (its
    target) needs no store, as there is nothing to resume before its first chunk. Stored checkpoints are sealed with
    ``seal`` (default :func:`~airflow_rbak.storage.sealed.default_seal`); one that fails the seal reads as absent.
    """

    def __init__(self, storage: Storage, backup_id: str, seal: StateSeal | None = None) -> None:
        self.storage, self.backup_id = storage, backup_id
        self.seal = seal or default_seal()
        self._lock = threading.Lock()
        self._local: dict[tuple[str, str, str], QueueProgress] = {}
        self._consumers: dict[tuple[str, str, str], dict[str, int]] = {}

    def close(self) -> None:
        """Nothing to release: every stored write was complete when its call returned."""

    def get(self, backup_id: str, vhost: str, queue: str) -> QueueProgress | None:
        """This process's latest checkpoint of the queue, else the stored one, else None."""
        with self._lock:
            if (backup_id, vhost, queue) in self._local:
                return self._local[(backup_id, vhost, queue)]
        return _progress(self._trusted(checkpoint_key(backup_id, vhost, queue)), checkpoint_key(backup_id, vhost, queue))

    def save(self, progress: QueueProgress, *, sync: bool = True) -> None:
        """Replace one queue's checkpoint; stored (atomically, whole) unless ``sync`` is False."""
        with self._lock:
            self._local[(progress.backup_id, progress.vhost, progress.queue)] = progress
            if sync:
                self._put(progress)

    def all(self, backup_id: str) -> list[QueueProgress]:
        """Every stored checkpoint of the backup, by vhost and queue."""
        found = [_progress(self._trusted(info.key), info.key) for info in self.storage.list(f"{backup_id}/state/queues/")
                 if info.key.endswith(f"/{CHECKPOINT_NAME}")]
        return sorted((p for p in found if p is not None), key=lambda p: (p.vhost, p.queue))

    def save_consumer_offsets(self, backup_id: str, vhost: str, stream: str, offsets: dict[str, int]) -> None:
        """Keep a stream's named consumers' offsets with its checkpoint (stored with the next save)."""
        with self._lock:
            self._consumers[(backup_id, vhost, stream)] = dict(sorted(offsets.items()))
            current = self._local.get((backup_id, vhost, stream))
            if current is not None:
                self._put(current)

    def consumer_offsets(self, backup_id: str, vhost: str, stream: str) -> dict[str, int]:
        with self._lock:
            if (backup_id, vhost, stream) in self._consumers:
                return dict(self._consumers[(backup_id, vhost, stream)])
        return self._trusted(checkpoint_key(backup_id, vhost, stream)).get("consumer_offsets", {})

    def _trusted(self, key: str) -> dict:
        """The checkpoint document at ``key`` if it opens under the seal; else {} (absent, or untrusted: warned)."""
        try:
            return _read(self.storage, key, self.seal)
        except UntrustedStateError as exc:
            log.warning("%s; its queue is captured again from the start", exc)
            return {}

    def _put(self, progress: QueueProgress) -> None:
        document = {**asdict(progress), "updated_at": int(time.time() * 1000)}
        consumers = self._consumers.get((progress.backup_id, progress.vhost, progress.queue))
        if consumers is not None:
            document["consumer_offsets"] = consumers
        key = checkpoint_key(progress.backup_id, progress.vhost, progress.queue)
        self.seal.write(self.storage, CAPTURE_PROGRESS, key, document)


def _read(storage: Storage, key: str, seal: StateSeal | None = None) -> dict:
    """The checkpoint document at ``key`` ({} when absent): opened under ``seal``, or without one read as evidence."""
    if seal is not None:
        document = seal.read(storage, CAPTURE_PROGRESS, key)
    else:
        try:
            data = read_state(storage, key)
            document = None if data is None else unverified_body(key, data)
        except UntrustedStateError as exc:
            raise CheckpointFormatError(f"{key}: not a capture checkpoint ({exc})") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise CheckpointFormatError(f"{key}: not a capture checkpoint (a JSON object is expected)")
    return document


def _progress(document: dict, key: str) -> QueueProgress | None:
    if not document:
        return None
    try:
        return QueueProgress(**{c: document[c] for c in _COLUMNS if c in document})
    except TypeError as exc:
        raise CheckpointFormatError(f"{key}: not a capture checkpoint ({exc})") from None


def read_progress(storage: Storage, key: str) -> QueueProgress | None:
    """The checkpoint stored at ``key`` as evidence (its seal unchecked), or None when there is none: for encode,
    which takes from it only which staged chunks of the same location count. A capture resumes only through
    :meth:`CaptureCheckpoints.get`, which checks the seal."""
    return _progress(_read(storage, key), key)


def chunk_sequence(key: str) -> int | None:
    """The sequence number of a staged chunk key, or None for any other key."""
    match = _CHUNK_RE.search(key)
    return int(match.group(1)) if match else None


def accounted_chunk_keys(storage: Storage, backup_id: str, vhost_part: str, queue_part: str, keys: list[str]) -> list[str]:
    """The staged chunks of one staging folder that its queue's checkpoint accounts for, in capture order.

    A re-run that lost a checkpoint write restages from the last stored checkpoint; chunks past it are an
    earlier attempt's (or a killed task's) and would duplicate records, so encode never takes them.
    """
    progress = read_progress(storage, checkpoint_dir_key(backup_id, vhost_part, queue_part))
    last = progress.last_chunk if progress is not None else 0
    numbered = sorted((n, k) for k in keys if (n := chunk_sequence(k)) is not None)
    return [k for n, k in numbered if n <= last]


def queue_chunk_keys(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[str]:
    """One queue's staged chunks that its checkpoint accounts for (what encode seals), in capture order."""
    keys = [info.key for info in storage.list(staging_prefix(backup_id, vhost, queue))]
    return accounted_chunk_keys(storage, backup_id, vhost_dir(vhost), encode_name(queue), keys)


_SUMMARY_SCHEMA = """
CREATE TABLE queue_progress (
    backup_id TEXT NOT NULL, vhost TEXT NOT NULL, queue TEXT NOT NULL,
    queue_type TEXT NOT NULL, target_count INTEGER NOT NULL,
    staged_records INTEGER NOT NULL DEFAULT 0, staged_bytes INTEGER NOT NULL DEFAULT 0,
    last_chunk INTEGER NOT NULL DEFAULT 0, last_fingerprint TEXT,
    completed INTEGER NOT NULL DEFAULT 0,
    stream_start_offset INTEGER, stream_end_offset INTEGER, stream_next_offset INTEGER,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (backup_id, vhost, queue));
CREATE TABLE stream_consumer_offsets (
    backup_id TEXT NOT NULL, vhost TEXT NOT NULL, stream TEXT NOT NULL,
    reference TEXT NOT NULL, stored_offset INTEGER NOT NULL,
    PRIMARY KEY (backup_id, vhost, stream, reference));
"""


def write_offsets_summary(storage: Storage, backup_id: str) -> str:
    """Write every queue's final checkpoint as ``state/offsets.db`` (the RBAK format's SQLite layout); return its key.

    Only ``finish`` writes it, once, after every capture: a foreign reader sees each queue's last chunk,
    counts and stream offsets. Resuming never reads it. The checkpoints are read as evidence (as encode reads them).
    """
    keys = [i.key for i in storage.list(f"{backup_id}/state/queues/") if i.key.endswith(f"/{CHECKPOINT_NAME}")]
    documents = [(d, p) for d in (_read(storage, k) for k in keys) if (p := _progress(d, "")) is not None]
    now = int(time.time() * 1000)
    with tempfile.TemporaryDirectory(prefix="rbak-offsets-") as folder:
        path = Path(folder) / "offsets.db"
        db = sqlite3.connect(path)
        try:
            db.executescript(_SUMMARY_SCHEMA)
            for document, p in sorted(documents, key=lambda e: (e[1].vhost, e[1].queue)):
                values = [int(v) if isinstance(v, bool) else v for v in (getattr(p, c) for c in _COLUMNS)]
                db.execute(f"INSERT INTO queue_progress VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})", (*values, now))
                db.executemany("INSERT INTO stream_consumer_offsets VALUES (?, ?, ?, ?, ?)",
                               [(backup_id, p.vhost, p.queue, ref, off)
                                for ref, off in (document.get("consumer_offsets") or {}).items()])
            db.commit()
        finally:
            db.close()
        storage.put(state_key(backup_id), path.read_bytes())
    return state_key(backup_id)
