"""Which records of a backup a selective restore publishes: message filters, chosen positions, or both.

A restore may take a filter (``select``: the message filter ``rbak messages``
and the backup's page use, :class:`~airflow_rbak.repository.message_filter.MessageFilter`)
and/or positions chosen from those listings (``positions``: ``{"vhost/queue":
[0, 17, ...]}``). A position is the 0-based index of a record in its queue's
stored order in that backup: segments in sequence order, records in segment
order (a stream's chained segments first, as the plan reads them), damaged
segments counted too, so a position never moves. With positions, only the
queues they name are restored; a filter and the time window narrow further.

The plan resolves the selection once, record by record, against the bytes it
verified, into sorted ranges of positions per queue (:class:`SelectionScan`);
publishing only reads those ranges. So what the approver saw is exactly what is
published, even for a filter whose matching is bounded in time, and a resumed
run counts the same positions: the checkpoint's label carries a digest of them
(:func:`checkpoint_label`). A shape that cannot be right (a position below 0,
a queue named twice) is refused when the request is made; a queue the backup
does not hold or a position past its end is refused by the plan, before
anything is read from or written to the target.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.restore.dead_letters import DeathRoutes

#: The most positions a request may choose (the approval lists them by count, the plan carries them as ranges).
MAX_CHOSEN_POSITIONS = 100_000
#: The most ranges of positions a plan carries over all its queues: a filter matching more scattered records is
#: refused (the plan travels as XCom); narrow it, or use a time window.
MAX_SELECTED_RANGES = 200_000
#: Matches a plan shows per queue (what a dry run shows before anything is published).
SHOWN_MATCHES = 10


class SelectionError(ConfigurationError):
    """A selection that cannot be restored: a malformed shape, a queue the backup does not hold, a position past its
    end. Raised before anything is read from or written to the target."""


def parse_positions(value: Any) -> Mapping[str, tuple[int, ...]]:
    """``{"vhost/queue": [positions]}`` as sorted, distinct positions per queue; refuses any other shape."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise SelectionError('positions must map "vhost/queue" to a list of positions, e.g. {"prod/orders": [0, 17]}')
    found: dict[str, tuple[int, ...]] = {}
    total = 0
    for key, items in value.items():
        if not isinstance(key, str) or "/" not in key or len(key) > 600:
            raise SelectionError(f'positions: {key!r:.80} is not "vhost/queue" (the names as the backup lists them)')
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise SelectionError(f"positions of {key!r}: expected a list of positions, got {type(items).__name__}")
        items = list(items)
        total += len(items)
        if total > MAX_CHOSEN_POSITIONS:
            raise SelectionError(f"positions: more than {MAX_CHOSEN_POSITIONS:,} chosen; use a filter (select) instead")
        bad = [p for p in items if isinstance(p, bool) or not isinstance(p, int) or p < 0]
        if bad:
            raise SelectionError(f"positions of {key!r}: {bad[0]!r:.40} is not a position (an integer from 0)")
        if not items:
            raise SelectionError(f"positions of {key!r}: the list is empty; leave the queue out instead")
        found[key] = tuple(sorted(set(items)))
    return MappingProxyType(found)


def positions_label(positions: Mapping[str, tuple[int, ...]]) -> str:
    """The chosen positions as the plan names them: how many, in how many queues."""
    return f"{sum(len(p) for p in positions.values()):,} chosen positions in {len(positions)} queues"


def describe(message_filter: MessageFilter | None, positions: Mapping[str, tuple[int, ...]]) -> str | None:
    """The whole selection in one line (None: no selection, every record of the window)."""
    parts = ([f"filter {message_filter.describe()}"] if message_filter is not None else []) + (
        [positions_label(positions)] if positions else [])
    return "; ".join(parts) or None


def chosen_for(positions: Mapping[str, tuple[int, ...]],
               queues: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, ...]]:
    """Each key of ``positions`` matched to the one queue of the backup (vhost, name) it names; refuses a key that
    names none of them, or more than one (a vhost or queue name holding ``/`` can make two readings)."""
    by_label: dict[str, list[tuple[str, str]]] = {}
    for vhost, name in queues:
        by_label.setdefault(f"{vhost}/{name}", []).append((vhost, name))
    out = {}
    for key, chosen in positions.items():
        found = by_label.get(key, [])
        if not found:
            raise SelectionError(f"positions name queue {key!r}, which this restore does not select from the backup "
                                 "(check vhosts and queues, and the name as `rbak messages` shows it); nothing was "
                                 "published")
        if len(found) > 1:
            raise SelectionError(f"positions name {key!r}, which reads as more than one queue of the backup "
                                 f"({', '.join(f'{v!r}/{q!r}' for v, q in found)}); nothing was published")
        out[found[0]] = chosen
    return out


def check_in_range(label: str, chosen: tuple[int, ...], total: int, damaged: Iterable[tuple[int, int]]) -> None:
    """Refuse a chosen position past the queue's last record or inside a damaged segment left out of the plan."""
    if chosen and chosen[-1] >= total:
        past = [p for p in chosen if p >= total]
        raise SelectionError(f"positions {past[:5]} of {label!r} are past its last record (the backup holds {total} "
                             f"records, positions 0..{total - 1}); nothing was published")
    for first, end in damaged:
        inside = [p for p in chosen if first <= p < end]
        if inside:
            raise SelectionError(f"positions {inside[:5]} of {label!r} lie in a damaged segment the plan skips "
                                 f"(positions {first}..{end - 1}); nothing was published")


