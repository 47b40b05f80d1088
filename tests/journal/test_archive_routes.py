"""Every publish route ends up as a record that routes the message again: exchange, routing key, CC and BCC, every
property and typed header, the body byte for byte, in publish order; on file and on S3."""

from __future__ import annotations

import pika
import pytest

from airflow_rbak.broker import journal
from tests.broker.messages import WireProperties, _property_values, body_of, expected_headers, wire_properties
from tests.journal.helpers import archive, channel_of, manifest_of, records_of

#: (exchange, its type, routing key, headers of a headers exchange's binding)
ROUTES = [
    ("", None, "plain-q", None),
    ("j.direct", "direct", "direct-key", None),
    ("j.topic", "topic", "orders.eu.created", None),
    ("j.fanout", "fanout", "ignored", None),
    ("j.headers", "headers", "", {"x-match": "all", "kind": "order"}),
]


def _declare_routes(channel) -> None:
    for name in ("plain-q", "direct-q", "topic-q", "fanout-q", "headers-q", "cc-a", "cc-b", "bcc-z"):
        channel.queue_declare(name, durable=True)
    for (exchange, kind, key, binding), queue in zip(ROUTES[1:], ("direct-q", "topic-q", "fanout-q", "headers-q")):
        channel.exchange_declare(exchange, kind, durable=True)
        channel.queue_bind(queue, exchange, "orders.#" if kind == "topic" else key, arguments=binding)


def test_every_route_is_a_record_with_what_routes_it_again(broker, behaviour, vhost, location):
    conn, channel = channel_of(broker.connection, vhost)
    _declare_routes(channel)
    journal.enable(broker.connection, vhost)
    channel.confirm_delivery()
    for i, (exchange, _kind, key, _binding) in enumerate(ROUTES):
        channel.basic_publish(exchange, key, body_of(i, 300), WireProperties(wire_properties(i)))
    cc = pika.BasicProperties(delivery_mode=2, headers={"CC": ["cc-a", "cc-b"], "BCC": ["bcc-z"], "n": 7})
    channel.basic_publish("", "plain-q", b"with copies", cc)
    channel.basic_publish("j.headers", "", b"headers-routed", pika.BasicProperties(headers={"kind": "order"}))
    channel.basic_publish("", "no-such-queue", b"unroutable", pika.BasicProperties(message_id="lost"))
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("j.direct", "nobody", b"mandatory", pika.BasicProperties(message_id="back"), mandatory=True)
    channel.basic_publish("", "plain-q", b"")  # an empty body
    conn.close()

    result = archive(broker.connection, vhost, location)

    records = records_of(location, result.backup_id)
    # the publishes that reached no queue at the source are counted, not kept (replayed, they would reach none either):
    # the headers exchange's without the binding's header, and the mandatory one returned. The default exchange's to a
    # queue that does not exist is kept: the trace names that queue as routed (3.10.8 and 4.3.6)
    assert result.messages == len(records) == len(ROUTES) - 1 + 4
    for i, (exchange, _kind, key, _binding) in enumerate(ROUTES[:-1]):
        record = records[i]
        assert (record["exchange"], record["routing_key"]) == (exchange, key)
        assert record["properties"] == _property_values(i, "guest")
        # 4.x re-encodes the trace's copy of the header table in key order (types kept), as every 4.x delivery
        assert record["headers"] == expected_headers(i, sorted_headers=behaviour.series >= (4, 0))
        assert bytes(record["body"]) == body_of(i, 300)
    copies = records[len(ROUTES) - 1]
    assert (copies["exchange"], copies["routing_key"], bytes(copies["body"])) == ("", "plain-q", b"with copies")
    assert copies["headers"] == [["CC", {"Array": [{"LongString": "cc-a"}, {"LongString": "cc-b"}]}], ["n", {"Long": 7}],
                                 ["BCC", {"Array": [{"LongString": "bcc-z"}]}]]
    assert [(r["exchange"], r["routing_key"], bytes(r["body"] or b"")) for r in records[len(ROUTES):]] == [
        ("j.headers", "", b"headers-routed"), ("", "no-such-queue", b"unroutable"), ("", "plain-q", b"")]
    assert [r["delivery_tag"] for r in records] == list(range(1, len(records) + 1))
    assert {(r["source_queue"], r["source_vhost"], r["redelivered"]) for r in records} == {("rbak.journal", vhost, False)}
    stamps = [r["backed_up_at"] for r in records]
    assert stamps == sorted(stamps) and result.from_ms <= stamps[0] and stamps[-1] <= result.to_ms

    manifest = manifest_of(location, result.backup_id)
    assert manifest.completed_at is not None and manifest.definitions is None
    assert [(q.vhost, q.name, q.queue_type, q.message_count) for q in manifest.queues] == [
        (vhost, "rbak.journal", "quorum", len(records))]
    section = manifest.extensions["journal"]
    assert section == {"vhost": vhost, "previous": None, "from": result.from_ms, "to": result.to_ms,
                       "messages": len(records), "redelivered": 0, "went_nowhere": 2, "gaps": [], "uncovered": []}
    assert journal.status(broker.connection, vhost).depth == 0  # acked once stored


