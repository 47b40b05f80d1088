"""Reads and writes a backup's ``manifest.json`` through any storage backend."""

from __future__ import annotations

import threading
from contextlib import nullcontext

from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.layout import check_backup_id, is_location_state, manifest_key
from airflow_rbak.codec.manifest import MAX_MANIFEST_BYTES, check_manifest_bytes, check_manifest_size
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import ObjectNotFoundError, Storage

#: Manifests over this size are read and parsed at most :data:`_LARGE_AT_ONCE` at a time per process, so a
#: catalog read with many workers (the backups view) holds a bounded number of large ones in memory.
_LARGE_BYTES = 1024**2
_LARGE_AT_ONCE = 2
_large_reads = threading.BoundedSemaphore(_LARGE_AT_ONCE)


class ManifestNotFoundError(RbakError):
    """The backup has no ``manifest.json``: it never finished its first write, or the file was lost."""


class ManifestStore:
    """The manifests of the backups under one storage location."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def load(self, backup_id: str, *, listed_size: int | None = None) -> BackupManifest:
        """Read and parse a manifest; :class:`ManifestNotFoundError` says how to recover when it is missing.

        Anyone who can write to the location can put a manifest there, so the read is bounded
        (its size, the one a listing already gave as ``listed_size`` or else a stat's, refuses an oversized
        one without reading it; the read stops one byte past the cap, for one replaced since)
        and a manifest that names another backup than its folder is refused.
        """
        key = manifest_key(check_backup_id(backup_id))
        if listed_size is not None:
            check_manifest_size(listed_size, key)
        small = listed_size is not None and listed_size <= _LARGE_BYTES
        with nullcontext() if small else _large_reads:
            try:
                if listed_size is None:  # no listing said how large it is: ask before reading it
                    check_manifest_size(self.storage.stat(key).size, key)
                data = self.storage.get_range(key, 0, MAX_MANIFEST_BYTES + 1)
            except ObjectNotFoundError:
                raise ManifestNotFoundError(
                    f"{self.storage.url}: backup {backup_id!r} has no manifest.json; "
                    f"if its segments are there, `rbak manifest rebuild --backup-id {backup_id}` recovers one"
                ) from None
            manifest = BackupManifest.from_bytes(data, name=key)
        if manifest.backup_id != backup_id:
            raise ManifestError(f"names backup {manifest.backup_id[:200]!r}, not its folder's {backup_id!r}", segment=key)
        return manifest

    def save(self, manifest: BackupManifest, key: str | None = None) -> str:
        """Write a manifest atomically (storage puts are atomic) and return its key; never one readers refuse."""
        key = key or manifest_key(manifest.backup_id)
        data = manifest.to_bytes()
        check_manifest_bytes(data, key)
        self.storage.put(key, data)
        return key

    def backup_ids(self) -> list[str]:
        """Every backup id that has at least one object under its prefix, sorted."""
        ids = {info.key.split("/", 1)[0] for info in self.storage.list("")
               if "/" in info.key and not is_location_state(info.key)}
        return sorted(ids)
