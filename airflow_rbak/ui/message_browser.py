"""One queue of a backup, page by page: each message's properties, headers and a bounded body preview (no Airflow).

Every byte of a message came from whoever could publish to the queue, so nothing here trusts it: a body is
previewed up to :data:`PREVIEW_BYTES` (the rest is counted, never shown), JSON is pretty-printed only when the whole
body is that small and parses, text is shown only when it is UTF-8, and anything else is a hex dump. The pages
escape what this returns; this module only bounds and classifies it.

A segment is read only when its key is the backup's own and its bytes are the ones its manifest vouches for
(``message_reader.vouched_bytes``); one that is not, or that is damaged inside, is named in the page's ``damaged``
and the reading goes on with the next.
A page starts at a position (segment sequence, record index in it) and reads segments in stored order until it
has ``limit`` matches, has read :data:`SCAN_BUDGET` records or has spent :data:`SCAN_SECONDS`, whichever comes
first, then says where the next page starts: a filter that matches rarely costs each page a bounded read, never
the whole queue.
Bodies are left out (``show_bodies=False``) for users who may not see them; a body filter is then refused, because
its yes/no answers would read the bodies out one guess at a time.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airflow_rbak.codec import BackupManifest, BackupRecord, CodecError, QueueBackup
from airflow_rbak.codec.headers import BYTES, TIMESTAMP, HeaderValue, headers_to_json
from airflow_rbak.codec.segment import iter_records_from
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.message_filter import PARAM_NAMES, FilterError, MessageFilter, header_text
from airflow_rbak.repository.message_reader import SegmentUnreadableError, vouched_bytes
from airflow_rbak.repository.ownership import queue_defects
from airflow_rbak.storage.base import Storage

#: The most bytes of a body a preview shows; the rest is counted ("N more bytes").
PREVIEW_BYTES = 2048
#: The most bytes of a binary body shown as hex (16 to a line).
HEX_BYTES = 512
#: The most characters of one header's value shown.
HEADER_CHARS = 300
#: The most records one page reads looking for matches before it stops and offers the next page ...
SCAN_BUDGET = 20_000
#: ... and the longest it reads (a page should load within about 0.1 s; docs/performance.md has the figures).
SCAN_SECONDS = 0.06
#: The most messages on one page.
MAX_LIMIT = 100
#: Filter params that read the body (refused to a user who may not see bodies).
BODY_FILTERS = ("body_contains", "body_regex")
#: The query's filter fields: MessageFilter's own names, but ``header=name=value`` (repeatable) for ``headers``.
QUERY_FILTERS = tuple(name for name in PARAM_NAMES if name != "headers") + ("header",)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class MessagePageError(RbakError, ValueError):
    """A request for messages that cannot be answered as asked (an unknown queue, a bad position); says why."""


def filter_of(query: list[tuple[str, str]]) -> MessageFilter | None:
    """The filter a query string or the page's form asks for (blank fields left out), or None for none.

    Raises :class:`~airflow_rbak.repository.message_filter.FilterError` naming the field that cannot be used.
    """
    params: dict[str, str] = {}
    headers: dict[str, str] = {}
    for name, value in query:
        if not value.strip():
            continue
        if name == "header":
            key, sep, wanted = value.partition("=")
            if not sep or not key:
                raise FilterError("header", f"{value[:60]!r} is not name=value (x-tenant=eu)")
            headers[key] = wanted
        elif name in params:
            raise FilterError(name, "given twice")
        else:
            params[name] = value
    if not params and not headers:
        return None
    return MessageFilter.from_params({**params, **({"headers": headers} if headers else {})})


@dataclass(frozen=True)
class Position:
    """Where a message is stored: its segment's sequence number and its index among that segment's records."""

    segment: int
    record: int

    @classmethod
    def parse(cls, text: str | None) -> Position | None:
        """``3.12`` (segment 3, record 12); None for none; :class:`MessagePageError` for anything else."""
        if not text:
            return None
        match = re.fullmatch(r"(\d{1,9})\.(\d{1,9})", text)
        if match is None:
            raise MessagePageError(f"at: {text[:40]!r} is not a position (segment.record, e.g. 1.0)")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.segment}.{self.record}"


def _printable_text(text: str) -> str:
    """Text with every control character but newline and tab shown escaped (``\\x1b``), as a terminal would not act on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) <= 0xFF else f"\\u{ord(m[0]):04x}", text)


