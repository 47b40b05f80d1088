"""What the Airflow UI's backups view shows, read from storage (manifests only) without Airflow.

The list reuses :func:`~airflow_rbak.repository.catalog.list_backups` (``rbak list``) and a backup's page
reads its manifest through :class:`~airflow_rbak.repository.manifest_store.ManifestStore` (``rbak
describe``): the list and a backup's page read no segment (a queue's messages page does, through
:mod:`~airflow_rbak.ui.message_browser`), and nothing is ever written. A location's listing is kept for
``ttl`` seconds, so paging through hundreds of backups reads their manifests once. Listing a large
location is costly (every object is walked), so a location is listed by one caller at a time, others
waiting for and sharing that listing, and ``refresh`` or an unknown backup id lists it again at most
once per ``min_refresh`` seconds.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from airflow_rbak.codec import BackupManifest
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import BackupSummary, left_out_queues, list_backups
from airflow_rbak.repository.chain import chain_owners
from airflow_rbak.repository.journal_chain import journal_chain, journal_vhosts
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage, StorageError
from airflow_rbak.storage.url import credentials_refusal, holds_credentials
from airflow_rbak.ui.damage import DamageLedger, Finding, damage_of
from airflow_rbak.ui.runs import RunIndex

log = package_logger(__name__)

#: Manifests read at a time (S3 reads are round trips); one retry, so an unreachable location fails soon.
READ_WORKERS = 16
UI_RETRIES = 1
MAX_PAGE = 500
#: The statuses whose manifest was read whole: the page shows what it lists.
READABLE = ("complete", "incomplete", "future", "rebuilt")
#: The statuses a backup must have for the view to offer Restore… and Verify: what it lists is all stored.
ACTIONABLE = ("complete", "rebuilt")


T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
    """One call in progress and what it gave: its result, or the exception its callers re-raise."""

    done: threading.Event = field(default_factory=threading.Event)
    result: T | None = None
    error: BaseException | None = None
    waiting: int = 0


class SingleFlight(Generic[T]):
    """At most one call per key at a time: callers arriving meanwhile wait for it and share its outcome."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._flights: dict[str, _Flight[T]] = {}

    def do(self, key: str, call: Callable[[], T]) -> T:
        """``call()``'s result, from the call in flight for ``key`` if there is one, else from a new call."""
        with self._changed:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
            else:
                flight.waiting += 1
                self._changed.notify_all()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.result  # type: ignore[return-value]  # set before done, when there is no error
        try:
            flight.result = call()
            return flight.result
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._changed:
                del self._flights[key]
            flight.done.set()

    def await_waiting(self, key: str, callers: int, timeout: float) -> bool:
        """Wait until ``callers`` callers wait for ``key``'s call in flight; False at ``timeout`` (for tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: key in self._flights and self._flights[key].waiting >= callers,
                                          timeout)


class LocationNotFoundError(RbakError):
    """The location id names no configured location."""


@dataclass(frozen=True)
class Location:
    """A configured storage location; ``id`` (a hash of the URL) names it in the view's paths.

    A URL that holds credentials is never kept: the location is ``refused``, shown by its place in the
    configuration with the reason, and never read.
    """

    id: str
    url: str
    refused: str | None = None

    @classmethod
    def of(cls, url: str, position: int = 0) -> Location:
        if holds_credentials(url):
            return cls(hashlib.sha256(f"refused-{position}".encode()).hexdigest()[:12],
                       f"(location {position + 1}: refused)", credentials_refusal(url))
        return cls(hashlib.sha256(url.encode()).hexdigest()[:12], url)

    def to_json(self) -> dict[str, str | None]:
        return {"id": self.id, "url": self.url, "refused": self.refused}


def describe_error(exc: BaseException) -> str:
    """One line for a location that cannot be read (storage errors never hold credentials: see storage/url.py)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def backup_row(summary: BackupSummary, location: Location, runs: RunIndex,
               found: list[Finding] | None = None) -> dict[str, Any]:
    """One backup as a row of the list: the catalog's summary, its completeness and its last verify; a backup whose
    manifest reads whole but that a reader found damaged (``damage``, newest first) is listed ``damaged``."""
    last = runs.last_verify(location.url, summary.backup_id)
    row = {**summary.to_json(), "complete": summary.status == "complete",
           "last_verify": last.to_json() if last else None, "damage": []}
    if summary.status in ACTIONABLE:
        damage = damage_of([r.to_json() for r in runs.runs(location.url, summary.backup_id)], found or [])
        if damage:
            row.update(status="damaged", complete=False, damage=damage, problem=damage[0])
    return row


