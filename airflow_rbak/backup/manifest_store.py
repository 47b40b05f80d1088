"""Reads and writes a backup's ``manifest.json`` through any storage backend."""

from __future__ import annotations

from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.layout import check_backup_id, manifest_key
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import ObjectNotFoundError, Storage


class ManifestNotFoundError(RbakError):
    """The backup has no ``manifest.json``: it never finished its first write, or the file was lost."""


class ManifestStore:
    """The manifests of the backups under one storage location."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def load(self, backup_id: str) -> BackupManifest:
        """Read and parse a manifest; :class:`ManifestNotFoundError` says how to recover when it is missing."""
        key = manifest_key(check_backup_id(backup_id))
        try:
            data = self.storage.get(key)
        except ObjectNotFoundError:
            raise ManifestNotFoundError(
                f"{self.storage.url}: backup {backup_id!r} has no manifest.json; "
                f"if its segments are there, `rbak manifest rebuild --backup-id {backup_id}` recovers one"
            ) from None
        return BackupManifest.from_bytes(data, name=key)

    def save(self, manifest: BackupManifest, key: str | None = None) -> str:
        """Write a manifest atomically (storage puts are atomic) and return its key."""
        key = key or manifest_key(manifest.backup_id)
        self.storage.put(key, manifest.to_bytes())
        return key

    def backup_ids(self) -> list[str]:
        """Every backup id that has at least one object under its prefix, sorted."""
        ids = {info.key.split("/", 1)[0] for info in self.storage.list("") if "/" in info.key}
        return sorted(ids)
