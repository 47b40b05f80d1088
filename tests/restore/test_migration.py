"""Migrating a vhost of mirrored classic queues into another cluster as quorum queues, every message carried across.

The source (RabbitMQ 3.10: the session's node in a 3.10 session, ``broker_310`` beside a 4.x one) holds what an
operator leaving mirroring has: an ``ha-mode`` policy beside other keys, a queue declared with an ``x-ha-mode``
argument, a ``queue-mode: lazy`` policy, a priority queue and a dead-letter topology. It is backed up once for the
module and restored with the migration's transformations into another cluster: a second 3.10 node in a 3.10
session, the session's 4.0 or 4.3 node otherwise. What the target's version changes (``tests/broker/behaviour.py``):
a 3.10 quorum queue has no priorities, so the priority queue is refused unless its loss is accepted; a 4.x quorum
queue orders by priority, so it becomes quorum, and every converted queue delivers by priority (4.0: two levels).
"""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
import requests

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.errors import MigrationRefusedError
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.broker.conftest import Broker
from tests.reliability.expect import header_order_free
from tests.restore.helpers import backup, expected_view, read_queue, ready_count
from tests.restore.migration_source import BINDINGS, MIGRATION, QUEUES, set_up, stored_order
from tests.restore.migration_source import path as _path

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def source(broker_310, tmp_path_factory):
    """The source vhost set up on 3.10 and backed up as ``mig-1``: (vhost, location)."""
    vhost = f"mig-{uuid.uuid4().hex[:8]}"
    set_up(broker_310, vhost)
    location = tmp_path_factory.mktemp("mig").as_uri()
    backup(broker_310.connection, location, "mig-1", vhost)
    yield vhost, location
    broker_310.api("DELETE", _path("vhosts", vhost))


@pytest.fixture
def target_node(broker, broker_310, request):
    """The target cluster: a second 3.10 node in a 3.10 session (the source is the session's node), else the
    session's 4.x node (the source is the 3.10 node beside it)."""
    return request.getfixturevalue("second_broker") if broker_310 is broker else broker


@pytest.fixture
def target(target_node):
    """The name of a vhost of the second node that the restore creates; deleted afterwards."""
    names: list[str] = []

    def make() -> str:
        names.append(f"mig-t-{uuid.uuid4().hex[:8]}")
        return names[-1]

    yield make
    for name in names:
        try:
            target_node.api("DELETE", _path("vhosts", name))
        except requests.RequestException:
            pass


def _settings(source, target: str, **extra) -> RestoreRequest:
    vhost, location = source
    return RestoreRequest(storage_url=location, backup_id="mig-1", vhosts=[vhost], vhost_map={vhost: target},
                           restore_definitions=True, transformations=MIGRATION, **extra)


def _queues(node: Broker, vhost: str) -> dict[str, dict]:
    return {q["name"]: q for q in node.api("GET", _path("queues", vhost)).json()}


def _sampled(node: Broker, vhost: str, name: str) -> dict:
    """A queue's info once the management API has sampled it (a new quorum queue's first seconds lack its policy)."""
    deadline = time.monotonic() + 60  # a hang guard: the sample comes every few seconds
    while True:
        info = node.api("GET", _path("queues", vhost, name)).json()
        if "effective_policy_definition" in info or time.monotonic() > deadline:
            return info
        time.sleep(0.5)


def _messages_are_exact(node: Broker, behaviour: Behaviour, vhost: str, name: str, queue_type: str) -> None:
    """Every message of ``name`` byte-exact, once, in the order the target delivers the stored order: the same on a
    classic queue and a 3.10 quorum queue, by priority on a 4.x quorum queue (header tables sorted by key on 4.x)."""
    stored = stored_order(name)
    order = behaviour.delivery_order(queue_type, [i % 10 for i in stored])  # helpers.props_of: priority i % 10
    expected = [expected_view(stored[n], "classic") for n in order]
    found = read_queue(node.connection, vhost, name, queue_type, len(stored))
    same = header_order_free if behaviour.sorts_headers(queue_type) else list
    assert same(found) == same(expected), name


