"""Retry transient storage failures around any backend, as restic's retry backend does.

Only :class:`TransientStorageError` is retried: a missing object or a
denied request will not change by waiting, and retrying it would only delay
the real error.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TypeVar

from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Immutability, ObjectInfo, Storage, TransientStorageError
from airflow_rbak.storage.forwarding import ForwardingStorage

log = package_logger(__name__)
T = TypeVar("T")

DEFAULT_RETRIES = 4


class RetryingStorage(ForwardingStorage):
    """Wrap a backend and retry each transient failure with exponential backoff and full jitter.

    A call is attempted at most ``retries + 1`` times; the wait before retry
    ``n`` (from 0) is uniform in ``[0, min(max_delay, base_delay * 2**n)]``,
    so many workers hitting one throttled bucket spread out instead of
    retrying in lock step. The conditional replace and delete pass through unretried: after a lost reply a retry
    would answer False for this call's own change.
    """

    def __init__(
        self,
        inner: Storage,
        *,
        retries: int = DEFAULT_RETRIES,
        base_delay: float = 0.5,
        max_delay: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if retries < 0 or base_delay < 0 or max_delay < 0:
            raise ConfigurationError(
                f"retries, base_delay and max_delay must be >= 0, got {retries}, {base_delay}, {max_delay}"
            )
        super().__init__(inner)
        self.retries = retries
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._sleep = sleep
        self._jitter = jitter

    def __repr__(self) -> str:
        return f"RetryingStorage({self.inner!r}, retries={self.retries})"

    def check_location(self) -> None:
        """Check the location exists, retrying."""
        self._call("check", "", self.inner.check_location)

    def put(self, key: str, data: bytes) -> None:
        """Store, retrying: a repeated put of the same bytes is harmless."""
        self._call("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create only if absent, retrying; after a lost reply a retry may answer False for our own object."""
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store a local file, retrying the whole upload."""
        self._call("put_file", key, lambda: self.inner.put_file(key, path))

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with its tag, retrying."""
        return self._call("get", key, lambda: self.inner.read_tagged(key))

    def get(self, key: str) -> bytes:
        """Read, retrying."""
        return self._call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Read part of an object, retrying."""
        return self._call("get_range", key, lambda: self.inner.get_range(key, offset, length))

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download to a local file, retrying the whole download."""
        self._call("get_file", key, lambda: self.inner.get_file(key, path))

    def stat(self, key: str) -> ObjectInfo:
        """Stat, retrying."""
        return self._call("stat", key, lambda: self.inner.stat(key))

    def delete(self, key: str) -> None:
        """Delete, retrying: deleting twice is not an error."""
        self._call("delete", key, lambda: self.inner.delete(key))

    def immutability(self) -> Immutability:
        """The backend's locks, retrying."""
        return self._call("immutability", "", self.inner.immutability)

    def locked_until(self, prefix: str, now: datetime) -> dict[str, datetime]:
        """The backend's locks under ``prefix``, retrying."""
        return self._call("locked_until", prefix, lambda: self.inner.locked_until(prefix, now))

    def hidden_keys(self, prefix: str) -> tuple[str, ...]:
        """The backend's hidden keys, retrying."""
        return self._call("hidden_keys", prefix, lambda: self.inner.hidden_keys(prefix))

    def purge(self, key: str) -> bool:
        """Purge, retrying: a version already gone is not listed again."""
        return self._call("purge", key, lambda: self.inner.purge(key))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """List, and after a failure part-way resume after the last key already yielded.

        Listings are sorted, so skipping keys up to the last one yielded
        means the caller sees each key once even across restarts.
        """
        last: str | None = None
        failures = 0
        while True:
            try:
                for info in self.inner.list(prefix):
                    if last is None or info.key > last:
                        last = info.key
                        yield info
                return
            except TransientStorageError as error:
                failures += 1
                self._wait_or_raise("list", prefix, failures, error)

    def _call(self, operation: str, key: str, attempt: Callable[[], T]) -> T:
        failures = 0
        while True:
            try:
                return attempt()
            except TransientStorageError as error:
                failures += 1
                self._wait_or_raise(operation, key, failures, error)

    def _wait_or_raise(
        self, operation: str, key: str, failures: int, error: TransientStorageError
    ) -> None:
        """Sleep before the next attempt, or re-raise once the retries are spent."""
        if failures > self.retries:
            log.warning("giving up on %s %r in %s after %d attempts: %s",
                        operation, key, self.url, failures, error)
            raise error
        delay = self._jitter() * min(self._max_delay, self._base_delay * 2 ** min(failures - 1, 30))
        log.info("retrying %s %r in %s in %.2fs (attempt %d of %d): %s",
                 operation, key, self.url, delay, failures + 1, self.retries + 1, error)
        self._sleep(delay)
