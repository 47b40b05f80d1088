"""Must show 4: a dead-letter queue's backup replayed on a real broker; each message arrives on the queue it died in,
byte for byte, and nothing is published to the dead-letter queue."""

from __future__ import annotations

import time

import pytest

from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.restore import RestoreRefusedError, RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.selection_report import summary_lines
from tests.restore.helpers import backup, body_of, management_depth, props_of, read_queue, ready_count

pytestmark = pytest.mark.broker
#: The queues messages die in, the routing key each was published with, and how many die there.
DIED = {"orders": ("orders.new", 6), "payments": ("pay", 4)}


def _dead_letters(connection, vhost: str) -> None:
    """``orders`` and ``payments`` dead-letter into ``dlq`` through ``dlx``; their messages, published to ``work``,
    are rejected there, so each reaches ``dlq`` with an ``x-death`` naming ``work`` and its routing key. ``stray``
    holds a message published to it directly: no ``x-death``."""
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("work", "direct", durable=True)
        ch.exchange_declare("dlx", "fanout", durable=True)
        ch.queue_declare("dlq", durable=True)
        ch.queue_bind("dlq", "dlx")
        ch.queue_declare("stray", durable=True)
        for name, (key, _) in DIED.items():
            ch.queue_declare(name, durable=True, arguments={"x-dead-letter-exchange": "dlx"})
            ch.queue_bind(name, "work", key)
        ch.confirm_delivery()
        i = 0
        for key, count in DIED.values():
            for _ in range(count):
                ch.basic_publish("work", key, body_of(i, 300), props_of(i, persistent=True), mandatory=True)
                i += 1
        ch.basic_publish("", "stray", b"no death", props_of(99, persistent=True))
        for name, (_, count) in DIED.items():
            for _ in range(count):
                method, _props, _body = ch.basic_get(name)
                ch.basic_reject(method.delivery_tag, requeue=False)


def _wait_until_empty(broker, vhost: str, *queues: str) -> None:
    deadline = time.monotonic() + 30
    while any(management_depth(broker, vhost, q) for q in queues):
        assert time.monotonic() < deadline, "the management API still counts messages in the drained queues"
        time.sleep(0.5)


def test_a_dead_letter_queue_is_replayed_to_where_each_message_died(broker, vhost, tmp_path):
    # Given a backup of a dead-letter queue (and a queue whose message never died), then both drained
    _dead_letters(broker.connection, vhost)
    total = sum(n for _, n in DIED.values())
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "dlq-1", vhost)
    dead = read_queue(broker.connection, vhost, "dlq", "classic", total)  # what the dead-letter queue held
    assert [m[0] for m in dead] == [body_of(i, 300) for i in range(total)]
    assert all(any(h[0] == "x-death" for h in m[2]) for m in dead)
    read_queue(broker.connection, vhost, "stray", "classic", 1)
    _wait_until_empty(broker, vhost, "dlq", "stray")  # as the management API, whose counts lag, sees them

    # When the restore replays them (the dead-letter queue, and `stray` asked for too)
    settings = RestoreRequest(location, backup_id="dlq-1", vhosts=[vhost], queues=["dlq", "stray"],
                              replay_dead_letters=["dlq", "stray"], checkpoint_state=str(tmp_path / "restore.db"))
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()

    # Then the plan lists each route with its count and the exchange it publishes into, never the dead-letter queue
    (queue,) = plan.queues
    assert (queue.source_queue, queue.replay, queue.exchanges) == ("dlq", True, ("work",))
    assert queue.replay_routes == (("work", "orders.new", 6), ("work", "pay", 4))
    lines = "\n".join(summary_lines(plan))
    assert f"{vhost}/dlq: dead-letter replay, 6 messages to exchange 'work' with routing key 'orders.new'" in lines
    assert "4 messages to exchange 'work' with routing key 'pay'" in lines and "(none into 'dlq')" in lines
    assert "- `" + vhost + "/dlq`: 6 messages to exchange `work` with routing key `orders.new`" in approval_body(
        plan, settings, "rabbitmq_default")
    # and `stray`, whose record never died, is refused saying why; the others go on
    (refused,) = plan.refused_queues
    assert refused.queue == "stray" and "at position 0: it has no x-death header" in refused.reason

    with pytest.raises(RestoreRefusedError, match="1 queues were refused and left out, the others restored"):
        run.run()

    # and each message is back on the queue it died in, in order, exactly as the dead-letter queue held it
    assert read_queue(broker.connection, vhost, "orders", "classic", 6) == dead[:6]
    assert read_queue(broker.connection, vhost, "payments", "classic", 4) == dead[6:]
    # and nothing was published to the dead-letter queue or to `stray`
    assert ready_count(broker.connection, vhost, "dlq") == 0 and ready_count(broker.connection, vhost, "stray") == 0
