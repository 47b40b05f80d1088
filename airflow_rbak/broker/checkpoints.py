"""Capture checkpoints in SQLite (``state/offsets.db``), synced to the backup's storage.

Per (backup_id, vhost, queue): the target count, the last staged chunk and
how many records it ends at, a fingerprint of the last staged message,
completion, and for streams the offsets. A chunk is stored before its
checkpoint is committed, so a re-run rewrites at most the chunk whose commit
was lost (same name, same records) and never skips or duplicates a record.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

from airflow_rbak.codec.layout import state_key
from airflow_rbak.storage.base import ObjectNotFoundError, Storage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_progress (
    backup_id TEXT NOT NULL, vhost TEXT NOT NULL, queue TEXT NOT NULL,
    queue_type TEXT NOT NULL, target_count INTEGER NOT NULL,
    staged_records INTEGER NOT NULL DEFAULT 0, staged_bytes INTEGER NOT NULL DEFAULT 0,
    last_chunk INTEGER NOT NULL DEFAULT 0, last_fingerprint TEXT,
    completed INTEGER NOT NULL DEFAULT 0,
    stream_start_offset INTEGER, stream_end_offset INTEGER, stream_next_offset INTEGER,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (backup_id, vhost, queue));
CREATE TABLE IF NOT EXISTS stream_consumer_offsets (
    backup_id TEXT NOT NULL, vhost TEXT NOT NULL, stream TEXT NOT NULL,
    reference TEXT NOT NULL, stored_offset INTEGER NOT NULL,
    PRIMARY KEY (backup_id, vhost, stream, reference));
"""


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


class CheckpointStore:
    """The SQLite checkpoint database of one backup, kept locally and mirrored to storage."""

    def __init__(self, path: str | Path, storage: Storage | None = None, backup_id: str | None = None) -> None:
        self.path = Path(path)
        self.storage = storage
        self.backup_id = backup_id
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if storage is not None and backup_id is not None and not self.path.exists():
            self._download()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)

    def _download(self) -> None:
        assert self.storage is not None and self.backup_id is not None
        try:
            self.path.write_bytes(self.storage.get(state_key(self.backup_id)))
        except ObjectNotFoundError:
            pass

    def sync(self) -> None:
        """Upload the database to ``{backup_id}/state/offsets.db`` (no-op without storage)."""
        if self.storage is None or self.backup_id is None:
            return
        with self._lock:
            data = self._db.serialize()
        self.storage.put(state_key(self.backup_id), data)

    def close(self) -> None:
        self._db.close()

    def get(self, backup_id: str, vhost: str, queue: str) -> QueueProgress | None:
        row = self._db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM queue_progress WHERE backup_id=? AND vhost=? AND queue=?",
            (backup_id, vhost, queue),
        ).fetchone()
        if row is None:
            return None
        values = dict(zip(_COLUMNS, row))
        values["completed"] = bool(values["completed"])
        return QueueProgress(**values)

    def save(self, progress: QueueProgress, *, sync: bool = True) -> None:
        """Insert or replace one queue's checkpoint, then mirror the database."""
        values = [getattr(progress, c) for c in _COLUMNS]
        values[_COLUMNS.index("completed")] = int(progress.completed)
        placeholders = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO queue_progress ({', '.join(_COLUMNS)}, updated_at) VALUES ({placeholders}, ?)",
                (*values, int(time.time() * 1000)),
            )
        if sync:
            self.sync()

    def all(self, backup_id: str) -> list[QueueProgress]:
        rows = self._db.execute("SELECT vhost, queue FROM queue_progress WHERE backup_id=? ORDER BY vhost, queue", (backup_id,))
        return [p for v, q in rows.fetchall() if (p := self.get(backup_id, v, q)) is not None]

    def save_consumer_offsets(self, backup_id: str, vhost: str, stream: str, offsets: dict[str, int]) -> None:
        with self._lock:
            self._db.execute("DELETE FROM stream_consumer_offsets WHERE backup_id=? AND vhost=? AND stream=?", (backup_id, vhost, stream))
            self._db.executemany(
                "INSERT INTO stream_consumer_offsets VALUES (?, ?, ?, ?, ?)",
                [(backup_id, vhost, stream, ref, off) for ref, off in sorted(offsets.items())],
            )

    def consumer_offsets(self, backup_id: str, vhost: str, stream: str) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT reference, stored_offset FROM stream_consumer_offsets WHERE backup_id=? AND vhost=? AND stream=?",
            (backup_id, vhost, stream),
        )
        return dict(rows.fetchall())
