"""The upgrade for real: a vhost backed up on RabbitMQ 3.10, restored on RabbitMQ 4.3.

The source (a 3.10 node, ``broker_310``) holds what an operator leaving mirrored classic queues has
(``tests/restore/migration_source.py``: an ``ha-mode`` policy beside another key, a queue declared with
``x-ha-mode``, a ``queue-mode: lazy`` policy, a priority queue, a dead-letter topology) and three more objects 4.x
treats differently: a queue with ``x-queue-version`` 1, a lazy queue by argument, a transient non-exclusive queue.
The target is the session's 4.3 node.

Restored as they are, the plan lists what 4.3 does with each of those objects (applied, changed, refused) and the
mirroring keys refuse the restore before anything is imported. Restored with the migration's transformations, every
queue becomes quorum, policies and bindings are as planned, and every message arrives byte-exact, once, in the
order 4.3 delivers them in. "In order" means: the restore publishes each queue's messages in the order the backup
stored them (the source's delivery order), and a 4.3 quorum queue delivers by each message's priority property,
highest first, that order within one priority. So the priority queue keeps its source's delivery order exactly,
while a queue that was classic without ``x-max-priority`` (whose source ignored priorities) delivers messages of
different priorities highest first: the plan says so for each such queue (``PRIORITY_ORDER_NOTE``).
"""

from __future__ import annotations

import uuid

import pytest
import requests

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.target import refusal
from airflow_rbak.restore.transformations import PRIORITY_ORDER_NOTE
from tests.broker.conftest import Broker
from tests.reliability.expect import header_order_free
from tests.restore.helpers import backup, expected_view, read_queue
from tests.restore.migration_source import BINDINGS, MIGRATION, QUEUES, set_up, stored_order
from tests.restore.migration_source import path as _path

pytestmark = [pytest.mark.broker, pytest.mark.rabbitmq("4.3")]

#: The objects beside migration_source's: name -> (durable, arguments).
EXTRA = {"v1": (True, {"x-queue-version": 1}), "lazy-arg": (True, {"x-queue-mode": "lazy"}), "scratch": (False, {})}


@pytest.fixture(scope="module")
def source(broker_310, tmp_path_factory):
    """The source vhost on 3.10, backed up there as ``up-1``: (vhost, location)."""
    vhost = f"up-{uuid.uuid4().hex[:8]}"
    set_up(broker_310, vhost)
    for name, (durable, arguments) in EXTRA.items():
        broker_310.api("PUT", _path("queues", vhost, name), json={"durable": durable, "arguments": arguments})
    location = tmp_path_factory.mktemp("up").as_uri()
    backup(broker_310.connection, location, "up-1", vhost)
    yield vhost, location
    broker_310.api("DELETE", _path("vhosts", vhost))


@pytest.fixture
def into(broker):
    """A vhost name of the 4.3 node that the restore creates; deleted afterwards."""
    name = f"up-t-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        broker.api("DELETE", _path("vhosts", name))
    except requests.RequestException:
        pass


def settings(source, into: str, tmp_path, **extra) -> RestoreRequest:
    vhost, location = source
    return RestoreRequest(storage_url=location, backup_id="up-1", vhosts=[vhost], vhost_map={vhost: into},
                          restore_definitions=True, checkpoint_state=str(tmp_path / "r.db"), **extra)


def delivery_order_on_4_3(name: str) -> list[int]:
    """The order a 4.3 quorum queue delivers a queue's stored messages in: by priority (``props_of``: ``i % 10``),
    highest first, the stored order within one. Every quorum queue of 4.x does this, so a queue converted from a
    classic queue without ``x-max-priority`` (which ignored priorities) no longer delivers in publish order; the
    priority queue keeps its source's delivery order."""
    return sorted(stored_order(name), key=lambda i: -(i % 10))


def vhost_exists(node: Broker, name: str) -> bool:
    return name in {v["name"] for v in node.api("GET", "vhosts").json()}


