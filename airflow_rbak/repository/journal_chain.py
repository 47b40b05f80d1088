"""A vhost's journal archives in a location, as one chain: what they cover, where they have gaps, which cover a window.

Each archive run of the continuous capture (issue 54) writes one ordinary backup whose id is
``journal-<UTC time>-<first 12 hex of sha256(vhost)>`` and whose manifest carries our ``journal`` addition
(docs/format.md): the vhost, the previous archive, the range ``[from, to)`` of publish times it closes, and the gaps
its run found. A location is written by more than this tool, so every manifest is read bounded through the
manifest store, checked as the catalog checks any backup (complete, its objects stored, none of another backup's),
and one bad manifest never hides the others: it becomes a gap in the chain, with its time range and why.

A record's ``backed_up_at`` in an archive is a lower bound of its publish time (the last clock mark before it), so
"every message published in ``[from, to)`` whose trace reached the journal" is in that archive or an earlier one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak.codec import BackupManifest, QueueBackup
from airflow_rbak.codec.journal_layout import ARCHIVE_PREFIX, JOURNAL, JOURNAL_QUEUE, is_archive_id, vhost_tag
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import manifest_status
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.ownership import foreign_objects
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.encrypted import KeyRequiredError

#: Entries of an archive's own ``gaps`` (or ``uncovered``) list read at most; more is a damaged manifest.
MAX_LISTED = 10_000


class JournalManifestError(RbakError):
    """A journal archive's manifest does not say what an archive must (its ``journal`` addition, its one queue)."""


@dataclass(frozen=True)
class JournalGap:
    """A time range ``[from_ms, to_ms)`` in which publishes may be missing from the archives (``to_ms`` None: open)."""

    from_ms: int
    to_ms: int | None
    reason: str

    def overlaps(self, start: int, end: int) -> bool:
        """True when the gap touches ``[start, end)``; a gap of no length at a point inside it counts."""
        stop = self.to_ms if self.to_ms is not None else end
        return self.from_ms < end and (stop > start or (stop == self.from_ms and self.from_ms >= start))

    def to_json(self) -> dict[str, Any]:
        return {"from": self.from_ms, "to": self.to_ms, "reason": self.reason}


@dataclass(frozen=True)
class JournalArchive:
    """One archive of the chain as its manifest says, checked."""

    backup_id: str
    vhost: str
    previous: str | None
    from_ms: int
    to_ms: int
    messages: int
    redelivered: int
    gaps: tuple[JournalGap, ...]
    uncovered: tuple[str, ...]
    created_at: int
    completed_at: int
    entry: QueueBackup = field(repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """The archive as plain JSON, without its segments."""
        return {"backup_id": self.backup_id, "from": self.from_ms, "to": self.to_ms, "messages": self.messages,
                "redelivered": self.redelivered, "gaps": [g.to_json() for g in self.gaps]}


@dataclass(frozen=True)
class JournalChain:
    """A vhost's archives in order, the gaps of the chain, and the archives refused (id, why)."""

    vhost: str
    archives: tuple[JournalArchive, ...]
    gaps: tuple[JournalGap, ...]
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def coverage(self) -> tuple[int, int] | None:
        """``(from, to)``: the first archive's start and the last one's end (None: no archive)."""
        if not self.archives:
            return None
        return self.archives[0].from_ms, self.archives[-1].to_ms

    def gaps_in(self, start: int, end: int) -> list[JournalGap]:
        """The gaps touching ``[start, end)``."""
        return [g for g in self.gaps if g.overlaps(start, end)]

    def covering(self, start: int, end: int) -> list[JournalArchive]:
        """The archives whose range overlaps ``[start, end)``, in chain order."""
        return [a for a in self.archives if a.from_ms < end and a.to_ms > start]

    def to_json(self) -> dict[str, Any]:
        cover = self.coverage
        return {"vhost": self.vhost, "from": cover[0] if cover else None, "to": cover[1] if cover else None,
                "archives": len(self.archives), "gaps": [g.to_json() for g in self.gaps],
                "refused": [{"backup_id": b, "reason": r} for b, r in self.refused]}


def _int(obj: dict[str, Any], name: str, *, nullable: bool = False) -> int | None:
    value = obj.get(name)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise JournalManifestError(f"journal.{name} must be a non-negative integer, got {str(value)[:40]!r}")
    return value


def _gaps(value: Any) -> tuple[JournalGap, ...]:
    if not isinstance(value, list) or len(value) > MAX_LISTED:
        raise JournalManifestError(f"journal.gaps must be a list of at most {MAX_LISTED} objects")
    gaps = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("reason"), str):
            raise JournalManifestError("journal.gaps entries must be objects with from, to and reason")
        start, end = _int(item, "from"), _int(item, "to", nullable=True)
        if end is not None and start is not None and end < start:
            raise JournalManifestError(f"a journal gap ends ({end}) before it starts ({start})")
        gaps.append(JournalGap(int(start or 0), end, item["reason"][:500]))
    return tuple(gaps)


