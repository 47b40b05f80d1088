"""Reading a queue's records on one thread while they are published on another, with bounded memory.

Why: the publish thread spends much of its time waiting, for confirms while the window is full and on the
socket, and reading records (fetching a segment, its SHA-256, decompressing it, turning each record's JSON into
pika properties) used to wait for it, one after the other. zstd, SHA-256, file and socket I/O release the GIL, and
the publish thread releases it whenever it waits on the broker, so the reading goes on meanwhile (the figures:
docs/performance.md, "Restore"). The records and their order are those of the iterator read; only the wall time
differs. Memory: at most ``depth`` batches of ``batch`` records wait between the two threads, beside the segment
the reader holds (as before).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
#: Records handed over at once: fewer hand-overs cost less than the records they carry.
BATCH = 256
#: Batches read ahead at most: enough to cover a broker's pause, bounded so a slow target never fills memory.
DEPTH = 8
_END = object()
#: How often a reader blocked on a full hand-over looks whether the publisher has stopped.
_STOP_POLL_SECONDS = 0.1


class _Failed:
    """What the reader raised, carried to the publish thread, which raises it there."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ReadAhead(Iterator[T], Generic[T]):
    """Iterate over ``source`` on a thread of its own, ahead of the caller by at most ``depth`` batches.

    Items come out in ``source``'s order; an exception ``source`` raises comes out, as itself, where its item would
    have. :meth:`close` (also on leaving a ``with``) stops the reader and waits for it, so nothing reads on behind
    a publish that stopped."""

    def __init__(self, source: Iterator[T], batch: int = BATCH, depth: int = DEPTH) -> None:
        self._source, self._batch = source, batch
        self._handover: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stopped = threading.Event()
        self._current: list[T] = []
        self._at = 0
        self._done = False
        self._thread = threading.Thread(target=self._read, name="rbak-read-ahead", daemon=True)
        self._thread.start()

    def __enter__(self) -> ReadAhead[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __next__(self) -> T:
        while self._at >= len(self._current):
            if self._done:
                raise StopIteration
            got = self._handover.get()
            if got is _END:
                self._done = True
                raise StopIteration
            if isinstance(got, _Failed):
                self._done = True
                raise got.error
            self._current, self._at = got, 0  # type: ignore[assignment]
        item = self._current[self._at]
        self._at += 1
        return item

    def close(self) -> None:
        """Stop the reader (it closes ``source`` on its own thread) and wait for it."""
        self._stopped.set()
        self._done = True
        while self._thread.is_alive():
            try:  # make room, so a reader blocked on a full hand-over sees the stop
                self._handover.get(timeout=_STOP_POLL_SECONDS)
            except queue.Empty:
                pass
        self._current = []

    def _read(self) -> None:
        pending: list[T] = []
        try:
            for item in self._source:
                pending.append(item)
                if len(pending) >= self._batch:
                    if not self._put(pending):
                        return
                    pending = []
            if pending and not self._put(pending):
                return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - carried to the publish thread, raised there
            if pending:
                self._put(pending)
            self._put(_Failed(exc))
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def _put(self, item: object) -> bool:
        """Hand ``item`` over, waiting for room; False once the publisher has stopped."""
        while not self._stopped.is_set():
            try:
                self._handover.put(item, timeout=_STOP_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False