def manifest_detail(manifest: BackupManifest) -> dict[str, Any]:
    """A backup's queues (with their segments and the backups those come from) and definitions counts."""
    d = manifest.definitions
    return {
        "source_cluster": manifest.source_cluster,
        "rabbitmq_version": manifest.rabbitmq_version,
        "backup_tool_version": manifest.backup_tool_version,
        "definitions": None if d is None else {
            "key": d.key, "vhosts": d.vhost_count, "queues": d.queue_count, "exchanges": d.exchange_count,
            "users": d.user_count, "size_bytes": d.size_bytes},
        "queues": [{
            "vhost": q.vhost, "name": q.name, "queue_type": q.queue_type, "messages": q.message_count,
            "first_message_timestamp": q.first_message_timestamp, "last_message_timestamp": q.last_message_timestamp,
            "chain": chain_owners(q),
            "segments": [{"key": s.key, "sequence": s.sequence, "records": s.record_count, "size_bytes": s.size_bytes,
                          "uncompressed_bytes": s.uncompressed_bytes, "first_timestamp": s.first_timestamp,
                          "last_timestamp": s.last_timestamp} for s in q.segments],
        } for q in manifest.queues],
        "left_out": left_out_queues(manifest),
    }


def _outcome(cached: list[BackupSummary] | BaseException) -> list[BackupSummary]:
    if isinstance(cached, BaseException):
        raise cached
    return cached


