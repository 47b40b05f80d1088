"""A storage wrapper that fails on purpose, as object storage and networks do.

Each call may draw a fault (seeded, so a failing run can be replayed):

* ``error``: refused before anything is written or read (a 503, a connection reset);
* ``lost_reply``: a put is stored, then the reply is lost, so the caller sees a failure;
* ``timeout``: the call hangs for ``hang`` seconds, then fails (half the time after a put was stored);
* ``incomplete``: a get's body breaks off; the backend notices, as botocore does from Content-Length;
* ``truncated``: a get's body breaks off and the backend does *not* notice: the caller gets fewer bytes.

All but ``truncated`` raise :class:`TransientStorageError`, which ``RetryingStorage`` retries; a
``truncated`` body is only caught by the codec's own checks. Puts stay atomic, as every backend's
are (the conformance suite checks it): a fault never leaves half an object behind.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from airflow_rbak.storage.base import ObjectInfo, Storage, TransientStorageError

READ_FAULTS = ("error", "timeout", "incomplete")
WRITE_FAULTS = ("error", "lost_reply", "timeout")


class FaultyStorage(Storage):
    """Wrap a backend; each put, get, stat, list and delete fails with probability ``rate``."""

    def __init__(self, inner: Storage, *, rate: float = 0.0, seed: int = 0, truncate_rate: float = 0.0,
                 hang: float = 0.01, applies: Callable[[str, str], bool] = lambda op, key: True,
                 kinds: tuple[str, ...] | None = None) -> None:
        self.inner, self.url = inner, inner.url
        self.rate, self.truncate_rate, self.hang, self.applies = rate, truncate_rate, hang, applies
        self.kinds = kinds  # only these faults, when given
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        #: Called with the key before every put (a test can pause a run there).
        self.on_put: Callable[[str], None] | None = None

    def _draw(self, op: str, key: str, kinds: tuple[str, ...], eligible: bool | None = None) -> str | None:
        eligible = self.applies(op, key) if eligible is None else eligible
        with self._lock:
            self.calls[op] += 1
            if not eligible or self._random.random() >= self.rate:
                return None
            kind = self._random.choice([k for k in kinds if self.kinds is None or k in self.kinds] or kinds)
            self.injected[f"{op}:{kind}"] += 1
            return kind

    def _fail(self, op: str, key: str, kind: str) -> TransientStorageError:
        if kind == "timeout":
            time.sleep(self.hang)
        return TransientStorageError(f"injected {kind} on {op} {key!r}", key)

    def put(self, key: str, data: bytes) -> None:
        if self.on_put is not None:
            self.on_put(key)
        kind = self._draw("put", key, WRITE_FAULTS)
        if kind == "error" or (kind == "timeout" and self._coin()):
            raise self._fail("put", key, kind)
        self.inner.put(key, data)
        if kind is not None:
            raise self._fail("put", key, kind)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        kind = self._draw("put_if_absent", key, WRITE_FAULTS)
        if kind == "error":
            raise self._fail("put_if_absent", key, kind)
        created = self.inner.put_if_absent(key, data)
        if kind is not None:
            raise self._fail("put_if_absent", key, kind)
        return created

    def get(self, key: str) -> bytes:
        eligible = self.applies("get", key)
        kind = self._draw("get", key, READ_FAULTS, eligible)
        if kind is not None:
            raise self._fail("get", key, kind)
        data = self.inner.get(key)
        if eligible and self.truncate_rate and self._roll(self.truncate_rate) and len(data) > 1:
            self.injected["get:truncated"] += 1
            return data[: self._random.randrange(1, len(data))]
        return data

    def stat(self, key: str) -> ObjectInfo:
        kind = self._draw("stat", key, ("error", "timeout"))
        if kind is not None:
            raise self._fail("stat", key, kind)
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        kind = self._draw("list", prefix, ("error", "timeout"))
        for index, info in enumerate(self.inner.list(prefix)):
            if kind is not None and index == 1:  # break off part-way, as a failing page does
                raise self._fail("list", prefix, kind)
            yield info
        if kind is not None:
            raise self._fail("list", prefix, kind)

    def delete(self, key: str) -> None:
        kind = self._draw("delete", key, WRITE_FAULTS)
        if kind == "error":
            raise self._fail("delete", key, kind)
        self.inner.delete(key)
        if kind is not None:
            raise self._fail("delete", key, kind)

    def _coin(self) -> bool:
        return self._roll(0.5)

    def _roll(self, chance: float) -> bool:
        with self._lock:
            return self._random.random() < chance
