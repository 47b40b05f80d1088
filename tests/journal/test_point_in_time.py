"""A journaled vhost under live publishers and consumers, a backup in the middle, the broker thrown away: a recovery to
a moment T into a fresh broker delivers every message published before T that had not been consumed before T, each at
least once and in publish order per queue, and counts the duplicates it may have caused.

The source has a classic queue (fed through a topic exchange) and a quorum queue (the default exchange), each with a
consumer that acks more slowly than its publisher sends, and a stream fed through the same topic exchange. The archiver
runs again and again throughout (as rbak_journal does). Every wait is for a count of messages, never for a time;
``RBAK_PITR_MESSAGES`` (per publisher and phase) makes the run longer.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import quote

import pika
import pytest

from airflow_rbak.broker import journal
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.codec import decode_segment
from airflow_rbak.repository.journal_chain import journal_chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.journal_recovery import window_start
from airflow_rbak.storage import open_storage
from tests.broker.conftest import second_broker  # noqa: F401 - the fresh broker a recovery goes to
from tests.journal.helpers import archive
from tests.journal.traffic import Consumer, Publisher, Route, body, now_ms, properties, required_before
from tests.restore.helpers import backup

pytestmark = pytest.mark.broker

PER_PHASE = int(os.environ.get("RBAK_PITR_MESSAGES", "150"))
ROUTES = {
    "live-classic": ("classic", Route("live-classic", "live", "live.classic")),
    "live-quorum": ("quorum", Route("live-quorum", "", "live-quorum")),
    "live-stream": ("stream", Route("live-stream", "live", "live.stream")),
}


def _topology(connection: Any, vhost: str) -> None:
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.exchange_declare("live", "topic", durable=True)
        for name, (queue_type, route) in ROUTES.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
            if route.exchange:
                channel.queue_bind(name, route.exchange, route.routing_key)


class Archiver(threading.Thread):
    """Archive runs one after the other until stopped, as the scheduled DAG's runs follow each other."""

    def __init__(self, connection: Any, vhost: str, location: str) -> None:
        super().__init__(daemon=True, name="archiver")
        self.connection, self.vhost, self.location = connection, vhost, location
        self.stopping = threading.Event()
        self.results: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.results.append(archive(self.connection, self.vhost, self.location, seconds=3))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _wait_for(publishers: list[Publisher], count: int, helpers: list[Any]) -> None:
    """Until every publisher has had ``count`` messages confirmed (or one of the threads failed)."""
    done = threading.Event()
    while not done.wait(0.05):
        for helper in helpers:
            assert helper.error is None, f"{helper.name}: {helper.error!r}"
            assert helper.is_alive(), f"{helper.name} stopped"
        if all(len(p.sent) >= count for p in publishers):
            done.set()


def _read_target(connection: Any, vhost: str, name: str, queue_type: str, expected: int) -> list[tuple[int, bytes, Any]]:
    """Every message of a target queue (a stream from its first offset): its number, body and properties."""
    found: list[tuple[int, bytes, Any]] = []
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=500)

        def on_message(ch: Any, method: Any, props: pika.BasicProperties, data: bytes) -> None:
            found.append((int(props.headers["seq"]), data, props))
            ch.basic_ack(method.delivery_tag)

        channel.basic_consume(name, on_message, arguments={"x-stream-offset": "first"} if queue_type == "stream" else None)
        idle = 0
        while len(found) < expected and idle < 600:  # 600 quiet polls of 0.1 s: a stuck queue fails, never hangs
            before = len(found)
            conn.process_data_events(time_limit=0.1)
            idle = 0 if len(found) != before else idle + 1
        conn.process_data_events(time_limit=0.5)  # anything beyond what was expected shows up in the count
    return found


def _journal_window(location: str, vhost: str, start: int, until: int) -> dict[str, list[int]]:
    """The journal's records a recovery to ``until`` replays, per source queue their numbers in stored order: those
    with ``start <= backed_up_at < until``, read from the archives themselves."""
    storage = open_storage(location)
    routed = {(route.exchange, route.routing_key): name for name, (_, route) in ROUTES.items()}
    found: dict[str, list[int]] = {name: [] for name in ROUTES}
    for link in journal_chain(storage, vhost).covering(start, until):
        for meta in link.entry.stored_order():
            for record in decode_segment(storage.get(meta.key)).records:
                if start <= record.backed_up_at < until:
                    headers = dict(record.headers)
                    found[routed[(record.exchange, record.routing_key)]].append(int(headers["seq"].value))
    return found


def _snapshot_numbers(location: str, backup_id: str) -> dict[str, list[int]]:
    storage = open_storage(location)
    manifest = ManifestStore(storage).load(backup_id)
    found: dict[str, list[int]] = {name: [] for name in ROUTES}
    for queue in manifest.queues:
        for meta in queue.stored_order():
            found[queue.name] += [int(dict(r.headers)["seq"].value) for r in decode_segment(storage.get(meta.key)).records]
    return found


