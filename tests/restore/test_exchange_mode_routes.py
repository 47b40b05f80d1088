"""Issue 50 item 9, on a real broker: an exchange-mode approval lists every exchange and routing key its records are
published with, with counts, as the backup holds them.

Messages are published through a direct exchange, a topic exchange (one key routing to two queues) and the default
exchange, backed up, and planned in exchange mode. The approval's Markdown is parsed as Airflow's UI renders it, and
its route tables are compared with what the test published and with the routes read from the backup's segments.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pika
import pytest

from airflow_rbak.codec import iter_records
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestorePlan, RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.exchange_routes import publish_route
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup
from tests.restore.test_exchange_routes import route_tables

pytestmark = pytest.mark.broker

#: (exchange, routing key, messages) as published; each lands in the queues the bindings below name.
PUBLISHED = [("orders.x", "new", 3), ("orders.x", "paid", 2), ("events.t", "order.created", 4),
             ("events.t", "user.signup", 2), ("", "orders", 5), ("", "audit", 1)]


def seed(connection, vhost: str) -> dict[str, Counter]:
    """The exchanges, queues and bindings, and the messages of :data:`PUBLISHED`; per queue, the routes it received."""
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.exchange_declare("events.t", "topic", durable=True)
        for queue in ("orders", "audit"):
            ch.queue_declare(queue, durable=True)
        for queue, exchange, key in [("orders", "orders.x", "new"), ("orders", "orders.x", "paid"),
                                     ("orders", "events.t", "order.#"), ("audit", "events.t", "#")]:
            ch.queue_bind(queue, exchange, key)
        for exchange, key, count in PUBLISHED:
            for i in range(count):
                ch.basic_publish(exchange, key, f"{exchange}/{key}/{i}".encode(), mandatory=True)
    return {
        "orders": Counter({("orders.x", "new"): 3, ("orders.x", "paid"): 2, ("events.t", "order.created"): 4,
                           ("", "orders"): 5}),
        "audit": Counter({("events.t", "order.created"): 4, ("events.t", "user.signup"): 2, ("", "audit"): 1}),
    }


def backed_up_routes(location: str, backup_id: str) -> dict[str, Counter]:
    """Per queue, the route exchange mode publishes each record of the backup with, read from its segments."""
    storage = open_storage(location)
    found: dict[str, Counter] = {}
    for queue in ManifestStore(storage).load(backup_id).queues:
        routes = found.setdefault(f"{queue.vhost}/{queue.name}", Counter())
        for meta in queue.stored_order():
            for record in iter_records(storage.get(meta.key), meta.key, 1 << 30):
                routes[publish_route(record.exchange, record.routing_key, queue.name)] += 1
    return found


def test_an_exchange_mode_approval_lists_every_route_of_the_backup_with_its_count(broker, vhost, tmp_path):
    # Given messages published through two exchanges (one key reaching both queues) and the default exchange
    published = seed(broker.connection, vhost)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "routes-1", vhost)
    in_backup = backed_up_routes(location, "routes-1")
    assert in_backup == {f"{vhost}/{q}": routes for q, routes in published.items()}

    # When the backup is planned in exchange mode (into a vhost the target lacks) and the approval request written
    settings = RestoreRequest(location, backup_id="routes-1", vhosts=[vhost], vhost_map={vhost: f"{vhost}-x"},
                              publish_mode="exchange", checkpoint_state=str(tmp_path / "r.db"))
    plan = RestoreRun(broker.connection, settings).plan()
    body = approval_body(RestorePlan.from_json(plan.to_json()), settings, "rabbitmq_default")

    # Then its tables, parsed from the Markdown, list every route and count of each queue: what was published, and
    # what the backup holds
    tables = {queue: Counter({(e, k): n for e, k, n in rows}) for queue, rows in route_tables(body).items()}
    assert tables == in_backup
    for rows in route_tables(body).values():
        assert [n for _, _, n in rows] == sorted((n for _, _, n in rows), reverse=True)  # the most used first
        assert len(rows) == len(set((e, k) for e, k, _ in rows))  # each route once
    assert {q.task_id: sum(n for _, _, n in q.routes) for q in plan.queues} == {
        f"{vhost}/orders": 14, f"{vhost}/audit": 7} == {q.task_id: q.records_in_window for q in plan.queues}

    # and in queue mode the same backup's plan has no routes and the request no route table
    queue_settings = replace(settings, publish_mode="queue")
    queue_mode = RestoreRun(broker.connection, queue_settings).plan()
    assert all(q.routes == () for q in queue_mode.queues)
    assert "Routes in exchange mode" not in approval_body(queue_mode, queue_settings, "rabbitmq_default")
