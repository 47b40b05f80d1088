"""How a task's own segment work overlaps with itself: each full segment compresses on one thread while the next
one fills (``SegmentWriter.seal_all`` with a pool), and each stored segment is checked on another while the
next is encoded (:class:`CheckBehind`).

A queue's segments are compressed one whole payload at a time (the format's one frame per segment), so in one
thread a second core would idle while zstd runs. zstd, SHA-256, CRC-32 and file and socket I/O release the GIL,
so those threads use it. The bytes, the keys and the checks are the same as when each step runs after the
other; only the wall time differs (docs/performance.md), at the cost of a second payload buffer.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from airflow_rbak.codec import SegmentMetadata
from airflow_rbak.repository.segment_check import check_segment
from airflow_rbak.storage.base import Storage


class CheckBehind:
    """Deep checks of stored segments on one thread, in the order they were stored, while encoding goes on."""

    def __init__(self, storage: Storage, cap: int) -> None:
        self.storage, self.cap = storage, cap
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rbak-check")
        self._pending: list[Future[dict[str, Any]]] = []

    def __enter__(self) -> CheckBehind:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def stored(self, vhost: str, queue: str, segment: dict[str, Any]) -> None:
        """A segment was just stored: check it as ``rbak validate --deep`` would."""
        meta = SegmentMetadata.from_json(segment)
        self._pending.append(self._pool.submit(lambda: check_segment(self.storage, vhost, queue, meta, self.cap).to_json()))

    def results(self) -> list[dict[str, Any]]:
        """Every check's result, in storing order (waits for those still running)."""
        return [future.result() for future in self._pending]