class BackupCatalog:
    """The backups of every configured location, listed newest first, page by page."""

    def __init__(self, urls: list[str], *, ttl: float = 15.0, min_refresh: float = 5.0,
                 opener: Callable[[str], Storage] = lambda url: open_storage(url, retries=UI_RETRIES),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.locations = [Location.of(url, i) for i, url in enumerate(urls)]
        self.ttl = ttl
        self.min_refresh = min_refresh
        self._opener = opener
        self._clock = clock
        #: Each location's last listing: when it started, and what it found or the error it raised.
        self._cache: dict[str, tuple[float, list[BackupSummary] | BaseException]] = {}
        self._lock = threading.Lock()
        self.listings: SingleFlight[list[BackupSummary]] = SingleFlight()
        #: Each location's journals (:meth:`journals`): when read, and what was found.
        self._journals: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        #: Damage the message browser found in backups whose manifests read whole (damage.py says why kept here).
        self.damage = DamageLedger()

    def location(self, location_id: str) -> Location:
        found = next((loc for loc in self.locations if loc.id == location_id), None)
        if found is None:
            raise LocationNotFoundError(f"no configured location has id {location_id!r}")
        return found

    def summaries(self, location: Location, refresh: bool = False) -> list[BackupSummary]:
        """Every backup of a location, newest first: read again after ``ttl`` seconds, or when asked (``refresh``) and
        the last listing is older than ``min_refresh`` seconds; a listing in flight is shared."""
        if location.refused:
            raise StorageError(location.refused)
        with self._lock:
            cached = self._cache.get(location.id)
        if cached is not None:
            failed = isinstance(cached[1], BaseException)
            fresh_for = self.min_refresh if refresh or failed else max(self.ttl, self.min_refresh)
            if self._clock() - cached[0] < fresh_for:
                return _outcome(cached[1])
        return self.listings.do(location.id, lambda: self._list(location))

    def _list(self, location: Location) -> list[BackupSummary]:
        started = self._clock()
        try:
            found = list(reversed(list_backups(self._opener(location.url), workers=READ_WORKERS)))
        except Exception as exc:  # kept like a listing: a failing location is not asked again at every request
            with self._lock:
                self._cache[location.id] = (started, exc)
            raise
        with self._lock:
            self._cache[location.id] = (started, found)
        return found

    def page(self, location: Location, runs: RunIndex, offset: int = 0, limit: int = 50,
             refresh: bool = False) -> dict[str, Any]:
        """One page of a location's backups; an unreadable location is reported, never raised."""
        offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
        body: dict[str, Any] = {"location": location.to_json(), "offset": offset, "limit": limit}
        try:
            summaries = self.summaries(location, refresh)
        except Exception as exc:  # noqa: BLE001 - one location's fault must not hide the others
            log.warning("rbak UI: cannot list %s: %s", location.url, describe_error(exc))
            return {**body, "total": 0, "backups": [], "error": describe_error(exc)}
        rows = [backup_row(s, location, runs, self.damage.found(location.url, s.backup_id))
                for s in summaries[offset:offset + limit]]
        journals, journals_error = [], None
        if any(s.backup_id.startswith("journal-") for s in summaries):
            try:
                journals = self.journals(location, refresh)
            except Exception as exc:  # noqa: BLE001 - the backups still show
                journals_error = describe_error(exc)
        return {**body, "total": len(summaries), "backups": rows, "error": None, "journals": journals,
                "journals_error": journals_error}

    def journals(self, location: Location, refresh: bool = False) -> list[dict[str, Any]]:
        """Per vhost journaled in the location: the archives' coverage ``(from, to)``, the recovery point (now - to,
        ms) and the chain's gaps (:mod:`~airflow_rbak.repository.journal_chain`); read again as the listing is."""
        with self._lock:
            cached = self._journals.get(location.id)
        if cached is not None and self._clock() - cached[0] < (self.min_refresh if refresh else self.ttl):
            return cached[1]
        started, storage = self._clock(), self.storage(location)
        now_ms = int(time.time() * 1000)
        found = []
        for vhost in journal_vhosts(storage):
            chain = journal_chain(storage, vhost, now_ms=now_ms)
            cover = chain.coverage
            found.append({"vhost": vhost, "from": cover[0] if cover else None, "to": cover[1] if cover else None,
                          "recovery_point_ms": max(now_ms - cover[1], 0) if cover else None,
                          "archives": len(chain.archives), "gaps": [g.to_json() for g in chain.gaps],
                          "refused": [{"backup_id": b, "reason": r} for b, r in chain.refused]})
        with self._lock:
            self._journals[location.id] = (started, found)
        return found

    def detail(self, location: Location, backup_id: str, runs: RunIndex) -> dict[str, Any]:
        """A backup's page: its row, its manifest's queues, segments and definitions, its DAG runs, and the verify run
        still to finish (or the run id the next one gets).

        Raises :class:`~airflow_rbak.repository.manifest_store.ManifestNotFoundError` (or another storage
        error) when the manifest cannot be read; the row still comes from the listing.
        """
        summary = self.summary(location, backup_id)
        pending = runs.pending_verify(location.url, backup_id)
        row = backup_row(summary, location, runs, self.damage.found(location.url, backup_id))
        body: dict[str, Any] = {"location": location.to_json(), "backup": row,
                "runs": {kind: [r.to_json() for r in runs.runs(location.url, backup_id, name)]
                         for kind, name in (("made", "backup"), ("verified", "verify"), ("restored", "restore"))},
                "verify": {"pending": pending.to_json() if pending else None,
                           "next_run_id": runs.next_verify_run_id(location.id, location.url, backup_id)}}
        if summary.status in READABLE:  # found damaged by a reader: its manifest still reads whole
            body.update(manifest_detail(self.manifest(location, backup_id)))
        elif summary.status == "damaged":  # its manifest may still read (an object it lists is missing): show it
            try:
                body.update(manifest_detail(self.manifest(location, backup_id)))
            except Exception as exc:  # noqa: BLE001 - what cannot be shown is said, with why
                body["hidden"] = f"its manifest cannot be read ({describe_error(exc)})"
        else:
            body["hidden"] = f"it has no manifest ({summary.problem or summary.status})"
        return body

    def summary(self, location: Location, backup_id: str) -> BackupSummary:
        """The listing's summary of one backup (listed again once when the id is not there yet)."""
        found = next((s for s in self.summaries(location) if s.backup_id == backup_id), None)
        if found is None:
            found = next((s for s in self.summaries(location, refresh=True) if s.backup_id == backup_id), None)
        if found is None:
            raise LocationNotFoundError(f"{location.url}: no backup {backup_id!r}")
        return found

    def storage(self, location: Location) -> Storage:
        """The location's storage, opened for reading (a refused location never is)."""
        if location.refused:
            raise StorageError(location.refused)
        return self._opener(location.url)

    def manifest(self, location: Location, backup_id: str) -> BackupManifest:
        """A backup's manifest as stored (raises the store's typed errors)."""
        return ManifestStore(self.storage(location)).load(backup_id)