def test_mirrored_classic_queues_become_quorum_with_their_bindings_policies_and_every_message(
        source, target_node, behaviour, target, tmp_path):
    # Given the backup of the source vhost; When it is restored into the target with the migration (defaults)
    into = target()
    run = RestoreRun(target_node.connection, _settings(source, into, checkpoint_state=str(tmp_path / "r.db")))
    prioritised = behaviour.quorum_orders_priorities()
    if prioritised:  # 4.x: a quorum queue orders by priority, so the priority queue converts like the others
        run.run()
    else:
        with pytest.raises(MigrationRefusedError) as refused:
            run.run()
        # 3.10: the priority queue was refused with its reason, and the restore went on for the rest
        assert "prio" in str(refused.value) and "x-max-priority" in str(refused.value)
        assert "accept_losses" in str(refused.value)

    queues = _queues(target_node, into)
    converted = sorted(QUEUES) if prioritised else ["audit", "dead-letters", "orders", "payments"]
    assert sorted(queues) == converted
    # and every classic queue that can become quorum is quorum, its arguments kept but the mirroring ones
    assert {q["type"] for q in queues.values()} == {"quorum"}
    assert queues["orders"]["arguments"] == {"x-dead-letter-exchange": "dlx", "x-queue-type": "quorum"}
    assert queues["payments"]["arguments"] == {"x-queue-type": "quorum"}
    if prioritised:
        assert queues["prio"]["arguments"] == {"x-queue-type": "quorum"}
    # with its bindings (a refused priority queue's left out with it)
    bindings = {(b["source"], b["destination"], b["routing_key"])
                for b in target_node.api("GET", _path("bindings", into)).json() if b["source"]}
    assert bindings == {b for b in BINDINGS if b[1] in converted}
    # and the remaining policy keys: no mirroring key, and no empty policy (the lazy one is gone)
    policies = {p["name"]: p["definition"] for p in target_node.api("GET", _path("policies", into)).json()}
    assert policies == {"mirrored": {"max-length": 1000}}
    assert _sampled(target_node, into, "orders")["effective_policy_definition"] == {"max-length": 1000}
    # and every message is there byte-exact, once, in the order the target delivers what the backup stored
    for name, queue in queues.items():
        _messages_are_exact(target_node, behaviour, into, name, queue["type"])
    if prioritised:
        return

    # When the user asks to keep the priority queue's type and runs the restore again
    again = RestoreRun(target_node.connection, _settings(source, into, checkpoint_state=str(tmp_path / "r.db"),
                                                          queue_types={"*": "quorum", "prio": "classic"})).run()

    # Then it is restored as it was: classic, its priorities, its binding and its messages in their order
    prio = target_node.api("GET", _path("queues", into, "prio")).json()
    assert prio["type"] == "classic" and prio["arguments"] == {"x-max-priority": 5}
    assert ("orders.x", "prio", "urgent") in {(b["source"], b["destination"], b["routing_key"])
                                             for b in target_node.api("GET", _path("bindings", into)).json()}
    _messages_are_exact(target_node, behaviour, into, "prio", "classic")
    # and the queues restored before got nothing twice (the test consumed them: they stay empty)
    assert {q["source_queue"]: q["published"] for q in again.queues} == {
        "audit": 0, "dead-letters": 0, "orders": 0, "payments": 0, "prio": QUEUES["prio"][1]}
    for name in ("orders", "payments", "audit", "dead-letters"):
        assert ready_count(target_node.connection, into, name) == 0


