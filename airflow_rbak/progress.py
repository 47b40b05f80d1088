"""Periodic progress lines for long captures: messages, MB, rate and ETA (no Airflow here).

The capture engine records its progress in the checkpoint database after
every staged chunk; a reporter thread samples it and logs one line every
``interval`` seconds, so a task log shows a long capture moving without the
engine knowing about logs.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

Sample = Callable[[], "tuple[int, int] | None"]


def format_progress(label: str, messages: int, nbytes: int, target: int | None, elapsed: float) -> str:
    """``orders: 12,000/20,000 messages, 11.7 MB, 5,300 msg/s, 1.2 MB/s, ETA 2s``."""
    rate = messages / elapsed if elapsed > 0 else 0.0
    mb = nbytes / 1e6
    line = f"{label}: {messages:,}" + (f"/{target:,}" if target else "") + f" messages, {mb:.1f} MB, "
    line += f"{rate:,.0f} msg/s, {mb / elapsed if elapsed > 0 else 0:.1f} MB/s"
    if target and rate > 0 and messages < target:
        line += f", ETA {round((target - messages) / rate)}s"
    return line


class ProgressReporter:
    """Logs ``sample()`` (messages, bytes) every ``interval`` seconds while the ``with`` block runs."""

    def __init__(self, label: str, sample: Sample, target: int | None, *, interval: float = 10.0,
                 logger: logging.Logger | None = None) -> None:
        self.label, self.sample, self.target, self.interval = label, sample, target, interval
        self.log = logger or logging.getLogger(__name__)
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


def checkpoint_sampler(db_path: str | Path, backup_id: str, vhost: str, queue: str) -> Sample:
    """Read a queue's staged records and bytes from the capture's checkpoint database (read-only)."""

    def sample() -> tuple[int, int] | None:
        if not Path(db_path).exists():
            return None
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
            row = db.execute(
                "SELECT staged_records, staged_bytes FROM queue_progress WHERE backup_id=? AND vhost=? AND queue=?",
                (backup_id, vhost, queue),
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    return sample
