"""A whole backup against the real broker: every queue type, nothing disturbed, every byte kept."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pika
import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.broker.messages import long_string_json
from tests.codec.independent_reader import read_segment

pytestmark = pytest.mark.broker

QUEUES = {"orders": ("classic", 300), "payments": ("quorum", 200), "events": ("stream", 150), "empty": ("classic", 0),
          "eu/returns": ("classic", 25)}


def message(queue: str, i: int) -> tuple[bytes, pika.BasicProperties]:
    """Message ``i`` of a queue: varied bodies (empty, binary, JSON) and every common property and header type."""
    body = b"" if i % 50 == 0 else (bytes(range(256)) * (i % 5 + 1) if i % 7 == 0 else f'{{"q":"{queue}","i":{i}}}'.encode())
    headers = {"x-int": i, "x-str": f"é-{i}", "x-bool": i % 2 == 0, "x-bytes": bytes([i % 256, 0]),
               "x-none": None, "x-table": {"nested": [i, "two", {"deep": True}]},
               "x-when": dt.datetime(2026, 11, 22, 1, 2, 3)}
    props = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2 if i % 3 else 1, priority=i % 10,
        correlation_id=f"c-{i}", reply_to="replies", expiration="600000" if queue != "events" else None,
        message_id=f"{queue}-{i}", timestamp=1_700_000_000 + i, type="created", user_id="guest", app_id="tests",
        headers=headers,
    )
    return body, props


def expected_json(queue: str, i: int, behaviour: Behaviour | None = None) -> tuple:
    """What the record of message ``i`` must hold, written from the spec's variants, not from our mapping code; for
    the stream, as the broker's version delivers it (``behaviour``, tests/broker/behaviour.py; 3.10 when None)."""
    body, p = message(queue, i)
    headers = [["x-int", {"Long": i}], ["x-str", {"LongString": f"é-{i}"}], ["x-bool", {"Bool": i % 2 == 0}],
               ["x-bytes", {"Bytes": [i % 256, 0]}], ["x-none", "Void"],
               ["x-table", {"Table": [["nested", {"Array": [{"Long": i}, {"LongString": "two"}, {"Table": [["deep", {"Bool": True}]]}]}]]}],
               ["x-when", {"Timestamp": int(dt.datetime(2026, 11, 22, 1, 2, 3, tzinfo=dt.timezone.utc).timestamp())}]]
    props = {"content_type": p.content_type, "content_encoding": p.content_encoding, "delivery_mode": p.delivery_mode,
             "priority": p.priority, "correlation_id": p.correlation_id, "reply_to": p.reply_to, "expiration": p.expiration,
             "message_id": p.message_id, "timestamp": p.timestamp, "type_field": p.type, "user_id": p.user_id,
             "app_id": p.app_id, "cluster_id": None}
    if queue == "events" and not (behaviour and behaviour.stream_keeps_table_headers()):
        headers = [h for h in headers if h[0] != "x-table"]  # RabbitMQ 3.10 streams drop table and array headers
    if queue == "events" and behaviour and behaviour.stream_bytes_as_long_string():
        headers = [[k, long_string_json(bytes(v["Bytes"]))] if isinstance(v, dict) and "Bytes" in v else [k, v] for k, v in headers]
    return list(body) or None, props, sorted(map(repr, headers))


def publish(broker, vhost: str, queue: str, start: int, count: int) -> None:
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(start, start + count):
            body, props = message(queue, i)
            channel.basic_publish("", queue, body, props)


def depths(broker, vhost: str) -> dict[str, int]:
    rows = broker.api("GET", f"queues/{quote(vhost, safe='')}").json()
    return {r["name"]: r.get("messages", 0) for r in rows}