def test_3_10_definitions_as_they_are_each_applied_changed_or_refused_in_the_plan(broker, source, into, tmp_path):
    # When the 3.10 backup is planned into 4.3 without transformations (dry run), then run
    plan = RestoreRun(broker.connection, settings(source, into, tmp_path, dry_run=True)).plan()
    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, settings(source, into, tmp_path)).run()

    # Then the plan says what 4.3 does with each object it treats differently
    found = {(f["kind"], f["name"]): f["outcome"] for f in plan.definitions_compatibility or []}
    assert found == {("policy", "mirrored"): "refused", ("queue", "payments"): "refused",
                     ("policy", "lazy"): "applied", ("queue", "lazy-arg"): "applied",
                     ("queue", "scratch"): "applied", ("queue", "v1"): "changed"}
    # x-queue-version 1 is taken out of what is imported
    queues = {e["item"]["name"]: e["item"] for e in plan.definitions_import or [] if e["kind"] == "queues"}
    assert "x-queue-version" not in queues["v1"].get("arguments", {})
    # the mirroring keys refuse the restore, naming each object, in the plan, the approval request and the run
    reason = refusal(plan, settings(source, into, tmp_path))
    assert reason and "policy " in reason and "/mirrored" in reason and "/payments" in reason and "strip_mirroring" in reason
    body = approval_body(plan, settings(source, into, tmp_path), "rabbitmq_default")
    assert "are refused by the target, so the restore is refused" in body and "x-queue-version 1" in body
    assert "strip_mirroring" in str(refused.value)
    # and nothing was imported or published
    assert not vhost_exists(broker, into)


def test_mirrored_classic_queues_of_3_10_become_quorum_on_4_3_with_every_message(broker, broker_310, source, into,
                                                                                  tmp_path):
    assert broker_310.version.startswith("3.10.") and broker.version.startswith("4.3.")

    # When the backup is restored into 4.3 with the migration's transformations
    run = RestoreRun(broker.connection, settings(source, into, tmp_path, transformations=MIGRATION))
    plan = run.plan()
    report = run.run()

    # Then every queue is quorum, as planned
    queues = {q["name"]: q for q in broker.api("GET", _path("queues", into)).json()}
    assert {name: q["type"] for name, q in queues.items()} == dict.fromkeys([*QUEUES, *EXTRA], "quorum")
    assert {q.target_queue: q.target_queue_type for q in plan.queues} == dict.fromkeys([*QUEUES, *EXTRA], "quorum")
    assert queues["orders"]["arguments"].get("x-dead-letter-exchange") == "dlx"
    assert "x-max-priority" not in queues["prio"]["arguments"]
    # the mirroring policy keeps its other key, the lazy one had nothing left and is gone; the bindings are the source's
    policies = {p["name"]: p["definition"] for p in broker.api("GET", _path("policies", into)).json()}
    assert policies == {"mirrored": {"max-length": 1000}}
    bindings = {(b["source"], b["destination"], b["routing_key"])
                for b in broker.api("GET", _path("bindings", into)).json() if b["source"]}
    assert bindings == set(BINDINGS)
    # every message byte-exact, once, in the order a consumer of the source saw it
    assert report.published == sum(count for _, count in QUEUES.values())
    for name in QUEUES:
        found = read_queue(broker.connection, into, name, "quorum", QUEUES[name][1])
        # a 4.3 quorum queue delivers every header table sorted by key (as published directly, too): the set counts
        assert header_order_free(found) == header_order_free(
            [expected_view(i, "classic") for i in delivery_order_on_4_3(name)]), name
    # and the plan said so for the queues whose order changes
    notes = {c["name"]: c["detail"] for c in plan.migration["changes"] if c["kind"] == "queue"}
    assert PRIORITY_ORDER_NOTE in notes["orders"] and PRIORITY_ORDER_NOTE not in notes["prio"]
    # the dead-letter topology works on 4.3: a message rejected from orders reaches dead-letters
    _publish_and_reject(broker, into)
    assert len(read_queue(broker.connection, into, "dead-letters", "quorum", 1)) == 1


def _publish_and_reject(broker: Broker, vhost: str) -> None:
    import pika

    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish("orders.x", "new", b"to be dead-lettered")
        for method, _props, _body in channel.consume("orders", inactivity_timeout=10):
            assert method is not None, "the message never reached orders"
            channel.basic_reject(method.delivery_tag, requeue=False)
            break
        channel.cancel()
