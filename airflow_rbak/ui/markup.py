"""Untrusted text and times as the view's HTML shows them (every page's helpers)."""

from __future__ import annotations

from html import escape
from typing import Any

from airflow_rbak.display import printable, when


def text(value: object) -> str:
    """Untrusted text for HTML: control characters shown escaped (as on a terminal), then HTML-escaped."""
    return escape(printable(value))


def date(ms: Any) -> str:
    """A time to the minute, the seconds in its title: on one line where it fits, else the day over the time (never
    drawn over the next column)."""
    full = when(ms)
    if full[:4].isdigit() and full.endswith(" UTC"):
        day, _, minute = full[:16].partition(" ")
        return f'<span class="date" title="{text(full)}"><span>{text(day)}</span> <span>{text(minute)}</span></span>'
    return f'<span class="date" title="{text(full)}">{text(full)}</span>'
