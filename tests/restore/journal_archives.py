"""Journal archives written as the design's archive contract says (docs/format.md, "journal"), through the
repository's own segment writer, for the recovery tests: one completed backup per archive run, with the ``journal``
manifest addition, one ``rbak.journal`` quorum queue entry, and records as the archiver writes them (the original
exchange, routing key, properties and headers, CC kept and BCC added as a header).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.codec import BackupProperties, BackupRecord
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE, archive_id
from airflow_rbak.codec.properties import PIKA_NAMES
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter


@dataclass(frozen=True)
class Published:
    """One publish the journal saw: where it went, what it was, and the lower bound of when (``at``, ms)."""

    at: int
    exchange: str
    routing_key: str
    body: bytes
    properties: TypedBasicProperties
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    redelivered: bool = False
    #: The record's ``source_vhost`` when it is not the archive's (a planted record).
    vhost: str | None = None

    def headers(self) -> tuple[tuple[str, H], ...]:
        """The headers as published (CC among them), and BCC as the archiver adds it."""
        extra = ((("CC", H.array([H.long_string(k) for k in self.cc])),) if self.cc else ()) + (
            (("BCC", H.array([H.long_string(k) for k in self.bcc])),) if self.bcc else ())
        return tuple(self.properties.typed_headers or ()) + extra

    def published_properties(self) -> TypedBasicProperties:
        """The properties a publisher sends for this message (its header table with CC and BCC)."""
        values = {name: getattr(self.properties, name) for name in PIKA_NAMES}
        return TypedBasicProperties(**values, typed_headers=self.headers())


@dataclass
class ArchiveSpec:
    """One archive run: its range, its records, and what it says of itself."""

    from_ms: int
    to_ms: int
    records: Sequence[Published]
    gaps: list[dict[str, Any]] = field(default_factory=list)


def write_archive(location: str, vhost: str, spec: ArchiveSpec, previous: str | None, *, backup_id: str | None = None,
                  journal: dict[str, Any] | None = None, created_at: int | None = None) -> str:
    """One archive as a completed backup; returns its id. ``journal`` overrides fields of the addition."""
    backup_id = backup_id or archive_id(vhost, spec.to_ms)
    writer = BackupWriter(open_storage(location), backup_id, source_cluster="rabbit@src")
    if created_at is not None:
        writer.manifest.created_at = created_at
    sink = writer.queue(vhost, JOURNAL_QUEUE, queue_type="quorum")
    for tag, p in enumerate(spec.records, start=1):
        props = BackupProperties.from_values(getattr(p.properties, name) for name in PIKA_NAMES)
        sink.add(BackupRecord(p.body, props, p.headers(), p.exchange, p.routing_key, tag, p.redelivered, p.at,
                              JOURNAL_QUEUE, p.vhost or vhost))
    sink.close()
    writer.manifest.extensions["journal"] = {
        "vhost": vhost, "previous": previous, "from": spec.from_ms, "to": spec.to_ms, "messages": len(spec.records),
        "redelivered": sum(p.redelivered for p in spec.records), "gaps": spec.gaps, "uncovered": [],
        **(journal or {})}
    writer.finish()
    return backup_id


def write_chain(location: str, vhost: str, specs: Sequence[ArchiveSpec]) -> list[str]:
    """Archives chained by ``previous``, in order; their ids."""
    ids: list[str] = []
    for spec in specs:
        ids.append(write_archive(location, vhost, spec, ids[-1] if ids else None))
    return ids
