"""An in-process storage backend for tests and dry runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import ClassVar

from airflow_rbak.storage.base import (
    ObjectInfo,
    ObjectNotFoundError,
    Storage,
    check_key,
    check_prefix,
)
from airflow_rbak.storage.locations.memory import MemoryStorageConfig


class _Objects:
    """The dict and its lock, shared by every MemoryStorage opened on one name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, bytes] = {}


class MemoryStorage(Storage):
    """A thread-safe dict of objects; ``MemoryStorage("name")`` shares one store per name.

    Named stores let a test hand ``memory://name`` to code under test and
    then inspect what it wrote. An unnamed store is private to its instance.
    """

    _named: ClassVar[dict[str, _Objects]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str = "") -> None:
        config = MemoryStorageConfig(name)
        self.name = config.name
        self.url = config.url
        if not self.name:
            self._objects = _Objects()
            return
        with self._named_lock:
            self._objects = self._named.setdefault(self.name, _Objects())

    @classmethod
    def from_config(cls, config: MemoryStorageConfig) -> MemoryStorage:
        """Build the backend a ``memory://`` URL describes."""
        return cls(config.name)

    @classmethod
    def discard(cls, name: str) -> None:
        """Forget the named store, so the next opener of ``memory://name`` starts empty."""
        with cls._named_lock:
            cls._named.pop(name, None)

    def __repr__(self) -> str:
        return f"MemoryStorage({self.name!r})"

    def put(self, key: str, data: bytes) -> None:
        """Store a private copy, so later changes to a caller's buffer cannot leak in."""
        check_key(key)
        copy = bytes(data)
        with self._objects.lock:
            self._objects.data[key] = copy

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store a copy unless the key is taken, checked and set under the store's lock."""
        check_key(key)
        copy = bytes(data)
        with self._objects.lock:
            if key in self._objects.data:
                return False
            self._objects.data[key] = copy
        return True

    def get(self, key: str) -> bytes:
        """Return the stored bytes (immutable, so no copy is needed)."""
        check_key(key)
        with self._objects.lock:
            data = self._objects.data.get(key)
        if data is None:
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
        return data

    def stat(self, key: str) -> ObjectInfo:
        """Report the object's size."""
        return ObjectInfo(key, len(self.get(key)))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield a sorted snapshot taken under the lock, so concurrent writers cannot break iteration."""
        check_prefix(prefix)
        with self._objects.lock:
            snapshot = [
                ObjectInfo(key, len(data))
                for key, data in self._objects.data.items()
                if key.startswith(prefix)
            ]
        snapshot.sort(key=lambda info: info.key)
        yield from snapshot

    def delete(self, key: str) -> None:
        """Remove the object if it is there."""
        check_key(key)
        with self._objects.lock:
            self._objects.data.pop(key, None)
