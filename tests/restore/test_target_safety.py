"""Issue 14, Must show 1 and 3: a restore never adds to what its target holds unless told to, and restores the same
backup into two clusters (two RabbitMQ nodes) with the default checkpoint settings, each message exactly once."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import orjson
import pika
import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.request import DEFAULT_CHECKPOINT_STATE
from tests.restore.helpers import backup, body_of, declare, expected_views, publish, read_queue, ready_count

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]


def make_vhost(broker, name: str) -> None:
    broker.api("PUT", f"vhosts/{quote(name, safe='')}")
    broker.api("PUT", f"permissions/{quote(name, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})


def test_a_default_restore_into_the_source_while_its_queue_holds_messages_publishes_nothing(broker, vhost, tmp_path):
    # Given a backup of a queue that still holds its 5 messages (and a second, empty-on-target queue beside it)
    declare(broker.connection, vhost, {"orders": "classic", "audit": "quorum"})
    publish(broker.connection, vhost, "orders", 0, 5)
    publish(broker.connection, vhost, "audit", 0, 3)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "safe-1", vhost)
    broker.api("DELETE", f"queues/{quote(vhost, safe='')}/audit/contents")
    checkpoints = tmp_path / "restore.db"

    # When a restore is run with only storage_url and backup_id (and a private checkpoint file)
    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, RestoreRequest(location, backup_id="safe-1", checkpoint_state=str(checkpoints))).run()

    # Then it says why and what to set, and nothing was published: not into the full queue, not into the empty one
    message = str(refused.value)
    assert f"{vhost}/orders holds 5" in message and "on_existing_messages: append" in message
    assert "the cluster this backup was taken from" in message and "vhost_map" in message
    assert f"{vhost}/audit" not in message
    assert (ready_count(broker.connection, vhost, "orders"), ready_count(broker.connection, vhost, "audit")) == (5, 0)
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 5)] == [body_of(i, 300) for i in range(5)]


def test_append_is_the_explicit_mode_that_adds_to_a_queue_holding_messages(broker, vhost, tmp_path):
    # Given the same situation: the source queue still holds the 5 messages that were backed up
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "app-1", vhost)
    settings = RestoreRequest(location, backup_id="app-1", checkpoint_state=str(tmp_path / "r.db"), on_existing_messages="append")

    # When the restore is told to append
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()
    report = run.run()

    # Then the plan said what was there and what it adds, and the queue holds the five, then the five again
    (queue,) = plan.queues
    assert (queue.target_depth, queue.to_add) == (5, 5)
    assert plan.source_cluster == plan.target_cluster and plan.target_cluster
    assert report.published == 5 and report.refused is None
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 10)] == [body_of(i % 5, 300) for i in range(10)]


QUEUES = {"orders": ("classic", 400), "payments": ("quorum", 120), "events": ("stream", 60)}


def _kill_worker(node, settings: dict, source_vhost: str, queue: str, after: int) -> None:
    c = node.connection
    url = f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?stream_port={c.stream_port}&management_port={c.management_port}"
    args = {"amqp_url": url, "source_vhost": source_vhost, "source_queue": queue, "settings": settings, "kill_after": after}
    done = subprocess.run([sys.executable, "-m", "tests.restore.publish_worker", orjson.dumps(args).decode()], cwd=REPO,
                          capture_output=True, timeout=300)
    assert done.returncode == -9, done.stderr.decode()[-2000:]  # it died by SIGKILL at the 150th message, as arranged


def test_one_backup_restored_into_two_clusters_with_default_checkpoints_holds_every_message_once_in_each(
        broker, second_broker, behaviour, vhost, tmp_path):
    # Given a backup of a classic, a quorum and a stream queue on the first node
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (queue_type, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count, decimal=queue_type != "stream")
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "two-1", vhost, segment_max_bytes=32 * 1024)
    published = {n: expected_views(c, t, behaviour) for n, (t, c) in QUEUES.items()}  # what a consumer saw
    target = f"dr-{uuid.uuid4().hex[:8]}"
    make_vhost(broker, target)
    make_vhost(second_broker, target)
    fields = {"storage_url": location, "backup_id": "two-1", "vhosts": [vhost], "vhost_map": {vhost: target}}
    assert "checkpoint_state" not in fields and RestoreRequest(**fields).checkpoint_state == DEFAULT_CHECKPOINT_STATE
    try:
        # When it is restored into the first node, then into the second, whose first attempt dies mid-queue
        first = RestoreRun(broker.connection, RestoreRequest(**fields)).run()
        _kill_worker(second_broker, {**fields, "max_in_flight": 50}, vhost, "orders", after=150)
        second = RestoreRun(second_broker.connection, RestoreRequest(**fields)).run()

        # Then each cluster's restore published every record itself (the second reused nothing of the first) ...
        assert {r["source_queue"]: r["published_total"] for r in first.queues} == {n: c for n, (_, c) in QUEUES.items()}
        assert {r["source_queue"]: r["published_total"] for r in second.queues} == {n: c for n, (_, c) in QUEUES.items()}
        resumed = next(r for r in second.queues if r["source_queue"] == "orders")
        # (how many of the 150 sent reached the queue before the kill is up to the kernel: the re-run measured it)
        assert resumed["resumed_from"] + resumed["already_delivered"] <= 150 and resumed["completed"]
        assert first.target_cluster != second.target_cluster
        # ... and both hold every message, byte-exact (body, properties, headers), in order, exactly once
        for node in (broker, second_broker):
            for name, (queue_type, count) in QUEUES.items():
                assert read_queue(node.connection, target, name, queue_type, count) == published[name], (node, name)
    finally:
        for node in (broker, second_broker):
            node.api("DELETE", f"vhosts/{quote(target, safe='')}")


def test_exchange_mode_refuses_a_vhost_with_messages_anywhere_but_resumes_its_own_interrupted_restore(
        broker, vhost, target_vhost, tmp_path):
    # Given a backup of 'orders' filled through 'orders.x', and a target vhost with that route and an unrelated 'audit'
    # queue that holds a message
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.queue_declare("orders", durable=True)
        ch.queue_bind("orders", "orders.x", "new")
        ch.confirm_delivery()
        for i in range(300):
            ch.basic_publish("orders.x", "new", f"o-{i}".encode())
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "ex-1", vhost)
    make_vhost(broker, target_vhost)
    with pika.BlockingConnection(broker.connection.pika_parameters(target_vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.queue_declare("orders", durable=True)
        ch.queue_bind("orders", "orders.x", "new")
        ch.queue_declare("audit", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "audit", b"keep me")
    fields = {"storage_url": location, "backup_id": "ex-1", "vhost_map": {vhost: target_vhost}, "publish_mode": "exchange",
              "checkpoint_state": str(tmp_path / "r.db")}

    # When it is restored through the exchanges: Then 'audit' (where bindings could route records) stops it
    with pytest.raises(RestoreRefusedError, match=f"{target_vhost}/audit holds 1"):
        RestoreRun(broker.connection, RestoreRequest(**fields)).run()
    assert ready_count(broker.connection, target_vhost, "orders") == 0

    # When 'audit' is emptied, and a first attempt dies after 100 publishes (some of them reached 'orders')
    assert read_queue(broker.connection, target_vhost, "audit", "classic", 1)[0][0] == b"keep me"
    _kill_worker(broker, {**fields, "max_in_flight": 20}, vhost, "orders", after=100)

    # Then the re-run is not refused for what its own first attempt published: it resumes, and finishes
    report = RestoreRun(broker.connection, RestoreRequest(**fields)).run()
    (row,) = report.queues
    assert row["completed"] and report.refused is None
    bodies = [m[0] for m in read_queue(broker.connection, target_vhost, "orders", "classic", 300)]
    assert bodies[-200:] == [f"o-{i}".encode() for i in range(100, 300)]  # exchange mode resumes at least once
