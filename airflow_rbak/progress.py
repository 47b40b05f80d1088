"""Periodic progress lines for long captures and restores: messages, MB, rate and ETA (no Airflow here).

The capture engine stores its checkpoint after every staged chunk, wherever
checkpoints live (the backup's storage); a reporter thread samples it and
logs one line every ``interval`` seconds, and one more when the work ends,
so a task log shows a long capture moving without the engine knowing about
logs. Restore publishing reports the same way from its confirmed count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from airflow_rbak.display import package_logger

#: (messages, bytes) so far, or None before there is any; bytes may be None where they are not counted (restore).
Sample = Callable[[], "tuple[int, int | None] | None"]


def format_progress(label: str, messages: int, nbytes: int | None, target: int | None, elapsed: float) -> str:
    """``orders: 12,000/20,000 messages, 11.7 MB, 5,300 msg/s, 1.2 MB/s, ETA 2s`` (no MB where bytes are None)."""
    rate = messages / elapsed if elapsed > 0 else 0.0
    line = f"{label}: {messages:,}" + (f"/{target:,}" if target else "") + " messages, "
    if nbytes is None:
        line += f"{rate:,.0f} msg/s"
    else:
        mb = nbytes / 1e6
        line += f"{mb:.1f} MB, {rate:,.0f} msg/s, {mb / elapsed if elapsed > 0 else 0:.1f} MB/s"
    if target and rate > 0 and messages < target:
        line += f", ETA {round((target - messages) / rate)}s"
    return line


class ProgressReporter:
    """Logs ``sample()`` (messages, bytes) every ``interval`` seconds while the ``with`` block runs."""

    def __init__(self, label: str, sample: Sample, target: int | None, *, interval: float = 10.0,
                 logger: Any = None) -> None:
        self.label, self.sample, self.target, self.interval = label, sample, target, interval
        self.log = logger or package_logger(__name__)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"rbak-progress-{label}", daemon=True)
        self._started = 0.0
        self.lines: list[str] = []

    def __enter__(self) -> ProgressReporter:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.report()  # the last line says where the work ended, however short it was

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.report()

    def report(self) -> str | None:
        """Log one line now (sampling errors are ignored: progress must never fail a capture)."""
        try:
            sampled = self.sample()
        except Exception:  # noqa: BLE001
            return None
        if sampled is None:
            return None
        line = format_progress(self.label, sampled[0], sampled[1], self.target, time.monotonic() - self._started)
        self.lines.append(line)
        self.log.info("%s", line)
        return line


class _Progress(Protocol):
    @property
    def staged_records(self) -> int: ...
    @property
    def staged_bytes(self) -> int: ...


class _Checkpoints(Protocol):
    def get(self, backup_id: str, vhost: str, queue: str) -> _Progress | None: ...


def checkpoint_sampler(checkpoints: _Checkpoints, backup_id: str, vhost: str, queue: str) -> Sample:
    """Read a queue's staged records and bytes from its stored capture checkpoint (a capture store's ``get``)."""

    def sample() -> tuple[int, int] | None:
        progress = checkpoints.get(backup_id, vhost, queue)
        return None if progress is None else (int(progress.staged_records), int(progress.staged_bytes))

    return sample