def test_a_priority_queue_whose_loss_is_accepted_becomes_quorum_in_stored_order(source, target_node, behaviour, target,
                                                                                tmp_path):
    # Given the backup; When only the priority queue is restored with its loss accepted by name
    into = target()
    report = RestoreRun(target_node.connection, _settings(
        source, into, queues=["prio"], accept_losses=["prio:x-max-priority"],
        checkpoint_state=str(tmp_path / "r.db"))).run()

    # Then it is a quorum queue without the argument, holding every message in the order the backup stored them
    # (its priorities, 0-3, are all one 4.0 level and already highest first for 4.3)
    prio = target_node.api("GET", _path("queues", into, "prio")).json()
    assert prio["type"] == "quorum" and prio["arguments"] == {"x-queue-type": "quorum"}
    assert report.published == QUEUES["prio"][1] and report.to_json()["migration"]["refused"] == []
    (change,) = [c for c in report.to_json()["migration"]["changes"] if c["name"] == "prio"]
    if behaviour.quorum_orders_priorities():  # nothing to lose on 4.x: the change says how the target orders them
        assert "loss accepted" not in change["detail"] and "order messages by priority" in change["detail"]
    else:
        assert "loss accepted" in change["detail"]
    _messages_are_exact(target_node, behaviour, into, "prio", "quorum")


def test_the_plan_and_approval_show_the_diff_and_a_dry_run_stores_an_importable_file_and_changes_nothing(
        source, target_node, behaviour, target, tmp_path):
    # Given the target's definitions before
    into, by_hand = target(), target()
    before = target_node.api("GET", "definitions").json()

    # When the migration is planned and run as a dry run
    settings = _settings(source, into, dry_run=True, checkpoint_state=str(tmp_path / "r.db"))
    run = RestoreRun(target_node.connection, settings)
    plan = run.plan()
    report = run.report(plan, [run.publish(plan, q) for q in plan.queues], run.definitions(plan))

    # Then the plan holds each transformation's changes and the diff against the backup's definitions
    # (the priority queue: refused into 3.10, whose quorum queues have no priorities; converted into 4.x)
    prioritised = behaviour.quorum_orders_priorities()
    changes = {(c["transformation"], c["kind"], c["name"], c["action"]) for c in plan.migration["changes"]}
    assert {("convert_to_quorum", "queue", "orders", "changed"),
            ("convert_to_quorum", "queue", "prio", "changed" if prioritised else "refused"),
            ("strip_mirroring", "policy", "mirrored", "changed"), ("strip_mirroring", "queue", "payments", "changed"),
            ("drop_empty_policies", "policy", "lazy", "dropped")} <= changes
    assert [q.target_queue_type for q in plan.queues if q.source_queue == "orders"] == ["quorum"]
    assert ("prio" in {q.source_queue for q in plan.queues}) == prioritised
    assert any(line.startswith("-policy") and '"ha-mode":"all"' in line for line in plan.migration["diff"])
    assert any(line.startswith("+queue") and '"x-queue-type":"quorum"' in line for line in plan.migration["diff"])
    # and the approval request shows both, and the refusal (3.10)
    body = approval_body(plan, settings, "rabbitmq_target")
    assert "### Transformations" in body and "`classic -> quorum`" in body
    assert ("**1 queues are refused**" in body) != prioritised
    assert '-policy {"apply-to":"queues","definition":{"ha-mode":"all"' in body
    # and nothing changed on the target
    assert report.dry_run
    assert target_node.api("GET", "definitions").json() == before
    # and the transformed definitions were stored where the restore keeps its definitions records
    storage = open_storage(source[1])
    key = report.definitions["transformed_key"]
    assert key.startswith("mig-1/definitions/transformed-") and key.endswith(".json")
    document = orjson.loads(storage.get(key))
    converted = {"orders": "quorum", "payments": "quorum", "audit": "quorum", "dead-letters": "quorum",
                 **({"prio": "quorum"} if prioritised else {})}
    assert {q["name"]: q["arguments"].get("x-queue-type") for q in document["queues"]} == converted

    # When that file is imported by hand (under another vhost name)
    text = storage.get(key).decode().replace(f'"{into}"', f'"{by_hand}"')
    target_node.api("POST", "definitions", data=text, headers={"content-type": "application/json"})

    # Then the broker takes it: the queues are quorum queues
    assert {q["name"]: q["type"] for q in _queues(target_node, by_hand).values()} == converted