def _utf8_prefix(body: bytes) -> str | None:
    """The first :data:`PREVIEW_BYTES` of ``body`` as text, or None when it is not UTF-8 (a cut character is allowed)."""
    head = body[:PREVIEW_BYTES]
    for cut in range(4 if len(body) > PREVIEW_BYTES else 1):
        try:
            return head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _hex(body: bytes) -> str:
    lines = []
    for at in range(0, min(len(body), HEX_BYTES), 16):
        chunk = body[at:at + 16]
        shown = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {shown}")
    return "\n".join(lines)


def body_preview(body: bytes, content_type: str | None) -> dict[str, Any]:
    """A body as a page may show it: ``kind`` (empty, json, text, binary), ``preview`` and ``more_bytes`` not shown."""
    if not body:
        return {"kind": "empty", "preview": "", "more_bytes": 0}
    if len(body) <= PREVIEW_BYTES and (body[:1] in (b"{", b"[") or "json" in (content_type or "")):
        try:
            pretty = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
            return {"kind": "json", "preview": _printable_text(pretty), "more_bytes": 0}
        except (ValueError, RecursionError):
            pass  # not JSON after all: shown as text or hex below
    text = _utf8_prefix(body)
    if text is not None and "\x00" not in text:
        return {"kind": "text", "preview": _printable_text(text), "more_bytes": len(body) - len(text.encode())}
    return {"kind": "binary", "preview": _hex(body), "more_bytes": max(0, len(body) - HEX_BYTES)}


def _bounded(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return _printable_text(text if len(text) <= HEADER_CHARS else text[:HEADER_CHARS] + f"… ({len(text) - HEADER_CHARS} more)")


def header_shown(name: str, value: HeaderValue) -> dict[str, str | None]:
    """One header as the filter takes it: ``shown`` is ``x-tenant=eu`` (what the Header field matches), and ``type``
    is said only where it matters: a timestamp, bytes, or a value no text filter matches (a table, an array, void)."""
    text = header_text(value.kind, value.value)
    if text is None:
        return {"shown": _printable_text(f"{name}: ") + _bounded(value.to_json()),
                "type": f"{value.kind}: no header filter matches it"}
    kind = {TIMESTAMP: "timestamp, seconds since the epoch", BYTES: "bytes, shown as UTF-8 text"}.get(value.kind)
    shown = f"{name}={text}"
    if len(shown) > HEADER_CHARS:
        shown = shown[:HEADER_CHARS] + f"… ({len(shown) - HEADER_CHARS} more)"
    return {"shown": _printable_text(shown), "type": kind}


def message_json(record: BackupRecord, position: Position, number: int, show_body: bool) -> dict[str, Any]:
    """One message for the API and the page: where it is, its properties (those set), headers, and body preview."""
    properties = {k: v for k, v in record.properties.to_json().items() if v is not None}
    return {
        "position": str(position), "number": number,
        "exchange": record.exchange, "routing_key": record.routing_key, "redelivered": record.redelivered,
        "backed_up_at": record.backed_up_at, "properties": properties,
        "headers": [[name, _bounded(value)] for name, value in headers_to_json(record.headers)],
        "headers_shown": [header_shown(name, value) for name, value in record.headers],
        "body_bytes": len(record.body),
        "body": body_preview(record.body, record.properties.content_type) if show_body else None,
    }


def queue_of(manifest: BackupManifest, index: int) -> QueueBackup:
    """The manifest's ``index``-th queue (the pages name queues by their place in the manifest)."""
    if not 0 <= index < len(manifest.queues):
        raise MessagePageError(f"queue: this backup has {len(manifest.queues)} queue(s), numbered 0 to "
                               f"{len(manifest.queues) - 1}; there is no queue {index}")
    return manifest.queues[index]


Reader = Iterator[tuple[int, BackupRecord]]
ReaderKey = tuple[str, str, int]


class ResumableReaders:
    """Segment readers left where a page stopped, so that the next page continues where it ended.

    A segment is one compressed frame: reaching its record n means decompressing every record before it, so a
    page deep in a 128 MiB segment would cost each request a read from the segment's start. The reader a page
    stopped is kept under (location, segment, next record), at most ``slots`` of them (each holds its segment's
    compressed bytes and a decompressor's window), and the request for exactly that record takes it back: a reader
    is never shared by two requests.
    """

    def __init__(self, slots: int = 4) -> None:
        self.slots = slots
        self._held: OrderedDict[ReaderKey, Reader] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, key: ReaderKey, reader: Reader) -> None:
        with self._lock:
            self._held[key] = reader
            while len(self._held) > self.slots:
                self._held.popitem(last=False)

    def take(self, key: ReaderKey) -> Reader | None:
        with self._lock:
            return self._held.pop(key, None)