@dataclass
class SelectionScan:
    """One queue's selection as the plan reads its records: which positions are chosen and what matched."""

    message_filter: MessageFilter | None
    chosen: tuple[int, ...] | None
    ranges: list[list[int]] = field(default_factory=list)
    first_matches: list[dict[str, Any]] = field(default_factory=list)

    def wants_segment(self, first: int, count: int) -> bool:
        """False when no chosen position lies in ``first .. first+count-1`` (its records need not be read)."""
        if self.chosen is None:
            return True
        at = bisect.bisect_left(self.chosen, first)
        return at < len(self.chosen) and self.chosen[at] < first + count

    def wants(self, position: int, record: Any) -> bool:
        """True when the record at ``position`` is selected (the window is the caller's)."""
        if self.chosen is not None:
            at = bisect.bisect_left(self.chosen, position)
            if at == len(self.chosen) or self.chosen[at] != position:
                return False
        return self.message_filter is None or bool(self.message_filter.matches(record))

    def add(self, position: int, record: Any) -> None:
        """Remember a selected record: its position (as ranges) and, for the first few, what identifies it."""
        if self.ranges and self.ranges[-1][1] == position:
            self.ranges[-1][1] = position + 1
        else:
            check_ranges(len(self.ranges) + 1)  # as it grows: a plan never holds more than it may carry
            self.ranges.append([position, position + 1])
        if len(self.first_matches) < SHOWN_MATCHES:
            props = record.properties
            self.first_matches.append({
                "position": position, "message_id": props.message_id, "correlation_id": props.correlation_id,
                "exchange": record.exchange, "routing_key": record.routing_key, "timestamp": props.timestamp,
                "backed_up_at": record.backed_up_at, "body_bytes": len(record.body)})


@dataclass
class Visit:
    """What a plan does with each record of a segment beyond the window: the selection and the replay routes."""

    first_ordinal: int
    scan: SelectionScan | None = None
    routes: DeathRoutes | None = None

    @property
    def reads_records(self) -> bool:
        return self.scan is not None or self.routes is not None

    def wants_segment(self, count: int) -> bool:
        return self.scan is None or self.scan.wants_segment(self.first_ordinal, count)

    def take(self, index: int, record: Any) -> bool:
        """True when the record at ``index`` of the segment is selected; remembers it."""
        position = self.first_ordinal + index
        if self.scan is not None:
            if not self.scan.wants(position, record):
                return False
            self.scan.add(position, record)
        if self.routes is not None:
            self.routes.add(position, record)
        return True


def check_ranges(ranges: int) -> None:
    """Refuse a plan whose selection is more scattered runs of positions than it can carry (it travels as XCom)."""
    if ranges > MAX_SELECTED_RANGES:
        raise SelectionError(
            f"the selection matched records in {ranges:,} separate runs of positions, more than a plan carries "
            f"({MAX_SELECTED_RANGES:,}); narrow the filter, or add a time window. Nothing was published")


def spans(ordered: Iterable[Any], keys: set[str]) -> list[tuple[int, int]]:
    """The positions ``[first, end)`` of the segments named in ``keys``, of a queue's segments in stored order."""
    out, position = [], 0
    for meta in ordered:
        if meta.key in keys:
            out.append((position, position + meta.record_count))
        position += meta.record_count
    return out


def selected_large(large: Iterable[tuple[str, int, int]], first: Mapping[str, int],
                   ranges: Iterable[Iterable[int]] | None) -> tuple[tuple[str, int, int], ...]:
    """The large records (segment key, index, size) a plan publishes: in its segments (``first``: each one's first
    position) and, for a selective restore, selected."""
    chosen = None if ranges is None else Ranges(ranges)
    return tuple(m for m in large if m[0] in first and (chosen is None or first[m[0]] + m[1] in chosen))


class Ranges:
    """Membership in sorted half-open ranges of positions, for the publish step."""

    def __init__(self, ranges: Iterable[Iterable[int]]) -> None:
        pairs = [tuple(r) for r in ranges]
        self.starts = [int(first) for first, _ in pairs]
        self.ends = [int(end) for _, end in pairs]

    def __contains__(self, position: int) -> bool:
        at = bisect.bisect_right(self.starts, position) - 1
        return at >= 0 and position < self.ends[at]


def checkpoint_label(ranges: Iterable[Iterable[int]] | None, replay: bool) -> str:
    """What a queue's checkpoint label adds for a selection: a digest of its positions (and the replay), so a
    resumed run with another selection is refused instead of counting other positions; empty without one."""
    if ranges is None and not replay:
        return ""
    digest = hashlib.sha256(orjson.dumps([list(r) for r in ranges or ()])).hexdigest()[:16] if ranges is not None else "all"
    return f" selected:{digest}" + (" replay" if replay else "")
