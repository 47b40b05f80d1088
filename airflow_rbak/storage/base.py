"""The storage backend interface: a flat key space of immutable objects.

Backends know nothing of segments or manifests (the codec and the backup
engines do); they only move bytes, atomically, under keys relative to the
storage root named by the URL.
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.atomic import atomic_write

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


class StorageError(RbakError):
    """A storage operation failed; ``key`` names the object when there is one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ObjectNotFoundError(StorageError):
    """The object does not exist (final: retrying will not help)."""


class MissingLocationError(StorageError):
    """The location itself does not exist (no such folder, no such bucket): likely a mistyped URL."""


class TransientStorageError(StorageError):
    """A failure that may pass (timeout, throttling, 5xx): worth retrying."""


class ObjectTooLargeError(StorageError):
    """An object is larger than its reader accepts: refused from its stated size, without reading it."""


class ObjectLockedError(StorageError):
    """The storage refuses to delete an object until ``until`` (S3 Object Lock): final until that date passes."""

    def __init__(self, message: str, key: str, until: datetime | None) -> None:
        super().__init__(message, key)
        self.until = until


class InvalidKeyError(StorageError, ValueError):
    """A key that could escape the storage root or is otherwise not a valid key."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or stat tells about one stored object."""

    key: str
    size: int


@dataclass(frozen=True)
class Immutability:
    """Whether a location's backups outlive a credential that can write there: what ``rbak location`` reports."""

    backend: str
    #: True only when the storage itself refuses to delete a backup's content before its lock passes.
    immutable: bool
    #: One sentence: why, or why not.
    summary: str
    #: The lock mode and period each backup's content is written with (S3: ``governance``/``compliance``), if any.
    mode: str | None = None
    days: int | None = None
    #: Facts read from the storage (bucket versioning, Object Lock, default retention), as name -> value.
    details: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"backend": self.backend, "immutable": self.immutable, "summary": self.summary, "mode": self.mode,
                "days": self.days, "details": dict(self.details)}


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative key, else raise :class:`InvalidKeyError`.

    Keys are ``/``-separated, relative, with no empty, ``.`` or ``..``
    components, so no key can leave the storage root on any backend; control
    characters are refused too, as they forge log lines and some S3-compatible
    servers mishandle them.
    """
    if not key or key.startswith("/") or "\\" in key or _CONTROL_CHARS.search(key):
        raise InvalidKeyError(f"invalid storage key {key!r}", key)
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidKeyError(f"invalid storage key {key!r}", key)
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a valid key, else raise :class:`InvalidKeyError`.

    A prefix may end inside a segment (``seg-0``) or with ``/``; it is a
    string prefix, so ``a/b`` also matches ``a/bc`` while ``a/b/`` does not.
    """
    if prefix:
        check_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