def _whereabouts(seq: int, snapshot: list[int], journal: list[int], publisher: Publisher, consumer: Consumer | None,
                 moment: int, manifest: Any) -> dict[str, Any]:
    """Where message ``seq`` was, for a failure's message."""
    sent = next((s for s in publisher.sent if s.seq == seq), None)
    return {"in_snapshot_at": [i for i, n in enumerate(snapshot) if n == seq], "snapshot_len": len(snapshot),
            "in_journal_at": [i for i, n in enumerate(journal) if n == seq], "sent": sent,
            "received": [at for n, at in (consumer.received if consumer else []) if n == seq], "moment": moment,
            "snapshot_created": manifest.created_at, "snapshot_completed": manifest.completed_at}


def test_a_recovery_to_a_moment_delivers_what_was_published_and_not_consumed_before_it(
        broker, second_broker, vhost, location, tmp_path):  # noqa: F811 - the imported fixture
    _topology(broker.connection, vhost)
    journal.enable(broker.connection, vhost)
    publishers = {name: Publisher(broker.connection, vhost, route) for name, (_, route) in ROUTES.items()}
    consumers = {name: Consumer(broker.connection, vhost, name) for name, (qt, _) in ROUTES.items() if qt != "stream"}
    archiver = Archiver(broker.connection, vhost, location)
    threads = [*publishers.values(), *consumers.values(), archiver]
    for thread in threads:
        thread.start()
    try:
        _wait_for(list(publishers.values()), PER_PHASE, threads)
        snapshot = backup(broker.connection, location, "snapshot-live", vhost)
        _wait_for(list(publishers.values()), 2 * PER_PHASE, threads)
        moment = now_ms()
        _wait_for(list(publishers.values()), 3 * PER_PHASE, threads)
    finally:
        for thread in threads:
            thread.stopping.set()
        for thread in threads:
            thread.join(120)
    assert archiver.error is None and all(t.error is None for t in threads), [t.error for t in threads]
    last = archive(broker.connection, vhost, location, seconds=30)  # the journal's tail, past the moment
    assert last.to_ms > moment and not any(r.gaps for r in [*archiver.results, last])
    # the source is thrown away: nothing below reads it
    broker.api("DELETE", f"vhosts/{quote(vhost, safe='')}")

    request = RestoreRequest(location, backup_id="latest", vhosts=[vhost], restore_definitions=True,
                             journal_until=moment, checkpoint_state=str(tmp_path / "restore.db"))
    target = second_broker
    try:
        report = RestoreRun(target.connection, request).run().to_json()
        facts = report["journal_recovery"]
        storage = open_storage(location)
        start = window_start(storage, request, journal_chain(storage, vhost).covering(snapshot.created_at, moment),
                             snapshot.created_at)
        snapshot_numbers = _snapshot_numbers(location, snapshot.backup_id)
        journal_numbers = _journal_window(location, vhost, start, moment)
        target.api("PUT", f"permissions/{quote(vhost, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        duplicates = 0
        for name, (queue_type, route) in ROUTES.items():
            expected = snapshot_numbers[name] + journal_numbers[name]
            got = _read_target(target.connection, vhost, name, queue_type, len(expected))
            numbers = [seq for seq, _, _ in got]
            # exactly what the snapshot held, then the journal's records before the moment, in that order
            assert numbers == expected, (name, len(snapshot_numbers[name]), len(numbers), len(expected),
                                         [(i, a, b) for i, (a, b) in enumerate(zip(numbers, expected)) if a != b][:5],
                                         expected[len(snapshot_numbers[name]) - 3:len(snapshot_numbers[name]) + 3])
            for seq, data, props in got:
                want = properties(name, seq, route.headers)
                assert data == body(name, seq)
                assert (props.message_id, props.correlation_id, props.timestamp, props.priority, props.delivery_mode,
                        props.type, props.app_id, props.content_type) == (
                    want.message_id, want.correlation_id, want.timestamp, want.priority, want.delivery_mode, want.type,
                    want.app_id, want.content_type)
                # (a stream's consumer also gets the offset the broker adds)
                assert {k: v for k, v in props.headers.items() if k != "x-stream-offset"} == want.headers
            # every message confirmed before the moment and not consumed before it, at least once
            required = required_before(publishers[name], consumers.get(name), moment)
            assert not set(required) - set(numbers), (name, sorted(set(required) - set(numbers))[:20])
            # in publish order: the first delivery of each required message comes after every earlier one's (what
            # was consumed before the snapshot but published in the journal's window may come again, out of order:
            # at least once, counted among the possible duplicates)
            wanted = set(required)
            firsts = [n for n in dict.fromkeys(numbers) if n in wanted]
            late = next((b for a, b in zip(firsts, firsts[1:]) if b < a), None)
            assert late is None, (name, late, _whereabouts(late, snapshot_numbers[name], journal_numbers[name],
                                                          publishers[name], consumers.get(name), moment, snapshot))
            duplicates += len(numbers) - len(set(numbers))
        assert duplicates <= facts["duplicates_possible"]
        print(f"\npoint in time: {sum(len(p.sent) for p in publishers.values())} published, "
              f"{sum(len(c.received) for c in consumers.values())} consumed, snapshot {facts['from_snapshot']}, "
              f"journal {facts['from_journal']}, duplicates {duplicates} of {facts['duplicates_possible']} possible, "
              f"{len(archiver.results) + 1} archive runs")
    finally:
        try:
            target.api("DELETE", f"vhosts/{quote(vhost, safe='')}")
        except Exception:  # noqa: BLE001 - cleanup
            pass
