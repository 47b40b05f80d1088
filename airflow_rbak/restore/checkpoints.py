"""Restore checkpoints: where each queue's restore stands (in storage, or a local SQLite file for one worker).

One row per restore of one queue: the target cluster (its identity from the
management API), the backup's location and id, the source queue and the
target queue. So one file serves many restores, and a restore into another
cluster, or from another location, never reuses a row of this one (issue 14:
a shared file once made a second cluster's restore "complete" with nothing
published). ``next_ordinal`` is the queue position after the last confirmed
record, ``published`` how many records were confirmed, and ``depth_base``
the depth the target held when exactly those records were in it. The
publisher keeps more messages in flight than it has committed, so after a
crash the target may hold some of them; a re-run reads the depth, skips
exactly that many records and so publishes neither a duplicate nor a gap
(see ``publisher``). ``sent_bound`` is written ahead of the sends it covers:
no run of this restore has sent more than that many records, so a re-run
counts at most ``sent_bound - published`` messages as its own (a checkpoint
written before the field existed has none; see ``publisher.sent_allowance``).
Unroutable records are kept here too, so the report lists them across re-runs.

While a run publishes a queue it holds that queue restore's claim
(:meth:`RestoreCheckpointStore.claim`, :mod:`.claims`): a lease object beside
``progress.json`` in storage, an ``flock`` beside the SQLite file. A second
run of the same restore finds it held and refuses before it sends anything.

:class:`RestoreCheckpointStore` is the whole interface the restore uses; by default
:class:`StoredRestoreCheckpoints` keeps it in the backup's storage, so a restore
task resumes on any worker (``checkpoint_state``: see :func:`open_checkpoint_store`).

In object storage, one restore of one queue (the key above: target cluster,
location, backup, source and target queue) owns the objects under
``{backup_id}/state/restore/{digest}/``: ``progress.json`` (window, next
ordinal, published, depth base, completion) and the unroutable records
beside it. Only the task publishing that queue writes there, and every write
replaces one object whole (storage writes are atomic), so concurrent restore
tasks never overwrite each other's progress. Stream offset pairs are stored
in batches (``offsets-<first source offset>.json``), each written once, so
a checkpoint stays small however long the stream.

Whoever can write to the location could plant those objects, so each is sealed (:mod:`airflow_rbak.storage.sealed`,
bound to its own key) and read back only through the seal: a progress object that fails it counts as absent (the
restore starts again, and before its first send the target is measured again against the plan, :mod:`.fresh_start`:
a target that gained messages is refused, since a missing checkpoint is evidence, not permission), unroutable and offsets
objects that fail it are left out with a warning naming them. Objects of older versions, unsealed, fail it too.
The SQLite store lives on the worker's own disk, outside the location, and is not sealed.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from airflow_rbak.codec.layout import restore_state_prefix
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.claims import FileClaim, StorageClaim
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal, UntrustedStateError, default_seal

log = package_logger(__name__)
#: The seal purposes of the three kinds of object (an object sealed as one is never taken as another).
PROGRESS, UNROUTABLE, OFFSETS = "restore-progress", "restore-unroutable", "restore-offsets"

_KEY_COLUMNS = ("target_cluster TEXT NOT NULL, location TEXT NOT NULL, backup_id TEXT NOT NULL, source_vhost TEXT NOT NULL, "
                "source_queue TEXT NOT NULL, target_vhost TEXT NOT NULL, target_queue TEXT NOT NULL")
_KEY = "target_cluster, location, backup_id, source_vhost, source_queue, target_vhost, target_queue"
_WHERE = " AND ".join(f"{c.strip()}=?" for c in _KEY.split(","))
# Tables of the first schema (keyed by backup and queue names only) are left alone: their rows cannot say which target they were.
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS queue_progress (
    {_KEY_COLUMNS}, window TEXT NOT NULL,
    next_ordinal INTEGER NOT NULL DEFAULT 0, published INTEGER NOT NULL DEFAULT 0,
    depth_base INTEGER, completed INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL, sent_bound INTEGER,
    PRIMARY KEY ({_KEY}));
CREATE TABLE IF NOT EXISTS queue_unroutable (
    {_KEY_COLUMNS}, ordinal INTEGER NOT NULL, segment_key TEXT NOT NULL, record_index INTEGER NOT NULL,
    exchange TEXT NOT NULL, routing_key TEXT NOT NULL, reply TEXT NOT NULL,
    PRIMARY KEY ({_KEY}, ordinal));
CREATE TABLE IF NOT EXISTS queue_stream_offsets (
    {_KEY_COLUMNS}, source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL,
    PRIMARY KEY ({_KEY}, source_offset));
"""


