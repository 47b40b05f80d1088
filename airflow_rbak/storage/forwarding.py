"""One base for the pass-through wrappers (retrying, encrypted, unkeyed, leased, with-manifest).

A wrapper changes a few calls of the backend it wraps and passes every other one through. Written out in each
wrapper, the pass-through calls drifted: a wrapper that fell back to :class:`Storage`'s defaults reported no locks
for a locked bucket, purged by a plain delete (which on a versioned bucket only hides a backup), or made a
conditional write check-then-write. :class:`ForwardingStorage` forwards every call, so a wrapper writes only what it
changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime

from airflow_rbak.storage.base import Immutability, ObjectInfo, Storage


class ForwardingStorage(Storage):
    """A wrapper around ``inner`` that passes every call through unchanged; subclasses override what they change.

    ``exists`` is left to :class:`Storage`, which asks this wrapper's ``stat``: a wrapper that changes ``stat``
    (hides an object, retries) changes ``exists`` with it.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def check_location(self) -> None:
        """The wrapped backend's check."""
        self.inner.check_location()

    def put(self, key: str, data: bytes) -> None:
        """Store in the wrapped backend."""
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create in the wrapped backend if absent."""
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store a local file in the wrapped backend (which may stream it)."""
        self.inner.put_file(key, path)

    def get(self, key: str) -> bytes:
        """Read from the wrapped backend."""
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Read a range from the wrapped backend."""
        return self.inner.get_range(key, offset, length)

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download from the wrapped backend (which may stream it)."""
        self.inner.get_file(key, path)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with the wrapped backend's tag."""
        return self.inner.read_tagged(key)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """The wrapped backend's conditional replace (atomic where it is)."""
        return self.inner.replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """The wrapped backend's conditional delete."""
        return self.inner.delete_if_unchanged(key, tag)

    def stat(self, key: str) -> ObjectInfo:
        """Stat in the wrapped backend."""
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """List the wrapped backend."""
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        """Delete in the wrapped backend."""
        self.inner.delete(key)

    def immutability(self) -> Immutability:
        """The wrapped backend's answer: a wrapper must never hide its locks."""
        return self.inner.immutability()

    def locked_until(self, prefix: str, now: datetime) -> dict[str, datetime]:
        """The wrapped backend's locks."""
        return self.inner.locked_until(prefix, now)

    def hidden_keys(self, prefix: str) -> tuple[str, ...]:
        """The wrapped backend's hidden keys."""
        return self.inner.hidden_keys(prefix)

    def purge(self, key: str) -> bool:
        """The wrapped backend's purge (every version, where it keeps versions)."""
        return self.inner.purge(key)
