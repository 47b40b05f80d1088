"""Headers the broker routes by (``CC``, ``BCC``) never widen a restore: each restored message lands in its own queue.

RabbitMQ's sender-selected distribution routes a published message to every queue its ``CC`` and ``BCC`` headers
name. A backup keeps such headers as the source held them; the restore leaves them out of what it publishes.
"""

from __future__ import annotations

import dataclasses

import pika
import pytest

from airflow_rbak.codec import decode_segment, encode_segment
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.codec.segment import decode_payload, iter_payload
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, read_queue, ready_count

pytestmark = pytest.mark.broker

_STORED_CC = b'["CC",{"Array":[{"LongString":"audit"}]}]'  # the header as the record stores it, byte for byte


def _publish_with_headers(connection, vhost: str, queue: str, count: int, headers: dict) -> None:
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish("", queue, f"{queue}-{i}".encode(), pika.BasicProperties(headers={**headers, "seq": i}))


def _stored_records(location: str, backup_id: str, vhost: str, queue: str) -> list[bytes]:
    """The record JSON of every record the backup holds for ``queue``, as stored."""
    storage = open_storage(location)
    entry = ManifestStore(storage).load(backup_id).queue(vhost, queue)
    assert entry is not None
    found: list[bytes] = []
    for segment in entry.segments:
        header, payload = decode_payload(storage.get(segment.key), segment.key, 64 * 1024**2)
        found += [bytes(raw) for raw in iter_payload(payload, header.record_count, segment.key)]
    return found


@pytest.fixture
def cc_backup(broker, vhost, location):
    """``orders`` and ``audit``, ten messages published to ``orders`` with ``CC: ["audit"]`` (so both hold ten), backed up."""
    declare(broker.connection, vhost, {"orders": "classic", "audit": "classic"})
    _publish_with_headers(broker.connection, vhost, "orders", 10, {"CC": ["audit"]})
    assert ready_count(broker.connection, vhost, "audit") == 10  # the broker acted on CC at the source
    backup(broker.connection, location, "cc-1", vhost)
    return location


@pytest.mark.parametrize("publish_mode", ["queue", "exchange"])
def test_a_cc_header_sends_no_restored_message_to_another_queue(broker, vhost, target_vhost, cc_backup, tmp_path,
                                                                    publish_mode):
    broker.api("PUT", f"vhosts/{target_vhost}")
    if publish_mode == "exchange":  # exchange mode publishes into queues that exist
        declare(broker.connection, target_vhost, {"orders": "classic", "audit": "classic"})
    settings = RestoreRequest(cc_backup, backup_id="cc-1", vhost_map={vhost: target_vhost}, publish_mode=publish_mode,
                              checkpoint_state=str(tmp_path / "r.db"))

    report = RestoreRun(broker.connection, settings).run()

    assert ready_count(broker.connection, target_vhost, "audit") == 10
    assert ready_count(broker.connection, target_vhost, "orders") == 10
    assert report.published == 20 == sum(q["planned"] for q in report.queues)
    restored = read_queue(broker.connection, target_vhost, "orders", "classic", 10)
    assert [m[0] for m in restored] == [f"orders-{i}".encode() for i in range(10)]
    assert all("CC" not in dict(m[2]) for m in restored)  # left out on the wire ...
    assert all(_STORED_CC in raw for raw in _stored_records(cc_backup, "cc-1", vhost, "orders"))  # ... kept in the backup


def _plant_header(location: str, backup_id: str, vhost: str, queue: str, header: tuple) -> None:
    """Add ``header`` to every record of ``queue`` in the backup, and make the manifest agree (a planted backup)."""
    storage = open_storage(location)
    store = ManifestStore(storage)
    manifest = store.load(backup_id)
    entry = manifest.queue(vhost, queue)
    assert entry is not None
    for index, segment in enumerate(entry.segments):
        records = decode_segment(storage.get(segment.key), name=segment.key).records
        planted = encode_segment([dataclasses.replace(r, headers=(*r.headers, header)) for r in records],
                                 compression_from_key(segment.key))
        storage.put(segment.key, planted.data)
        entry.segments[index] = planted.metadata(segment.key, segment.sequence)
    entry.refresh_totals()
    manifest.refresh_totals()
    store.save(manifest)


def test_a_planted_bcc_header_reaches_no_queue_of_the_target(broker, vhost, target_vhost, location, tmp_path):
    declare(broker.connection, vhost, {"orders": "classic"})
    _publish_with_headers(broker.connection, vhost, "orders", 10, {})
    backup(broker.connection, location, "bcc-1", vhost)
    _plant_header(location, "bcc-1", vhost, "orders", ("BCC", H.array([H.long_string("victim")])))
    broker.api("PUT", f"vhosts/{target_vhost}")
    declare(broker.connection, target_vhost, {"victim": "classic"})
    settings = RestoreRequest(location, backup_id="bcc-1", vhost_map={vhost: target_vhost},
                              checkpoint_state=str(tmp_path / "r.db"))

    report = RestoreRun(broker.connection, settings).run()

    assert report.published == 10
    assert ready_count(broker.connection, target_vhost, "orders") == 10
    assert ready_count(broker.connection, target_vhost, "victim") == 0