#: The api-server's kept readers (one process serves every user).
READERS = ResumableReaders()


def _records(storage: Storage, manifest: BackupManifest, queue: QueueBackup, start: Position, damaged: list[dict[str, Any]],
             ) -> Iterator[tuple[Position, int, BackupRecord, Position | None, Reader]]:
    """The queue's records from ``start`` on, in stored order: each with its position, its number in the queue
    (from 1), the position after it (None after the last) and the segment reader it came from. Every segment is
    read, whatever a filter's time window: a segment's first and last capture times do not bound its records'
    (a record may be stored out of ``backed_up_at`` order), so passing over one could hide a match. A segment
    that cannot be read as its manifest entry vouches for it (a key outside the backup, a SHA-256 that differs,
    a defect inside) is added to ``damaged`` with why, and the reading goes on with the next one."""
    before = 0
    segments = queue.stored_order()
    foreign = queue_defects(manifest, queue)
    for at, segment in enumerate(segments):
        following = next((Position(s.sequence, 0) for s in segments[at + 1:] if s.record_count), None)
        if segment.sequence < start.segment:
            before += segment.record_count
            continue
        skip = start.record if segment.sequence == start.segment else 0
        key = (storage.url, segment.key, skip)
        shown = skip  # records of this segment read before a defect (on this page or the pages before)
        try:
            if segment.key in foreign:
                raise SegmentUnreadableError(segment.key, foreign[segment.key])
            reader = READERS.take(key) or iter_records_from(vouched_bytes(storage, segment), skip, segment.key)
            for index, record in reader:
                shown = index + 1
                after = Position(segment.sequence, index + 1) if index + 1 < segment.record_count else following
                yield Position(segment.sequence, index), before + index + 1, record, after, reader
        except (SegmentUnreadableError, CodecError) as exc:
            reason = exc.reason if isinstance(exc, SegmentUnreadableError) else str(exc)
            damaged.append({"segment": segment.key, "reason": reason, "records": segment.record_count - shown})
        before += segment.record_count


def message_page(storage: Storage, manifest: BackupManifest, queue_index: int, *, start: Position | None = None,
                 limit: int = 20, message_filter: MessageFilter | None = None,
                 show_bodies: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """One page of a queue's messages from ``start`` (the first stored by default) that ``message_filter`` lets through.

    ``next`` is where the following page starts (None at the queue's end); ``scanned`` counts the records read,
    which stops at :data:`SCAN_BUDGET` or after :data:`SCAN_SECONDS` so that a rare match costs each page a bounded
    read.
    """
    queue = queue_of(manifest, queue_index)
    limit = max(1, min(limit, MAX_LIMIT))
    segments = queue.stored_order()
    start = start or Position(segments[0].sequence if segments else 1, 0)
    found: list[dict[str, Any]] = []
    damaged: list[dict[str, Any]] = []
    scanned, after, until = 0, None, None
    for position, number, record, following, reader in _records(storage, manifest, queue, start, damaged):
        until = until or clock() + SCAN_SECONDS  # from the first record: reaching the start is not the search
        scanned += 1
        if message_filter is None or message_filter.matches(record):
            found.append(message_json(record, position, number, show_bodies))
        if len(found) == limit or scanned == SCAN_BUDGET or (message_filter is not None and clock() > until):
            after = following  # the next page starts there, and continues this reader when it is in this segment
            if following is not None and following.segment == position.segment:
                segment_key = next(s.key for s in queue.segments if s.sequence == position.segment)
                READERS.keep((storage.url, segment_key, following.record), reader)
            break
    return {"queue": {"index": queue_index, "vhost": queue.vhost, "name": queue.name, "queue_type": queue.queue_type,
                      "messages": queue.message_count},
            "start": str(start), "limit": limit, "messages": found, "scanned": scanned, "damaged": damaged,
            "next": None if after is None else str(after), "filter": message_filter.describe() if message_filter else None,
            "bodies": show_bodies}
