"""The same filter over every complete backup of a location: each matching message once, with every backup
that holds it.

Which backups: the location's complete backups (:func:`~.catalog.list_backups`), oldest first, all of them or a
range of ids or of creation times; every other backup is named with its status and reason, never read.

Which messages are "the same": a queue backed up twice holds the same message twice, with a different capture
time, delivery tag and redelivered flag. A message's identity is its vhost and queue, the fingerprint of its
record without that delivery state (:func:`~airflow_rbak.codec.record_identity.fingerprint`: body, properties,
headers, exchange, routing key), and its occurrence among the matching records of that queue with the same
fingerprint in one backup (the first, the second, ...): two identical messages in one queue stay two messages,
each found in every backup that holds both.

A search only reads: nothing is written to the location (the Spark job writes its result elsewhere).

Memory: the first ``limit`` distinct messages are kept, each with one entry per backup holding it; past the
limit, matching records are only counted (``more_records``), so a search that matches everything costs no more
memory than one that matches ``limit``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.record_identity import fingerprint
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.catalog import BackupSummary, list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.message_reader import DamagedSegment, StoredMessage, StoredPlace, read_messages
from airflow_rbak.storage.base import Storage

#: How many distinct messages a search lists unless told otherwise.
DEFAULT_SEARCH_LIMIT = 100
#: How many characters of a body a search result shows.
PREVIEW_CHARS = 64


@dataclass(frozen=True)
class BackupRange:
    """Which backups to search: ids from ``from_id`` to ``to_id`` (in creation order, both included), or those
    created from ``since`` to ``until`` (epoch ms, both included); nothing set: every complete backup."""

    from_id: str | None = None
    to_id: str | None = None
    since: int | None = None
    until: int | None = None

    def __post_init__(self) -> None:
        if (self.from_id or self.to_id) and (self.since is not None or self.until is not None):
            raise ConfigurationError("give a range of backup ids or of creation dates, not both")

    def select(self, summaries: Sequence[BackupSummary]) -> tuple[list[BackupSummary], list[BackupSummary]]:
        """(the complete backups in range, oldest first; the backups in range that are not complete)."""
        ids = [s.backup_id for s in summaries]
        for name, value in (("from_id", self.from_id), ("to_id", self.to_id)):
            if value and value not in ids:
                raise ConfigurationError(f"{name}: no backup {value!r} in this location")
        start = ids.index(self.from_id) if self.from_id else 0
        end = ids.index(self.to_id) if self.to_id else len(ids) - 1
        if start > end:
            raise ConfigurationError(f"from_id {self.from_id!r} was created after to_id {self.to_id!r}")
        chosen = [s for s in summaries[start:end + 1] if self._in_window(s)]
        return [s for s in chosen if s.status == "complete"], [s for s in chosen if s.status != "complete"]

    def _in_window(self, summary: BackupSummary) -> bool:
        if self.since is None and self.until is None:
            return True
        created = summary.created_at
        return created is not None and (self.since is None or created >= self.since) and (
            self.until is None or created <= self.until)


@dataclass(frozen=True)
class Found(StoredPlace):
    """One matching record as a search reports it: where it is stored, and what a person recognises it by."""

    fingerprint: str
    backed_up_at: int
    summary: dict[str, Any]

    @classmethod
    def of(cls, message: StoredMessage) -> Found:
        r = message.record
        body = r.body
        summary = {
            "message_id": r.properties.message_id, "correlation_id": r.properties.correlation_id,
            "content_type": r.properties.content_type, "exchange": r.exchange, "routing_key": r.routing_key,
            "body_size": len(body), "body_preview": preview(body, PREVIEW_CHARS),
        }
        place = {f.name: getattr(message, f.name) for f in fields(StoredPlace)}
        return cls(**place, fingerprint=fingerprint(r), backed_up_at=r.backed_up_at, summary=summary)

    def place(self) -> dict[str, Any]:
        return {"backup_id": self.backup_id, "segment": self.segment, "sequence": self.sequence, "index": self.index,
                "position": self.position, "backed_up_at": self.backed_up_at}

    def to_json(self) -> dict[str, Any]:
        return {**self.place(), "vhost": self.vhost, "queue": self.queue, "fingerprint": self.fingerprint,
                "summary": self.summary}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Found:
        return cls(**obj)


@dataclass
class Hit:
    """One distinct matching message: what it is (its first occurrence) and every backup that holds it."""

    first: Found
    held_by: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        f = self.first
        return {"vhost": f.vhost, "queue": f.queue, "fingerprint": f.fingerprint, **f.summary,
                "backups": [h["backup_id"] for h in self.held_by], "held_by": self.held_by}


@dataclass
class SearchResult:
    """What a search found: the distinct messages (at most ``limit``) and what it could not read or did not search."""

    filter: str
    limit: int
    backups_searched: list[str] = field(default_factory=list)
    backups_skipped: list[dict[str, Any]] = field(default_factory=list)
    hits: dict[tuple[str, str, str, int], Hit] = field(default_factory=dict)
    matched_records: int = 0
    more_records: int = 0
    damaged: list[DamagedSegment] = field(default_factory=list)
    placement: str = "process"
    _occurrences: Counter[tuple[str, str, str, str]] = field(default_factory=Counter, repr=False)

    def add(self, found: Found) -> None:
        """Count one matching record, fed in stored order (backups oldest first, then manifest order)."""
        self.matched_records += 1
        occurrence_key = (found.backup_id, found.vhost, found.queue, found.fingerprint)
        self._occurrences[occurrence_key] += 1
        identity = (found.vhost, found.queue, found.fingerprint, self._occurrences[occurrence_key])
        hit = self.hits.get(identity)
        if hit is None:
            if len(self.hits) >= self.limit:
                self.more_records += 1
                return
            hit = self.hits[identity] = Hit(found)
        hit.held_by.append(found.place())

    @property
    def ok(self) -> bool:
        return not self.damaged

    def to_json(self) -> dict[str, Any]:
        return {
            "filter": self.filter, "limit": self.limit, "placement": self.placement,
            "backups_searched": self.backups_searched, "backups_skipped": self.backups_skipped,
            "distinct_messages": len(self.hits), "matched_records": self.matched_records,
            "more_records": self.more_records,
            "damaged_segments": [{"backup_id": d.backup_id, "vhost": d.vhost, "queue": d.queue, "segment": d.segment,
                                  "reason": d.reason, "records_read": d.records_read} for d in self.damaged],
            "ok": self.ok,
        }


def preview(body: bytes, chars: int) -> str:
    """The start of a body for one line: its text when it is UTF-8, else ``hex:`` and its first bytes."""
    head = body[: chars * 4]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(head) == len(body) or exc.start < len(head) - 3:  # bytes that are not UTF-8, not a character cut short
            return "hex:" + body[: chars // 2].hex() + ("…" if len(body) > chars // 2 else "")
        text = head[: exc.start].decode("utf-8")
    return _cut(text, chars) if len(head) == len(body) else _cut(text + "…", chars)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def plan_search(storage: Storage, scope: BackupRange) -> tuple[list[BackupSummary], list[dict[str, Any]]]:
    """The complete backups to search, oldest first, and each other backup in range with its status and reason."""
    chosen, others = scope.select(list_backups(storage))
    skipped = [{"backup_id": s.backup_id, "status": s.status, "problem": s.problem} for s in others]
    return chosen, skipped


def search_backups(
    storage: Storage, backups: Iterable[str], message_filter: MessageFilter, *, limit: int = DEFAULT_SEARCH_LIMIT,
    cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES, result: SearchResult | None = None,
) -> SearchResult:
    """Search the named backups in this process, in the order given; a backup whose manifest cannot be read is
    named among the skipped and the others are searched."""
    result = result or SearchResult(message_filter.describe(), limit)
    store = ManifestStore(storage)
    for backup_id in backups:
        try:
            manifest = store.load(backup_id)
        except RbakError as exc:
            result.backups_skipped.append({"backup_id": backup_id, "status": "damaged", "problem": str(exc)})
            continue
        result.backups_searched.append(backup_id)
        for item in read_messages(storage, manifest, message_filter=message_filter, cap=cap):
            if isinstance(item, DamagedSegment):
                result.damaged.append(item)
            else:
                result.add(Found.of(item))
    return result