def read_archive(manifest: BackupManifest, vhost: str) -> JournalArchive:
    """The archive a completed manifest describes, or :class:`JournalManifestError` saying what it lacks."""
    addition = manifest.extensions.get(JOURNAL)
    if not isinstance(addition, dict):
        raise JournalManifestError("no `journal` addition: not a journal archive")
    if addition.get("vhost") != vhost:
        raise JournalManifestError(f"its journal names vhost {str(addition.get('vhost'))[:100]!r}, not {vhost!r}")
    if not is_archive_id(manifest.backup_id):
        raise JournalManifestError("its id is not an archive's (journal-<UTC time>-<vhost tag>)")
    if manifest.backup_id.rsplit("-", 1)[-1] != vhost_tag(vhost):
        raise JournalManifestError(f"its id does not end in the tag of vhost {vhost!r} ({vhost_tag(vhost)})")
    previous = addition.get("previous")
    if previous is not None and (not isinstance(previous, str) or not is_archive_id(previous)):
        raise JournalManifestError(f"journal.previous must be a journal archive's id or null, got {str(previous)[:80]!r}")
    start, end = _int(addition, "from"), _int(addition, "to")
    if start is None or end is None or end < start:
        raise JournalManifestError(f"journal.to ({end}) is before journal.from ({start})")
    uncovered = addition.get("uncovered", [])
    if not isinstance(uncovered, list) or len(uncovered) > MAX_LISTED or not all(isinstance(u, str) for u in uncovered):
        raise JournalManifestError("journal.uncovered must be a list of strings")
    if manifest.completed_at is None:
        raise JournalManifestError("did not complete (completed_at is null)")
    if manifest.definitions is not None or len(manifest.queues) != 1:
        raise JournalManifestError("an archive holds no definitions and exactly one queue entry")
    entry = manifest.queues[0]
    if (entry.vhost, entry.name) != (vhost, JOURNAL_QUEUE):
        raise JournalManifestError(f"its queue entry is {entry.vhost[:100]!r}/{entry.name[:100]!r}, not "
                                   f"{vhost!r}/{JOURNAL_QUEUE}")
    foreign = foreign_objects(manifest)
    if foreign:
        raise JournalManifestError(f"names objects that are not its own ({foreign[0][0][:200]!r}: {foreign[0][1]})")
    return JournalArchive(manifest.backup_id, vhost, previous, start, end, int(_int(addition, "messages") or 0),
                          int(_int(addition, "redelivered") or 0), _gaps(addition.get("gaps", [])),
                          tuple(u[:200] for u in uncovered), manifest.created_at, manifest.completed_at, entry)