@dataclass(frozen=True)
class QueueCheckpoint:
    """The restore progress of one source queue of one backup into one target queue of one cluster."""

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
    #: The target cluster's identity (``ManagementClient.cluster_identity``) and the backup's storage URL.
    target_cluster: str = ""
    location: str = ""
    #: True when this progress was read from the store: a run saved it before its first publish.
    stored: bool = False
    #: No run of this restore sent more records than this (``published`` counts included); committed before the
    #: sends it covers. None: a checkpoint of an older version, or nothing sent yet.
    sent_bound: int | None = None

    @property
    def started(self) -> bool:
        """True once a run of this restore has begun publishing into the target (or finished)."""
        return self.stored or self.completed or self.depth_base is not None or self.published > 0


@dataclass(frozen=True)
class Unroutable:
    """A record the broker returned as unroutable: where it is in the backup and where it was sent."""

    ordinal: int
    segment_key: str
    record_index: int
    exchange: str
    routing_key: str
    reply: str


class RestoreCheckpointStore(Protocol):
    """What the restore needs of a checkpoint store; every write is durable when the call returns."""

    def load(self, blank: QueueCheckpoint) -> QueueCheckpoint: ...
    def save(self, cp: QueueCheckpoint) -> None: ...
    def add_unroutable(self, cp: QueueCheckpoint, item: Unroutable) -> None: ...
    def unroutable(self, cp: QueueCheckpoint) -> list[Unroutable]: ...
    def add_stream_offsets(self, cp: QueueCheckpoint, pairs: list[tuple[int, int]]) -> None: ...
    def mapped_offset(self, cp: QueueCheckpoint, source_offset: int) -> int | None: ...
    def claim(self, cp: QueueCheckpoint) -> AbstractContextManager[object]:
        """Hold ``cp``'s queue restore for this run while the block runs; :class:`~.errors.RestoreClaimedError`
        (nothing done) when another run holds it."""
        ...


#: ``checkpoint_state`` value that keeps restore checkpoints in the backup's own storage (the default).
IN_BACKUP_STORAGE = "backup"


def open_checkpoint_store(location: str, backup_storage: Storage | None = None,
                          seal: StateSeal | None = None) -> RestoreCheckpoints | StoredRestoreCheckpoints:
    """The checkpoint store ``checkpoint_state`` names; close it after use.

    ``backup`` (default): objects in the backup's storage, so a restore task resumes on any worker; a storage
    URL (``s3://…``, ``file://…``): objects there; a plain path: a local SQLite file (one worker only). Objects in
    storage are sealed with ``seal`` (default: :func:`~airflow_rbak.storage.sealed.default_seal`).
    """
    from airflow_rbak.storage import open_storage

    if location == IN_BACKUP_STORAGE:
        if backup_storage is None:
            raise ConfigurationError("checkpoint_state 'backup' needs the backup's storage")
        return StoredRestoreCheckpoints(backup_storage, seal)
    if "://" in location:
        return StoredRestoreCheckpoints(open_storage(location), seal)
    return RestoreCheckpoints(location)


