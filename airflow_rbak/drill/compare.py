"""A drilled queue's messages compared with its backup's records: body, every property, every header, in order.

Pure: it takes message views (what a consumer sees of a message, and what a record says it held) and says what
differs, so the rules are tested without a broker. The comparison runs as the messages are read, position by
position, keeping only a digest of each message for the end, when a message found elsewhere than its place is
told apart from one that is missing or was never in the backup. At most :data:`MAX_REPORTED` differences are
described per queue (a damaged backup would otherwise fill the report); every one is counted.

Header tables are compared key by key, whatever the order of their keys: that order is the broker's (RabbitMQ 4.x
delivers every table sorted by key, 3.10 a stream's and a returned quorum message's; tests/broker/behaviour.py), not
the message's. Every key, every value and its wire type must be equal; nested tables are compared the same way, arrays
in order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from airflow_rbak.codec.headers import TABLE, HeaderValue
from airflow_rbak.display import printable

#: Differences described per queue; the rest are only counted.
MAX_REPORTED = 20


@dataclass(frozen=True)
class MessageView:
    """What a consumer sees of one message: its body, the 13 basic properties (by record name, in the table's
    order) and its header table (typed, in wire order)."""

    body: bytes
    properties: tuple[tuple[str, Any], ...]
    headers: tuple[tuple[str, HeaderValue], ...]

    def digest(self) -> bytes:
        """A digest of the whole view: equal views, equal digests (types included: a Short 1 is not a Long 1; the
        order of a table's keys left out, :func:`by_key`)."""
        h = hashlib.sha256(self.body)
        h.update(repr((self.properties, by_key(self.headers))).encode())
        return h.digest()


def by_key(table: tuple[tuple[str, HeaderValue], ...]) -> tuple[tuple[str, HeaderValue], ...]:
    """A header table with its keys in sorted order, nested tables too (a stable sort: repeated keys keep theirs)."""
    return tuple(sorted(((k, _value_by_key(v)) for k, v in table), key=lambda pair: pair[0]))


def _value_by_key(value: HeaderValue) -> HeaderValue:
    if value.kind == TABLE:
        return HeaderValue.table(by_key(value.value))
    if isinstance(value.value, tuple):  # an array: its order is the message's; tables inside it are sorted
        return HeaderValue(value.kind, tuple(_value_by_key(v) if isinstance(v, HeaderValue) else v for v in value.value))
    return value


def differences(expected: MessageView, found: MessageView) -> list[str]:
    """What differs between a record's view and a delivered message's, field by field; empty when equal."""
    out = []
    if expected.body != found.body:
        out.append(f"body differs ({len(expected.body)} bytes in the backup, {len(found.body)} delivered"
                   f"{_first_byte_apart(expected.body, found.body)})")
    for (name, want), (_, got) in zip(expected.properties, found.properties):
        if want != got:
            out.append(f"property {name} differs ({_brief(want)} in the backup, {_brief(got)} delivered)")
    want_headers, got_headers = by_key(expected.headers), by_key(found.headers)
    if want_headers != got_headers:
        out.append(_header_difference(dict(want_headers), dict(got_headers), want_headers, got_headers))
    return out


def _first_byte_apart(a: bytes, b: bytes) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f", first apart at byte {at}"


def _header_difference(want: dict[str, HeaderValue], got: dict[str, HeaderValue],
                       want_pairs: tuple[tuple[str, HeaderValue], ...], got_pairs: tuple[tuple[str, HeaderValue], ...]) -> str:
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    changed = [k for k in want if k in got and want[k] != got[k]]
    parts = [f"header {_brief(k)} missing" for k in missing] + [f"header {_brief(k)} added" for k in extra]
    parts += [f"header {_brief(k)} differs ({_brief(want[k])} in the backup, {_brief(got[k])} delivered)" for k in changed]
    if not parts:  # a repeated key, in another order or number
        parts.append(f"repeated headers differ ({_brief([k for k, _ in want_pairs])} in the backup, "
                     f"{_brief([k for k, _ in got_pairs])} delivered)")
    return "; ".join(parts)


def _brief(value: Any) -> str:
    return printable(repr(value))[:80]


@dataclass
class QueueComparison:
    """The comparison of one queue: counts, and the first :data:`MAX_REPORTED` differences described."""

    vhost: str
    queue: str
    expected: int = 0
    delivered: int = 0
    matched: int = 0
    mismatched: int = 0
    reordered: int = 0
    missing: int = 0
    unexpected: int = 0
    problems: list[str] = field(default_factory=list)
    problems_not_shown: int = 0

    @property
    def passed(self) -> bool:
        return self.expected == self.delivered == self.matched

    def note(self, text: str) -> None:
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(text)
        else:
            self.problems_not_shown += 1

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "passed": self.passed}


def compare_queue(vhost: str, queue: str, expected: Iterable[MessageView], delivered: Iterable[MessageView],
                  ordered: bool = True) -> QueueComparison:
    """Compare in order, reading both sides once: the backup's records must be delivered, each once, in order.

    Each delivered message is matched to the backup's first record of equal view not matched yet. A record matched
    by none is missing; a delivered message that matches none is unexpected, unless the record at its position is
    missing too: then that record was changed, and the fields that differ are named. A matched message delivered
    after one that comes later in the backup is out of order, unless ``ordered`` is False (the restore's plan said
    that the target delivers the queue's messages in another order than the source: :mod:`~airflow_rbak.restore.delivery_order`).
    """
    result = QueueComparison(vhost, queue)
    positions: dict[bytes, list[int]] = {}
    delivered_digests: list[bytes] = []
    details: dict[int, list[str]] = {}
    for position, (want, found) in enumerate(zip_longest(expected, delivered)):
        want_digest = want.digest() if want is not None else None
        found_digest = found.digest() if found is not None else None
        if want_digest is not None:
            result.expected += 1
            positions.setdefault(want_digest, []).append(position)
        if found_digest is not None:
            result.delivered += 1
            delivered_digests.append(found_digest)
        if want is not None and found is not None and want_digest != found_digest and len(details) < MAX_REPORTED:
            details[position] = differences(want, found)
    _explain(result, positions, delivered_digests, details, ordered)
    return result


def _explain(result: QueueComparison, positions: dict[bytes, list[int]], delivered: list[bytes],
             details: dict[int, list[str]], ordered: bool) -> None:
    """Match delivered messages to records; count and name what is out of order, changed, missing or unexpected."""
    unmatched_records = set()
    matched_to: list[int | None] = []
    taken = {digest: 0 for digest in positions}
    for digest in delivered:
        at = positions.get(digest)
        if at is not None and taken[digest] < len(at):
            matched_to.append(at[taken[digest]])
            taken[digest] += 1
        else:
            matched_to.append(None)
    for digest, at in positions.items():
        unmatched_records.update(at[taken[digest]:])
    latest = -1
    for position, record in enumerate(matched_to):
        if record is None:
            if position in unmatched_records:
                unmatched_records.discard(position)
                result.mismatched += 1
                shown = details.get(position) or ["differs from the backup's record"]
                result.note(f"message {position + 1}: " + "; ".join(shown))
            else:
                result.unexpected += 1
                result.note(f"message {position + 1}: delivered, but the backup holds no such record")
        elif ordered and record < latest:
            result.reordered += 1
            result.note(f"message {position + 1}: out of order (it is the backup's record {record + 1}, delivered after "
                        f"record {latest + 1})")
        else:
            result.matched += 1
            latest = max(latest, record)
    for record in sorted(unmatched_records):
        result.missing += 1
        result.note(f"record {record + 1} of the backup: missing (not delivered)")