def journal_chain(storage: Storage, vhost: str, *, now_ms: int | None = None) -> JournalChain:
    """The journal archives of ``vhost`` in ``storage``, ordered and checked (see the module docstring)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stored = {info.key: info.size for info in storage.list(ARCHIVE_PREFIX)}
    tag = vhost_tag(vhost)
    ids = sorted({k.split("/", 1)[0] for k in stored if "/" in k and k.split("/", 1)[0].endswith(f"-{tag}")
                  and is_archive_id(k.split("/", 1)[0])})
    store = ManifestStore(storage)
    archives: list[JournalArchive] = []
    refused: list[tuple[str, str]] = []
    for backup_id in ids:
        try:
            manifest = store.load(backup_id, listed_size=stored.get(manifest_key(backup_id)))
            status, problem = manifest_status(manifest, stored, now_ms)
            if status != "complete":
                raise JournalManifestError(f"{status}: {problem}")
            archives.append(read_archive(manifest, vhost))
        except KeyRequiredError:
            raise
        except RbakError as exc:
            refused.append((backup_id, str(exc)[:500]))
    archives.sort(key=lambda a: (a.from_ms, a.to_ms, a.backup_id))
    return JournalChain(vhost, tuple(archives), tuple(_chain_gaps(archives, dict(refused))), tuple(refused))


def _chain_gaps(archives: list[JournalArchive], refused: dict[str, str]) -> list[JournalGap]:
    """Each archive's own gaps (an open one ends where its archive does) and each broken link between archives."""
    gaps: list[JournalGap] = []
    for before, this in zip([None, *archives], archives):
        if before is not None and (this.previous != before.backup_id or this.from_ms != before.to_ms):
            why = refused.get(this.previous or "")
            link = (f"archive {this.previous} is unreadable ({why})" if why else
                    f"archive {this.previous} is missing" if this.previous and this.previous != before.backup_id else
                    f"{this.backup_id} does not continue {before.backup_id} (from {this.from_ms}, previous to "
                    f"{before.to_ms})")
            low, high = sorted((before.to_ms, this.from_ms))
            gaps.append(JournalGap(low, high, f"the chain is broken between {before.backup_id} and {this.backup_id}: "
                                              f"{link}"))
        elif before is None and this.previous is not None:
            why = refused.get(this.previous)
            gaps.append(JournalGap(this.from_ms, this.from_ms, f"the first archive {this.backup_id} continues "
                                   f"{this.previous}, which is " + (f"unreadable ({why})" if why else "missing")))
        gaps += [JournalGap(g.from_ms, this.to_ms if g.to_ms is None else g.to_ms, f"{this.backup_id}: {g.reason}")
                 for g in this.gaps]
    if archives:
        last = archives[-1]
        # an archive run still going (or stopped before its manifest) is not a gap: its messages were never acked
        after = [(b, r) for b, r in refused.items() if b > last.backup_id and not r.startswith("incomplete")]
        if after:
            gaps.append(JournalGap(last.to_ms, None, f"archives after {last.backup_id} are unreadable: "
                                   + "; ".join(f"{b}: {r}" for b, r in after[:3])))
    return gaps


def journal_vhosts(storage: Storage) -> list[str]:
    """The vhosts whose journals a location holds: per vhost tag, the vhost its newest readable archive names (and
    whose tag it is; a manifest naming a vhost of another tag names nothing here)."""
    stored = {info.key: info.size for info in storage.list(ARCHIVE_PREFIX)}
    by_tag: dict[str, list[str]] = {}
    for backup_id in sorted({k.split("/", 1)[0] for k in stored if "/" in k and is_archive_id(k.split("/", 1)[0])}):
        by_tag.setdefault(backup_id.rsplit("-", 1)[-1], []).append(backup_id)
    store, found = ManifestStore(storage), []
    for tag, ids in sorted(by_tag.items()):
        for backup_id in reversed(ids):
            try:
                addition = store.load(backup_id, listed_size=stored.get(manifest_key(backup_id))).extensions.get(JOURNAL)
            except KeyRequiredError:
                raise
            except RbakError:
                continue
            vhost = addition.get("vhost") if isinstance(addition, dict) else None
            if isinstance(vhost, str) and vhost_tag(vhost) == tag:
                found.append(vhost)
                break
    return sorted(found)


def chain_json(chain: JournalChain) -> dict[str, Any]:
    """The chain and its archives as plain JSON (CLI, view)."""
    return chain.to_json() | {"archive_list": [a.summary() for a in chain.archives]}


__all__ = ["JournalArchive", "JournalChain", "JournalGap", "JournalManifestError", "journal_chain", "journal_vhosts",
           "read_archive"]
