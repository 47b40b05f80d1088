"""Restore checkpoints in a local SQLite file (``checkpoint_state``): where each queue's restore stands.

One row per (backup, source queue, target queue): ``next_ordinal`` is the
queue position after the last confirmed record, ``published`` how many
records were confirmed, and ``depth_base`` the depth the target held when
exactly those records were in it. The publisher keeps more messages in
flight than it has committed, so after a crash the target may hold some of
them; a re-run reads the depth, skips exactly that many records and so
publishes neither a duplicate nor a gap (see ``publisher``). Unroutable
records are kept here too, so the report lists them across re-runs.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path

from airflow_rbak.exceptions import ConfigurationError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS restore_progress (
    backup_id TEXT NOT NULL, source_vhost TEXT NOT NULL, source_queue TEXT NOT NULL,
    target_vhost TEXT NOT NULL, target_queue TEXT NOT NULL, window TEXT NOT NULL,
    next_ordinal INTEGER NOT NULL DEFAULT 0, published INTEGER NOT NULL DEFAULT 0,
    depth_base INTEGER, completed INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL,
    PRIMARY KEY (backup_id, source_vhost, source_queue, target_vhost, target_queue));
CREATE TABLE IF NOT EXISTS restore_unroutable (
    backup_id TEXT NOT NULL, source_vhost TEXT NOT NULL, source_queue TEXT NOT NULL,
    ordinal INTEGER NOT NULL, segment_key TEXT NOT NULL, record_index INTEGER NOT NULL,
    exchange TEXT NOT NULL, routing_key TEXT NOT NULL, reply TEXT NOT NULL,
    PRIMARY KEY (backup_id, source_vhost, source_queue, ordinal));
CREATE TABLE IF NOT EXISTS restore_stream_offsets (
    backup_id TEXT NOT NULL, source_vhost TEXT NOT NULL, source_queue TEXT NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL,
    PRIMARY KEY (backup_id, source_vhost, source_queue, source_offset));
"""


@dataclass(frozen=True)
class QueueCheckpoint:
    """The restore progress of one source queue into one target queue."""

    backup_id: str
    source_vhost: str
    source_queue: str
    target_vhost: str
    target_queue: str
    window: str
    next_ordinal: int = 0
    published: int = 0
    depth_base: int | None = None
    completed: bool = False


@dataclass(frozen=True)
class Unroutable:
    """A record the broker returned as unroutable: where it is in the backup and where it was sent."""

    ordinal: int
    segment_key: str
    record_index: int
    exchange: str
    routing_key: str
    reply: str


class RestoreCheckpoints:
    """The checkpoint database; every write is its own committed transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RestoreCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load(self, blank: QueueCheckpoint) -> QueueCheckpoint:
        """The stored checkpoint for ``blank``'s key, or ``blank``; refuses a different window."""
        row = self._db.execute(
            "SELECT window, next_ordinal, published, depth_base, completed FROM restore_progress WHERE backup_id=? AND "
            "source_vhost=? AND source_queue=? AND target_vhost=? AND target_queue=?", _key(blank)).fetchone()
        if row is None:
            return blank
        if row[0] != blank.window:
            raise ConfigurationError(
                f"{self.path} holds a restore of {blank.source_vhost}/{blank.source_queue} with window {row[0]}, "
                f"not {blank.window}; use another checkpoint_state, or the same window to resume")
        return replace(blank, next_ordinal=row[1], published=row[2], depth_base=row[3], completed=bool(row[4]))

    def save(self, cp: QueueCheckpoint) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO restore_progress VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (*_key(cp)[:3], cp.target_vhost, cp.target_queue, cp.window, cp.next_ordinal, cp.published, cp.depth_base,
             int(cp.completed), int(time.time() * 1000)))

    def add_unroutable(self, cp: QueueCheckpoint, item: Unroutable) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO restore_unroutable VALUES (?,?,?,?,?,?,?,?,?)",
            (cp.backup_id, cp.source_vhost, cp.source_queue, item.ordinal, item.segment_key, item.record_index,
             item.exchange, item.routing_key, item.reply))

    def unroutable(self, backup_id: str, source_vhost: str, source_queue: str) -> list[Unroutable]:
        rows = self._db.execute(
            "SELECT ordinal, segment_key, record_index, exchange, routing_key, reply FROM restore_unroutable "
            "WHERE backup_id=? AND source_vhost=? AND source_queue=? ORDER BY ordinal", (backup_id, source_vhost, source_queue))
        return [Unroutable(*row) for row in rows]

    def add_stream_offsets(self, cp: QueueCheckpoint, pairs: list[tuple[int, int]]) -> None:
        """Remember which new stream offset each restored record (by source offset) received."""
        self._db.executemany(
            "INSERT OR REPLACE INTO restore_stream_offsets VALUES (?,?,?,?,?)",
            [(cp.backup_id, cp.source_vhost, cp.source_queue, s, t) for s, t in pairs])

    def mapped_offset(self, backup_id: str, source_vhost: str, source_queue: str, source_offset: int) -> int | None:
        """The new offset of the last restored record at or before ``source_offset``, or None."""
        row = self._db.execute(
            "SELECT target_offset FROM restore_stream_offsets WHERE backup_id=? AND source_vhost=? AND source_queue=? "
            "AND source_offset<=? ORDER BY source_offset DESC LIMIT 1", (backup_id, source_vhost, source_queue, source_offset)).fetchone()
        return None if row is None else int(row[0])


def _key(cp: QueueCheckpoint) -> tuple[str, str, str, str, str]:
    return (cp.backup_id, cp.source_vhost, cp.source_queue, cp.target_vhost, cp.target_queue)
