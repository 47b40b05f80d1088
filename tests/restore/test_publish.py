"""Publishing edge cases against the real broker: unroutable records reported, missing exchanges refused,
a rate limit kept, a finished queue not published twice, stream consumer offsets moved."""

from __future__ import annotations

import time

import pika
import pytest

from airflow_rbak.broker import stream_protocol
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import DamagedSegmentsError, PublishError, RestoreRequest, RestoreRun, UnroutableMessagesError
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, publish, read_queue

pytestmark = pytest.mark.broker


@pytest.fixture
def routed_source(broker, vhost, tmp_path):
    """``orders`` filled through ``orders.x``: its records name that exchange and their routing keys."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.queue_declare("orders", durable=True)
        ch.queue_bind("orders", "orders.x", "new")
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish("orders.x", "new", f"o-{i}".encode())
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "pub-1", vhost)
    return location


def test_unroutable_records_are_reported_with_their_positions_not_lost(broker, vhost, target_vhost, routed_source, tmp_path):
    broker.api("PUT", f"vhosts/{target_vhost}")
    with pika.BlockingConnection(broker.connection.pika_parameters(target_vhost)) as conn:
        conn.channel().exchange_declare("orders.x", "direct", durable=True)  # no binding: nothing routes
    settings = dict(storage_url=routed_source, backup_id="pub-1", vhost_map={vhost: target_vhost}, publish_mode="exchange",
                    checkpoint_state=str(tmp_path / "r.db"))

    with pytest.raises(UnroutableMessagesError, match="20 records were returned unroutable"):
        RestoreRun(broker.connection, RestoreRequest(**settings)).run()
    report = RestoreRun(broker.connection, RestoreRequest(**settings, allow_unroutable=True)).run()

    (row,) = report.queues
    assert row["published"] == 0 and row["completed"]  # finished queue: the re-run publishes nothing again
    assert [u["ordinal"] for u in row["unroutable"]] == list(range(20))
    assert {(u["exchange"], u["routing_key"], u["reply"]) for u in row["unroutable"]} == {("orders.x", "new", "312 NO_ROUTE")}
    assert all(u["segment_key"].endswith("segment-0001.zst") for u in row["unroutable"])


def test_a_missing_exchange_is_refused_before_publishing(broker, vhost, target_vhost, routed_source, tmp_path):
    broker.api("PUT", f"vhosts/{target_vhost}")
    settings = RestoreRequest(routed_source, backup_id="pub-1", vhost_map={vhost: target_vhost}, publish_mode="exchange",
                               checkpoint_state=str(tmp_path / "r.db"))

    with pytest.raises(PublishError, match="exchange 'orders.x' does not exist in vhost"):
        RestoreRun(broker.connection, settings).run()


def test_queue_mode_creates_the_queue_and_keeps_the_rate_limit(broker, vhost, routed_source, tmp_path):
    settings = RestoreRequest(routed_source, backup_id="pub-1", queue_map={"orders": "orders-copy"}, max_publish_rate=100,
                               checkpoint_state=str(tmp_path / "r.db"))

    started = time.monotonic()
    report = RestoreRun(broker.connection, settings).run()

    assert time.monotonic() - started >= 0.18  # 20 messages at 100/s
    assert report.queues[0]["created_queue"] and report.published == 20
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders-copy", "classic", 20)] == [f"o-{i}".encode() for i in range(20)]


def test_stream_consumer_offsets_are_moved_to_the_restored_messages(broker, vhost, tmp_path):
    declare(broker.connection, vhost, {"events": "stream"})
    publish(broker.connection, vhost, "events", 0, 30, decimal=False)
    stream_protocol.store_consumer_offset(broker.connection, vhost, "events", "billing", 9)
    stream_protocol.store_consumer_offset(broker.connection, vhost, "events", "audit", 29)
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "off-1", vhost)
    # BackupRun finds named consumers through the management API, i.e. only those connected during the backup;
    # here none is, so the offsets it would have saved are written into the manifest entry as capture writes them.
    store = ManifestStore(open_storage(location))
    manifest.queues[0].extensions["consumer_offsets"] = stream_protocol.query_consumer_offsets(
        broker.connection, vhost, "events", ["billing", "audit"])
    store.save(manifest)
    assert store.load("off-1").queues[0].extensions["consumer_offsets"] == {"billing": 9, "audit": 29}
    declare(broker.connection, vhost, {"events-2": "stream"})
    publish(broker.connection, vhost, "events-2", 100, 5, decimal=False)  # the target already holds offsets 0..4
    settings = RestoreRequest(location, backup_id="off-1", queue_map={"events": "events-2"}, restore_consumer_offsets=True,
                               checkpoint_state=str(tmp_path / "r.db"), on_existing_messages="append")

    report = RestoreRun(broker.connection, settings).run()

    assert report.consumer_offsets == {f"{vhost}/events-2": {"audit": 34, "billing": 14}}
    stored = stream_protocol.query_consumer_offsets(broker.connection, vhost, "events-2", ["billing", "audit"])
    assert stored == {"billing": 14, "audit": 34}


def test_damaged_segments_are_refused_by_name_or_skipped_and_reported(broker, vhost, tmp_path):
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 300)
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "dmg-1", vhost, segment_max_bytes=16 * 1024)
    segments = manifest.queues[0].segments
    assert len(segments) >= 3
    victim = segments[1]
    storage = open_storage(location)
    data = bytearray(storage.get(victim.key))
    data[-20] ^= 0x01
    storage.put(victim.key, bytes(data))
    settings = dict(storage_url=location, backup_id="dmg-1", queue_map={"orders": "orders-r"}, checkpoint_state=str(tmp_path / "r.db"))

    with pytest.raises(DamagedSegmentsError, match=victim.key.split("/")[-1]):
        RestoreRun(broker.connection, RestoreRequest(**settings)).run()
    report = RestoreRun(broker.connection, RestoreRequest(**settings, skip_damaged_segments=True)).run()

    assert [s["key"] for s in report.skipped_segments] == [victim.key]
    assert report.skipped_segments[0]["record_count"] == victim.record_count
    assert report.published == 300 - victim.record_count
    restored = read_queue(broker.connection, vhost, "orders-r", "classic", report.published)
    first = segments[0].record_count
    expected = [i for i in range(300) if not first <= i < first + victim.record_count]
    assert [m[1][7] for m in restored] == [f"m-{i}" for i in expected]
