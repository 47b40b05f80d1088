"""Storage that writes only while its run holds the backup's lock.

The lock (:mod:`airflow_rbak.repository.lock`) is a lease on the backup's keys: a
run whose lock was broken (``break_lock`` by a run that took it for a crashed
one, or ``rbak unlock``) must stop writing at once, not only before its
manifest, or it would keep staging beside the run that now owns the backup.
Wrapping the run's storage puts the check in front of every write and delete
the run makes, whichever engine makes it (capture's staging writer, the
checkpoint mirror, encode, the manifest), without those engines knowing.

A check is one read of ``lock.json`` (a GET on S3), cheap beside the
megabytes each write carries. It cannot close the gap between the check and
the write it guards: a run that loses its lock during that one write still
lands it, and is refused at its next.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from airflow_rbak.repository.lock import BackupLock
from airflow_rbak.storage.base import ObjectInfo, Storage


class LeasedStorage(Storage):
    """Every write and delete first checks that ``lock``'s owner still holds it; reads pass through."""

    def __init__(self, inner: Storage, lock: BackupLock) -> None:
        self.inner = inner
        self.lock = lock
        self.url = inner.url

    def __repr__(self) -> str:
        return f"LeasedStorage({self.inner!r}, owner={self.lock.owner!r})"

    def _check(self, key: str) -> None:
        if key != self.lock.key:  # the lock's own object is the lock's business
            self.lock.check(f"writing {key}")

    def put(self, key: str, data: bytes) -> None:
        self._check(key)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._check(key)
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        self._check(key)
        self.inner.put_file(key, path)

    def delete(self, key: str) -> None:
        self._check(key)
        self.inner.delete(key)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.inner.get_range(key, offset, length)

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        self.inner.get_file(key, path)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)
