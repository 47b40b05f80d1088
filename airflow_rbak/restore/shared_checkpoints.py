"""Restore checkpoints in object storage, so a restore task resumes on any worker.

One restore of one queue (the key of :mod:`.checkpoints`: target cluster,
location, backup, source and target queue) owns the objects under
``{backup_id}/state/restore/{digest}/``: ``progress.json`` (window, next
ordinal, published, depth base, completion) and the unroutable records
beside it. Only the task publishing that queue writes there, and every write
replaces one object whole (storage writes are atomic), so concurrent restore
tasks never overwrite each other's progress. Stream offset pairs are stored
in batches (``offsets-<first source offset>.json``), each written once, so
a checkpoint stays small however long the stream.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from airflow_rbak.codec.layout import restore_state_prefix
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.checkpoints import QueueCheckpoint, Unroutable, _key
from airflow_rbak.storage.base import ObjectNotFoundError, Storage


class StoredRestoreCheckpoints:
    """Restore checkpoints as objects in ``storage`` (the backup's own location, or another the user names)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._offsets: dict[str, list[tuple[int, int]]] = {}

    def close(self) -> None:
        """Nothing to release: every write was complete when its call returned."""

    def __enter__(self) -> StoredRestoreCheckpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _folder(self, cp: QueueCheckpoint) -> str:
        digest = hashlib.sha256("\0".join(_key(cp)).encode()).hexdigest()[:32]
        return f"{restore_state_prefix(cp.backup_id)}{digest}/"

    def _get(self, key: str) -> Any:
        try:
            return json.loads(self.storage.get(key))
        except ObjectNotFoundError:
            return None

    def _put(self, key: str, value: Any) -> None:
        self.storage.put(key, json.dumps(value, sort_keys=True).encode())

    def load(self, blank: QueueCheckpoint) -> QueueCheckpoint:
        """The stored checkpoint for ``blank``'s key, or ``blank``; refuses a different window."""
        row = self._get(self._folder(blank) + "progress.json")
        if row is None:
            return blank
        if row["window"] != blank.window:
            raise ConfigurationError(
                f"{self.storage.url} holds a restore of {blank.source_vhost}/{blank.source_queue} with window "
                f"{row['window']}, not {blank.window}; use another checkpoint_state, or the same window to resume")
        return replace(blank, next_ordinal=row["next_ordinal"], published=row["published"], depth_base=row["depth_base"],
                       completed=bool(row["completed"]), stored=True)

    def save(self, cp: QueueCheckpoint) -> None:
        self._put(self._folder(cp) + "progress.json", {
            "key": list(_key(cp)), "window": cp.window, "next_ordinal": cp.next_ordinal, "published": cp.published,
            "depth_base": cp.depth_base, "completed": cp.completed})

    def add_unroutable(self, cp: QueueCheckpoint, item: Unroutable) -> None:
        self._put(f"{self._folder(cp)}unroutable-{item.ordinal:020d}.json", item.__dict__)

    def unroutable(self, cp: QueueCheckpoint) -> list[Unroutable]:
        keys = sorted(i.key for i in self.storage.list(self._folder(cp) + "unroutable-"))
        return [Unroutable(**self._get(k)) for k in keys]

    def add_stream_offsets(self, cp: QueueCheckpoint, pairs: list[tuple[int, int]]) -> None:
        """Remember which new stream offset each restored record (by source offset) received."""
        if pairs:
            self._put(f"{self._folder(cp)}offsets-{min(s for s, _ in pairs):020d}.json", sorted(pairs))
            self._offsets.pop(self._folder(cp), None)

    def mapped_offset(self, cp: QueueCheckpoint, source_offset: int) -> int | None:
        """The new offset of the last restored record at or before ``source_offset``, or None."""
        folder = self._folder(cp)
        if folder not in self._offsets:
            pairs = [p for i in self.storage.list(folder + "offsets-") for p in self._get(i.key)]
            self._offsets[folder] = sorted((int(s), int(t)) for s, t in pairs)
        before = [t for s, t in self._offsets[folder] if s <= source_offset]
        return before[-1] if before else None
