"""Calendar retention: restic's ``keep_hourly`` … ``keep_yearly`` rules over complete backups (no Airflow here).

The rules mean what restic 0.17's ``forget`` documents, so an operator who knows one knows the other:

- ``keep_hourly N`` (daily, weekly, monthly, yearly alike): walk the complete backups newest first; the
  first backup met in a period (so the newest of that period) is kept for it, until N periods have one.
  Only periods that hold a backup count: a week without backups does not use up a week of ``keep_weekly``.
- Periods are natural calendar periods in the policy's time zone (``UTC`` unless one is configured): an hour
  ``HH:00``–``HH:59``, a day ``00:00``–``23:59``, an ISO 8601 week (Monday to Sunday, numbered by its ISO year,
  as restic's Go ``ISOWeek``), a calendar month, a calendar year. A backup's time is its ``created_at`` (when
  its run started, as a restic snapshot's time is when it started).
- When a rule finds fewer periods than N, the oldest complete backup is kept too ("oldest daily"), as restic
  keeps it since 0.17: a yearly rule started this year still keeps the first backup ever made.

A backup kept by any rule is kept; the others' reasons say why each rule passed it over. Which backups
count (``complete`` only), and what a removal may delete (never a segment a kept chain lists), is
:mod:`airflow_rbak.repository.retention`'s business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_rbak.exceptions import ConfigurationError


def _hour(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H")


def _day(t: datetime) -> str:
    return t.strftime("%Y-%m-%d")


def _week(t: datetime) -> str:
    year, week, _ = t.isocalendar()
    return f"{year}-W{week:02d}"


def _month(t: datetime) -> str:
    return t.strftime("%Y-%m")


def _year(t: datetime) -> str:
    return t.strftime("%Y")


#: The calendar rules in restic's order: (name, the setting that holds N, the period a time falls in).
CALENDAR_RULES: tuple[tuple[str, str, Callable[[datetime], str]], ...] = (
    ("hourly", "keep_hourly", _hour),
    ("daily", "keep_daily", _day),
    ("weekly", "keep_weekly", _week),
    ("monthly", "keep_monthly", _month),
    ("yearly", "keep_yearly", _year),
)


def time_zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``UTC``, ``Europe/Berlin``); a :class:`ConfigurationError` for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ConfigurationError(f"retention timezone {name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None


@dataclass(frozen=True)
class Dated:
    """A complete backup as the calendar rules see it: its id and its time (epoch ms)."""

    backup_id: str
    at_ms: int


@dataclass
class CalendarVerdict:
    """Per backup id: the periods it is kept for (``daily 2026-11-26``), and why each rule passed the rest over."""

    kept_for: dict[str, list[str]]
    passed_over: dict[str, list[str]]


def calendar_verdict(newest_first: Sequence[Dated], counts: dict[str, int | None], zone: ZoneInfo) -> CalendarVerdict:
    """Apply every calendar rule whose count is set in ``counts`` (by setting name) to ``newest_first``."""
    kept_for: dict[str, list[str]] = {b.backup_id: [] for b in newest_first}
    passed_over: dict[str, list[str]] = {b.backup_id: [] for b in newest_first}
    for name, setting, period_of in CALENDAR_RULES:
        wanted = counts.get(setting)
        if not wanted:
            continue
        holder: dict[str, str] = {}  # period -> the backup kept for it
        for backup in newest_first:
            period = period_of(datetime.fromtimestamp(backup.at_ms / 1000, zone))
            if period in holder:
                passed_over[backup.backup_id].append(f"{name} {period} keeps the newer {holder[period]}")
            elif len(holder) < wanted:
                holder[period] = backup.backup_id
                kept_for[backup.backup_id].append(f"{name} {period}")
            else:
                passed_over[backup.backup_id].append(f"{name}: older than the {wanted} newest periods kept")
        oldest = newest_first[-1].backup_id if newest_first else None
        if oldest is not None and len(holder) < wanted and oldest not in holder.values():
            kept_for[oldest].append(f"oldest {name} ({len(holder)} of {wanted} periods have backups)")
    return CalendarVerdict(kept_for, passed_over)
