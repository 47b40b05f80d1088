"""How times and sizes read for people, the same in ``rbak`` output and the Airflow UI's backups view."""

from __future__ import annotations

import datetime as dt


def when(ms: int | None) -> str:
    """Milliseconds since the epoch as ``2026-11-24 07:06:00 UTC``; ``-`` for none."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def size(n: int) -> str:
    """A byte count in binary units with one decimal: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