class RestoreCheckpoints:
    """The SQLite checkpoint store; every write is its own committed transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            _add_sent_bound(self._db)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError(f"checkpoint_state {self.path} cannot be used ({exc}); give a writable local file") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RestoreCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load(self, blank: QueueCheckpoint) -> QueueCheckpoint:
        """The stored checkpoint for ``blank``'s key, or ``blank``; refuses a different window."""
        row = self._db.execute(
            f"SELECT window, next_ordinal, published, depth_base, completed, sent_bound FROM queue_progress WHERE {_WHERE}",
            _key(blank)
        ).fetchone()
        if row is None:
            return blank
        if row[0] != blank.window:
            raise ConfigurationError(
                f"{self.path} holds a restore of {blank.source_vhost}/{blank.source_queue} with window {row[0]}, "
                f"not {blank.window}; use another checkpoint_state, or the same window to resume")
        return replace(blank, next_ordinal=row[1], published=row[2], depth_base=row[3], completed=bool(row[4]),
                       sent_bound=row[5], stored=True)

    def save(self, cp: QueueCheckpoint) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO queue_progress ({_KEY}, window, next_ordinal, published, depth_base, completed, "
            "updated_at, sent_bound) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (*_key(cp), cp.window, cp.next_ordinal, cp.published, cp.depth_base, int(cp.completed), int(time.time() * 1000),
             cp.sent_bound))

    def claim(self, cp: QueueCheckpoint) -> FileClaim:
        """An ``flock`` on a file beside the database, one per queue restore: the OS lets it go when its process ends."""
        return FileClaim(self.path.with_name(self.path.name + ".claims") / f"{_digest(cp)}.lock", _label(cp))

    def add_unroutable(self, cp: QueueCheckpoint, item: Unroutable) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO queue_unroutable ({_KEY}, ordinal, segment_key, record_index, exchange, routing_key, reply) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (*_key(cp), item.ordinal, item.segment_key, item.record_index, item.exchange, item.routing_key, item.reply))

    def unroutable(self, cp: QueueCheckpoint) -> list[Unroutable]:
        rows = self._db.execute(
            f"SELECT ordinal, segment_key, record_index, exchange, routing_key, reply FROM queue_unroutable WHERE {_WHERE} "
            "ORDER BY ordinal", _key(cp))
        return [Unroutable(*row) for row in rows]

    def add_stream_offsets(self, cp: QueueCheckpoint, pairs: list[tuple[int, int]]) -> None:
        """Remember which new stream offset each restored record (by source offset) received."""
        self._db.executemany(f"INSERT OR REPLACE INTO queue_stream_offsets ({_KEY}, source_offset, target_offset) "
                             "VALUES (?,?,?,?,?,?,?,?,?)", [(*_key(cp), s, t) for s, t in pairs])

    def mapped_offset(self, cp: QueueCheckpoint, source_offset: int) -> int | None:
        """The new offset of the last restored record at or before ``source_offset``, or None."""
        row = self._db.execute(
            f"SELECT target_offset FROM queue_stream_offsets WHERE {_WHERE} AND source_offset<=? "
            "ORDER BY source_offset DESC LIMIT 1", (*_key(cp), source_offset)).fetchone()
        return None if row is None else int(row[0])


def _add_sent_bound(db: sqlite3.Connection) -> None:
    """Give a file of an older version the ``sent_bound`` column: its rows keep NULL, which reads as no bound."""
    if "sent_bound" in {row[1] for row in db.execute("PRAGMA table_info(queue_progress)")}:
        return
    try:
        db.execute("ALTER TABLE queue_progress ADD COLUMN sent_bound INTEGER")
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):  # another process added it first
            raise


def _key(cp: QueueCheckpoint) -> tuple[str, ...]:
    return (cp.target_cluster, cp.location, cp.backup_id, cp.source_vhost, cp.source_queue, cp.target_vhost, cp.target_queue)


def _digest(cp: QueueCheckpoint) -> str:
    return hashlib.sha256("\0".join(_key(cp)).encode()).hexdigest()[:32]


def _label(cp: QueueCheckpoint) -> str:
    return f"the restore of {cp.source_vhost}/{cp.source_queue} into {cp.target_vhost}/{cp.target_queue}"


