"""What the reliability tests compare against: the published messages, a backup's records, a clear failure."""

from __future__ import annotations

from airflow_rbak.codec.segment import iter_records
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import Storage
from tests.broker.record_reference import properties_from_record
from tests.restore.helpers import BROKER_HEADERS, body_of, message_view, props_of


def published(count: int, size: int = 300, persistent: bool = False) -> list[tuple]:
    """Messages ``0..count-1`` as a consumer sees them: body, every property, typed headers."""
    return [message_view(props_of(i, persistent=persistent), body_of(i, size)) for i in range(count)]


def without_broker_headers(views: list[tuple]) -> tuple[list[tuple], list[int]]:
    """Split views read with ``broker_headers=True`` into the plain views and each one's ``x-delivery-count``."""
    plain, counts = [], []
    for body, props, headers in views:
        plain.append((body, props, tuple(h for h in headers if h[0] not in BROKER_HEADERS)))
        counts.append(next((int(v.value) for k, v in headers if k == "x-delivery-count"), 0))
    return plain, counts


def header_order_free(views: list[tuple]) -> list[tuple]:
    """Views with each header table sorted by key: a quorum queue (3.10) re-encodes a returned message's
    headers sorted by key, so after any return only the set of headers is the publisher's."""
    return [(body, props, tuple(sorted(headers, key=lambda h: h[0]))) for body, props, headers in views]


def backed_up(storage: Storage, backup_id: str, vhost: str, queue: str) -> list[tuple]:
    """The records of one queue in a completed backup's final segments, as views, in backup order."""
    manifest = ManifestStore(storage).load(backup_id)
    assert manifest.completed_at is not None, f"backup {backup_id} is not complete"
    entry = manifest.queue(vhost, queue)
    assert entry is not None, f"backup {backup_id} has no queue {vhost}/{queue}"
    views = []
    for segment in entry.segments:
        for record in iter_records(storage.get(segment.key), segment.key):
            views.append(message_view(properties_from_record(record), record.body))
    assert len(views) == entry.message_count
    return views


def assert_clear_failure(exc: BaseException, kind: type[RbakError], *says: str) -> None:
    """A typed error with a one-line message saying what to do; no traceback text, no password."""
    message = str(exc)
    assert isinstance(exc, kind), f"{type(exc).__name__}: {message}"
    assert "\n" not in message and "Traceback" not in message and "guest:guest" not in message, message
    for text in says:
        assert text in message, message