def settled_depths(broker, vhost: str, expected: dict[str, int]) -> dict[str, int]:
    import time

    deadline = time.monotonic() + 30
    while (found := depths(broker, vhost)) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def seed_queues(broker, vhost: str, queues: dict[str, tuple[str, int]]) -> None:
    """Declare each queue with its type and publish its count of :func:`message` (confirmed)."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for name, (queue_type, _) in queues.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
    for name, (_, count) in queues.items():
        publish(broker, vhost, name, 0, count)


@pytest.fixture
def seeded(broker, vhost):
    seed_queues(broker, vhost, QUEUES)
    expected = {name: count for name, (_, count) in QUEUES.items()}
    assert settled_depths(broker, vhost, expected) == expected
    return expected


def test_a_full_backup_keeps_every_message_byte_exact_and_leaves_the_queues_as_they_were(broker, behaviour, vhost, seeded, location,
                                                                                         tmp_path):
    """Each queue's records in its delivery order and, for the stream, as this broker version delivers it
    (tests/broker/behaviour.py); on 4.0 the quorum queue is captured by allowing its delivery counts to rise."""
    settings = BackupSettings("run-1", location, selector=QueueSelector(vhosts=(vhost,)), segment_max_bytes=64 * 1024,
                              allow_delivery_count_increase=behaviour.backup_leaves_out_by_default("quorum"))

    manifest = BackupRun(broker.connection, settings).run()

    storage = open_storage(location)
    assert manifest.completed_at is not None and ManifestStore(storage).load("run-1").completed_at == manifest.completed_at
    assert {q.name: (q.queue_type, q.message_count) for q in manifest.queues} == {n: v for n, v in QUEUES.items()}
    assert validate_backup(storage, "run-1", deep=True).valid
    for queue in manifest.queues:
        records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
        found = [(r["body"], r["properties"], sorted(map(repr, r["headers"]))) for r in records]
        order = behaviour.delivery_order(queue.queue_type, [i % 10 for i in range(queue.message_count)])  # message()'s priorities
        assert found == [expected_json(queue.name, i, behaviour) for i in order], queue.name
        assert all(r["source_vhost"] == vhost and r["source_queue"] == queue.name for r in records)
    assert settled_depths(broker, vhost, seeded) == seeded
    assert not [i.key for i in storage.list("run-1/staging/")]
    assert manifest.definitions is not None and manifest.definitions.queue_count >= len(QUEUES)


def test_a_second_backup_of_a_stream_captures_only_the_new_messages_and_lists_the_first_ones_segments(
    broker, vhost, seeded, tmp_path
):
    location = (tmp_path / "b").as_uri()
    selector = QueueSelector(vhosts=(vhost,), include=("events",))
    BackupRun(broker.connection, BackupSettings("s-1", location, selector=selector)).run()
    publish(broker, vhost, "events", 150, 40)

    second = BackupRun(broker.connection, BackupSettings("s-2", location, selector=selector)).run()

    storage = open_storage(location)
    (queue,) = second.queues
    own = [r for s in queue.segments if s.key.startswith("s-2/") for r in read_segment(storage.get(s.key))[1]]
    assert [r["delivery_tag"] for r in own] == list(range(150, 190))  # captured: only what is new
    records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
    assert [r["delivery_tag"] for r in records] == list(range(190))  # listed: the whole stream, s-1's part first
    assert [(r["body"], r["properties"]) for r in records] == [expected_json("events", i)[:2] for i in range(190)]
    assert second.extensions["depends_on"] == ["s-1"] and queue.extensions["chain_base"] == "s-1"


@pytest.mark.parametrize("new_count", [100, 200], ids=["shorter", "longer"])
def test_a_stream_recreated_under_the_same_name_is_backed_up_from_its_start(broker, vhost, seeded, tmp_path, new_count):
    # Given a complete backup of a 150-message stream, which is then deleted and re-created with other messages
    location = (tmp_path / "b").as_uri()
    selector = QueueSelector(vhosts=(vhost,), include=("events",))
    BackupRun(broker.connection, BackupSettings("r-1", location, selector=selector)).run()
    broker.api("DELETE", f"queues/{quote(vhost, safe='')}/events")
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    publish(broker, vhost, "events", 1000, new_count)  # message numbers 1000.. : other bodies at the same offsets

    # When the next backup runs (shorter: fewer offsets than before; longer: the old last offset exists again)
    second = BackupRun(broker.connection, BackupSettings("r-2", location, selector=selector)).run()

    # Then it holds every message of the new stream, from offset 0, not just those past the old last offset
    (queue,) = second.queues
    records = [r for s in queue.segments for r in read_segment(open_storage(location).get(s.key))[1]]
    assert [r["delivery_tag"] for r in records] == list(range(new_count))
    assert [(r["body"], r["properties"]) for r in records] == [expected_json("events", i)[:2] for i in range(1000, 1000 + new_count)]
    assert queue.extensions["stream_offsets"]["first"] == 0
    # a new chain: nothing of the old stream's backup is listed
    assert queue.extensions["chain_base"] is None and second.extensions["depends_on"] == []

    # and a third backup of the unchanged stream is incremental again: nothing new captured, r-2's chain listed
    third = BackupRun(broker.connection, BackupSettings("r-3", location, selector=selector)).run()
    assert third.queues[0].message_count == new_count and third.extensions["depends_on"] == ["r-2"]
    assert not [s for s in third.queues[0].segments if s.key.startswith("r-3/")]
    assert third.queues[0].extensions["stream_offsets"]["last_fingerprint"] == queue.extensions["stream_offsets"]["last_fingerprint"]


def test_a_vhost_the_broker_does_not_have_is_refused_before_anything_is_written(broker, vhost, tmp_path):
    from airflow_rbak.exceptions import ConfigurationError

    location = (tmp_path / "b").as_uri()
    settings = BackupSettings("typo-1", location, selector=QueueSelector(vhosts=(vhost, "no-such-vhost")))

    with pytest.raises(ConfigurationError, match=r"vhosts names 'no-such-vhost', which the broker does not have"):
        BackupRun(broker.connection, settings).discover()

    assert list(open_storage(location).list("")) == []  # no manifest, no lock