def test_order_is_kept_per_publisher_and_the_next_archive_continues_the_chain(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    publishers = [channel_of(broker.connection, vhost) for _ in range(3)]
    for _, channel in publishers:
        channel.queue_declare("q", durable=True)
    for n in range(300):
        publishers[n % 3][1].basic_publish("", "q", f"{n % 3}:{n}".encode())
    first = archive(broker.connection, vhost, url)
    for n in range(300, 450):
        publishers[n % 3][1].basic_publish("", "q", f"{n % 3}:{n}".encode())
    for conn, _ in publishers:
        conn.close()
    second = archive(broker.connection, vhost, url)

    bodies = [bytes(r["body"]).decode() for r in records_of(url, first.backup_id) + records_of(url, second.backup_id)]
    assert len(bodies) == 450
    for p in range(3):
        assert [int(b.split(":")[1]) for b in bodies if b.startswith(f"{p}:")] == list(range(p, 450, 3))
    assert second.previous == first.backup_id and second.from_ms == first.to_ms and second.to_ms >= first.to_ms


def test_a_backup_of_a_journaled_vhost_leaves_the_journal_out(broker, vhost, tmp_path):
    from airflow_rbak.backup.run import BackupRun, BackupSettings
    from airflow_rbak.broker.discovery import QueueSelector

    journal.enable(broker.connection, vhost)
    conn, channel = channel_of(broker.connection, vhost)
    channel.queue_declare("q", durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", "q", b"kept")
    conn.close()

    manifest = BackupRun(broker.connection, BackupSettings("b1", f"file://{tmp_path}",
                                                           QueueSelector(vhosts=(vhost,)))).run()

    assert [(q.name, q.message_count) for q in manifest.queues] == [("q", 1)]
    assert manifest.extensions["left_out"] == [{"vhost": vhost, "queue": "rbak.journal", "queue_type": "quorum",
                                                "reason": "the journal queue: its archiver archives it (rbak journal archive)"}]
    assert journal.status(broker.connection, vhost).depth >= 2  # the backup took nothing from the journal


def test_runs_that_stop_on_time_under_a_steady_publisher_lose_nothing_and_keep_its_order(broker, vhost, tmp_path):
    import threading

    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    count, done = 3000, threading.Event()

    def publisher() -> None:
        conn, channel = channel_of(broker.connection, vhost)
        channel.queue_declare("q", durable=True)
        for n in range(count):
            channel.basic_publish("", "q", b"%d" % n)
            if n % 100 == 99:
                conn.sleep(0.1)  # about 1,000 a second: each run ends on its time, with messages still coming
        conn.close()
        done.set()

    thread = threading.Thread(target=publisher)
    thread.start()
    results = []
    while not done.is_set() or journal.status(broker.connection, vhost).depth > 0:
        results.append(archive(broker.connection, vhost, url, seconds=1))
    thread.join()

    # every message once, in publish order: what a run did not store went back to the journal in its order (RabbitMQ
    # before 4.3 puts a rejected message behind those waiting, so the broker closes the archive's connection)
    bodies = [bytes(r["body"]) for a in results for r in records_of(url, a.backup_id)]
    assert bodies == [b"%d" % n for n in range(count)]
    assert [a.previous for a in results[1:]] == [a.backup_id for a in results[:-1]]
    assert all(b.from_ms == a.to_ms for a, b in zip(results, results[1:]))
    assert any(a.stop_reason == "the run's time was up" for a in results)