class Storage(abc.ABC):
    """One backup location: put, get, stat, list and delete objects by key."""

    #: The location as a URL without credentials, safe to log.
    url: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` atomically: readers see the old object or all of the new one."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return the whole object; :class:`ObjectNotFoundError` if there is none."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Return the object's size; :class:`ObjectNotFoundError` if there is none."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Yield every object whose key starts with ``prefix``, recursively, sorted by key."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    def immutability(self) -> Immutability:
        """What this location promises against deletion (``rbak location``); this default: nothing, any writer deletes."""
        return Immutability(backend=type(self).__name__, immutable=False,
                            summary="no: whoever may write here may also delete (the backend keeps no locks)")

    def locked_until(self, prefix: str, now: datetime) -> dict[str, datetime]:
        """The keys under ``prefix`` of which some stored version may not be deleted before a date after ``now``.

        Retention asks before it removes a backup, so that a locked backup is skipped whole rather than half
        removed. This default: a backend that keeps no locks.
        """
        return {}

    def hidden_keys(self, prefix: str) -> tuple[str, ...]:
        """Keys under ``prefix`` whose stored versions a delete marker hides (a versioned bucket); this default: none.

        Readers see only current objects, so a backup hidden this way is invisible to them, yet still stored;
        retention purges these too, or a forgotten backup would leave its hidden versions behind.
        """
        return ()

    def purge(self, key: str) -> bool:
        """Remove the object and every earlier version of it; True when nothing of it is left.

        On a backend that keeps no versions this is :meth:`delete`. A versioned backend (S3 with Object Lock)
        deletes each version where the credential may, and otherwise only hides the object behind a delete marker
        (False: its versions stay until the bucket's lifecycle expires them); a version still locked raises
        :class:`ObjectLockedError` and nothing is hidden.
        """
        self.delete(key)
        return True

    def check_location(self) -> None:
        """Raise :class:`MissingLocationError` unless the location exists (it may be empty).

        Readers call it first, so a mistyped URL is an error rather than an empty listing. Writers need not: the
        file backend creates its folder on the first ``put``. This default suits a backend whose location always
        exists.
        """
        return None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` at ``key`` only if no object is there; True when this call created it.

        The check and the write are one atomic step on the backend (an exclusive
        link on a file system, ``If-None-Match: *`` on S3), so of many callers
        racing for one key exactly one gets True: the primitive behind
        :class:`~airflow_rbak.repository.lock.BackupLock`. A retried call may report
        False for an object its own lost first attempt created; callers that must
        know compare the stored bytes with their own.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot create an object only if absent")

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The object and a tag that changes whenever it is replaced (an ETag on S3, a digest here)."""
        data = self.get(key)
        return data, hashlib.sha256(data).hexdigest()

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Replace the object only if it still carries ``tag`` (from :meth:`read_tagged`); True when replaced.

        Atomic where the backend allows (S3 ``If-Match``; a directory lock on a folder). This default
        checks and then writes, so a writer in between can be overwritten.
        """
        if not self._still_tagged(key, tag):
            return False
        self.put(key, data)
        return True

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete the object only if it still carries ``tag``; True when deleted. Atomic as :meth:`replace_if_unchanged`."""
        if not self._still_tagged(key, tag):
            return False
        self.delete(key)
        return True

    def _still_tagged(self, key: str, tag: str) -> bool:
        """Whether the object exists and still carries ``tag`` (the non-atomic defaults' check)."""
        try:
            return self.read_tagged(key)[1] == tag
        except ObjectNotFoundError:
            return False

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Return up to ``length`` bytes from ``offset``: fewer at the object's end, none past it.

        Lets a reader fetch a footer or an index without the whole object;
        backends override this when they can read less than everything.
        """
        check_range(offset, length)
        return self.get(key)[offset : offset + length]

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store the local file at ``path`` under ``key``, atomically like :meth:`put`.

        For files too large to hold twice in memory (a SQLite index, say),
        backends override this to stream.
        """
        with open(path, "rb") as source:
            self.put(key, source.read())

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Write the object to the local ``path``, replacing it only once complete."""
        data = self.get(key)
        with atomic_write(path) as target:
            target.write(data)

    def exists(self, key: str) -> bool:
        """Tell whether an object is stored at ``key``."""
        try:
            self.stat(key)
        except ObjectNotFoundError:
            return False
        return True


def check_range(offset: int, length: int) -> None:
    """Refuse negative offsets and lengths, which are caller bugs, not storage failures."""
    if offset < 0 or length < 0:
        raise ValueError(f"offset and length must be >= 0, got {offset} and {length}")


def read_bounded(storage: Storage, key: str, max_bytes: int, what: str = "the object") -> bytes:
    """The whole object at ``key``, refused with :class:`ObjectTooLargeError` if it is over ``max_bytes``.

    The size is stat'ed first, so an oversized object is refused without being read; the read itself asks
    for one byte more than the cap, so an object replaced by a larger one after the stat is refused too.
    """
    size = storage.stat(key).size
    if size > max_bytes:
        raise ObjectTooLargeError(f"{key}: {size} bytes, over the {max_bytes} bytes {what} may hold; not read", key)
    data = storage.get_range(key, 0, max_bytes + 1)
    if len(data) > max_bytes:
        raise ObjectTooLargeError(f"{key}: grew past the {max_bytes} bytes {what} may hold while it was read", key)
    return data