def _is_progress(row: Any, blank: QueueCheckpoint) -> bool:
    """True when ``row`` has the fields and types :meth:`StoredRestoreCheckpoints.save` writes, for ``blank``'s key."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return (isinstance(row, dict) and row.get("key") == list(_key(blank)) and isinstance(row.get("window"), str)
            and count(row.get("next_ordinal")) and count(row.get("published"))
            and (row.get("depth_base") is None or count(row.get("depth_base"))) and isinstance(row.get("completed"), bool)
            and (row.get("sent_bound") is None or count(row.get("sent_bound"))))


class StoredRestoreCheckpoints:
    """Restore checkpoints as sealed objects in ``storage`` (the backup's own location, or another the user names)."""

    def __init__(self, storage: Storage, seal: StateSeal | None = None) -> None:
        self.storage = storage
        self.seal = seal or default_seal()
        self._offsets: dict[str, list[tuple[int, int]]] = {}
        self._claims: dict[str, StorageClaim] = {}

    def close(self) -> None:
        """Nothing to release: every write was complete when its call returned."""

    def __enter__(self) -> StoredRestoreCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _folder(self, cp: QueueCheckpoint) -> str:
        return f"{restore_state_prefix(cp.backup_id)}{_digest(cp)}/"

    @contextlib.contextmanager
    def claim(self, cp: QueueCheckpoint) -> Iterator[None]:
        """A lease object beside ``progress.json``; while it is held, every progress write first checks it is still
        this run's (a run whose claim was taken over stops at its next checkpoint)."""
        folder = self._folder(cp)
        with StorageClaim(self.storage, folder + "claim.json", _label(cp)) as held:
            self._claims[folder] = held
            try:
                yield
            finally:
                self._claims.pop(folder, None)

    def _put(self, purpose: str, key: str, value: Any) -> None:
        self.seal.write(self.storage, purpose, key, value)

    def load(self, blank: QueueCheckpoint) -> QueueCheckpoint:
        """The stored checkpoint for ``blank``'s key, or ``blank`` (also when the stored one is not trusted);
        refuses a different window."""
        row = self._progress(blank)
        if row is None:
            return blank
        if row["window"] != blank.window:
            raise ConfigurationError(
                f"{self.storage.url} holds a restore of {blank.source_vhost}/{blank.source_queue} with window "
                f"{row['window']}, not {blank.window}; use another checkpoint_state, or the same window to resume")
        return replace(blank, next_ordinal=row["next_ordinal"], published=row["published"], depth_base=row["depth_base"],
                       completed=row["completed"], sent_bound=row.get("sent_bound"), stored=True)

    def _progress(self, blank: QueueCheckpoint) -> dict[str, Any] | None:
        """The stored progress of ``blank``'s restore; None when there is none or it is not trusted (said in a warning)."""
        key = self._folder(blank) + "progress.json"
        try:
            row = self.seal.read(self.storage, PROGRESS, key)
            if row is not None and not _is_progress(row, blank):
                raise UntrustedStateError(key, "its body is not this restore's progress")
        except UntrustedStateError as exc:
            log.warning("%s; the restore of %s/%s starts again as if it had none", exc, blank.source_vhost,
                        blank.source_queue)
            return None
        return row

    def save(self, cp: QueueCheckpoint) -> None:
        claim = self._claims.get(self._folder(cp))
        if claim is not None:
            claim.check()
        self._put(PROGRESS, self._folder(cp) + "progress.json", {
            "key": list(_key(cp)), "window": cp.window, "next_ordinal": cp.next_ordinal, "published": cp.published,
            "depth_base": cp.depth_base, "completed": cp.completed, "sent_bound": cp.sent_bound})

    def add_unroutable(self, cp: QueueCheckpoint, item: Unroutable) -> None:
        self._put(UNROUTABLE, f"{self._folder(cp)}unroutable-{item.ordinal:020d}.json", item.__dict__)

    def unroutable(self, cp: QueueCheckpoint) -> list[Unroutable]:
        """The unroutable records this restore stored; objects that fail their seal are left out, with a warning."""
        keys = sorted(i.key for i in self.storage.list(self._folder(cp) + "unroutable-"))
        return [Unroutable(**row) for row in self._trusted(UNROUTABLE, keys, dict)]

    def add_stream_offsets(self, cp: QueueCheckpoint, pairs: list[tuple[int, int]]) -> None:
        """Remember which new stream offset each restored record (by source offset) received."""
        if pairs:
            self._put(OFFSETS, f"{self._folder(cp)}offsets-{min(s for s, _ in pairs):020d}.json", sorted(pairs))
            self._offsets.pop(self._folder(cp), None)

    def mapped_offset(self, cp: QueueCheckpoint, source_offset: int) -> int | None:
        """The new offset of the last restored record at or before ``source_offset``, or None."""
        folder = self._folder(cp)
        if folder not in self._offsets:
            keys = [i.key for i in self.storage.list(folder + "offsets-")]
            pairs = [p for batch in self._trusted(OFFSETS, keys, list) for p in batch]
            self._offsets[folder] = sorted((int(s), int(t)) for s, t in pairs)
        before = [t for s, t in self._offsets[folder] if s <= source_offset]
        return before[-1] if before else None

    def _trusted(self, purpose: str, keys: list[str], shape: type) -> list[Any]:
        """The bodies of ``keys`` that open under the seal and have ``shape``; each other one is named in a warning."""
        found = []
        for key in keys:
            try:
                body = self.seal.read(self.storage, purpose, key)
            except UntrustedStateError as exc:
                log.warning("%s; left out of this restore's checkpoint", exc)
                continue
            if isinstance(body, shape):
                found.append(body)
        return found
