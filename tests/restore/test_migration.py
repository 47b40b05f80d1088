"""Migrating a vhost of mirrored classic queues into another cluster as quorum queues, every message carried across.

The source (node 1, RabbitMQ 3.10) holds what an operator leaving mirroring has: an ``ha-mode`` policy beside other
keys, a queue declared with an ``x-ha-mode`` argument, a ``queue-mode: lazy`` policy, a priority queue and a
dead-letter topology. It is backed up once for the module and restored into the second node with the migration's
transformations.
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
from tests.broker.conftest import Broker
from tests.restore.helpers import backup, expected_view, read_queue, ready_count
from tests.restore.migration_source import BINDINGS, MIGRATION, QUEUES, set_up, stored_order
from tests.restore.migration_source import path as _path

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def source(broker, tmp_path_factory):
    """The source vhost set up and backed up as ``mig-1``: (vhost, location)."""
    vhost = f"mig-{uuid.uuid4().hex[:8]}"
    set_up(broker, vhost)
    location = tmp_path_factory.mktemp("mig").as_uri()
    backup(broker.connection, location, "mig-1", vhost)
    yield vhost, location
    broker.api("DELETE", _path("vhosts", vhost))


@pytest.fixture
def target(second_broker):
    """The name of a vhost of the second node that the restore creates; deleted afterwards."""
    names: list[str] = []

    def make() -> str:
        names.append(f"mig-t-{uuid.uuid4().hex[:8]}")
        return names[-1]

    yield make
    for name in names:
        try:
            second_broker.api("DELETE", _path("vhosts", name))
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


def _messages_are_exact(node: Broker, vhost: str, name: str, queue_type: str) -> None:
    count = QUEUES[name][1]
    found = read_queue(node.connection, vhost, name, queue_type, count)
    assert found == [expected_view(i, "classic") for i in stored_order(name)], name


def test_mirrored_classic_queues_become_quorum_with_their_bindings_policies_and_every_message(
        source, second_broker, target, tmp_path):
    # Given the backup of the source vhost; When it is restored into the second node with the migration (defaults)
    into = target()
    run = RestoreRun(second_broker.connection, _settings(source, into, checkpoint_state=str(tmp_path / "r.db")))
    with pytest.raises(MigrationRefusedError) as refused:
        run.run()

    # Then the priority queue was refused with its reason, and the restore went on for the rest
    assert "prio" in str(refused.value) and "x-max-priority" in str(refused.value) and "accept_losses" in str(refused.value)
    queues = _queues(second_broker, into)
    assert sorted(queues) == ["audit", "dead-letters", "orders", "payments"]
    # and every classic queue that can become quorum is quorum, its arguments kept but the mirroring ones
    assert {q["type"] for q in queues.values()} == {"quorum"}
    assert queues["orders"]["arguments"] == {"x-dead-letter-exchange": "dlx", "x-queue-type": "quorum"}
    assert queues["payments"]["arguments"] == {"x-queue-type": "quorum"}
    # with its bindings (the priority queue's left out with it)
    bindings = {(b["source"], b["destination"], b["routing_key"])
                for b in second_broker.api("GET", _path("bindings", into)).json() if b["source"]}
    assert bindings == {b for b in BINDINGS if b[1] != "prio"}
    # and the remaining policy keys: no mirroring key, and no empty policy (the lazy one is gone)
    policies = {p["name"]: p["definition"] for p in second_broker.api("GET", _path("policies", into)).json()}
    assert policies == {"mirrored": {"max-length": 1000}}
    assert _sampled(second_broker, into, "orders")["effective_policy_definition"] == {"max-length": 1000}
    # and every message is there byte-exact, in order, once
    for name, queue in queues.items():
        _messages_are_exact(second_broker, into, name, queue["type"])

    # When the user asks to keep the priority queue's type and runs the restore again
    again = RestoreRun(second_broker.connection, _settings(source, into, checkpoint_state=str(tmp_path / "r.db"),
                                                            queue_types={"*": "quorum", "prio": "classic"})).run()

    # Then it is restored as it was: classic, its priorities, its binding and its messages in their order
    prio = second_broker.api("GET", _path("queues", into, "prio")).json()
    assert prio["type"] == "classic" and prio["arguments"] == {"x-max-priority": 5}
    assert ("orders.x", "prio", "urgent") in {(b["source"], b["destination"], b["routing_key"])
                                             for b in second_broker.api("GET", _path("bindings", into)).json()}
    _messages_are_exact(second_broker, into, "prio", "classic")
    # and the queues restored before got nothing twice (the test consumed them: they stay empty)
    assert {q["source_queue"]: q["published"] for q in again.queues} == {
        "audit": 0, "dead-letters": 0, "orders": 0, "payments": 0, "prio": QUEUES["prio"][1]}
    for name in ("orders", "payments", "audit", "dead-letters"):
        assert ready_count(second_broker.connection, into, name) == 0


def test_a_priority_queue_whose_loss_is_accepted_becomes_quorum_in_stored_order(source, second_broker, target, tmp_path):
    # Given the backup; When only the priority queue is restored with its loss accepted by name
    into = target()
    report = RestoreRun(second_broker.connection, _settings(
        source, into, queues=["prio"], accept_losses=["prio:x-max-priority"],
        checkpoint_state=str(tmp_path / "r.db"))).run()

    # Then it is a quorum queue without the argument, holding every message in the order the backup stored them
    prio = second_broker.api("GET", _path("queues", into, "prio")).json()
    assert prio["type"] == "quorum" and prio["arguments"] == {"x-queue-type": "quorum"}
    assert report.published == QUEUES["prio"][1] and report.migration["refused"] == []
    assert any(c["name"] == "prio" and "loss accepted" in c["detail"] for c in report.migration["changes"])
    _messages_are_exact(second_broker, into, "prio", "quorum")


def test_the_plan_and_approval_show_the_diff_and_a_dry_run_stores_an_importable_file_and_changes_nothing(
        source, second_broker, target, tmp_path):
    # Given the second node's definitions before
    into, by_hand = target(), target()
    before = second_broker.api("GET", "definitions").json()

    # When the migration is planned and run as a dry run
    settings = _settings(source, into, dry_run=True, checkpoint_state=str(tmp_path / "r.db"))
    run = RestoreRun(second_broker.connection, settings)
    plan = run.plan()
    report = run.report(plan, [run.publish(plan, q) for q in plan.queues], run.definitions(plan))

    # Then the plan holds each transformation's changes and the diff against the backup's definitions
    changes = {(c["transformation"], c["kind"], c["name"], c["action"]) for c in plan.migration["changes"]}
    assert {("convert_to_quorum", "queue", "orders", "changed"), ("convert_to_quorum", "queue", "prio", "refused"),
            ("strip_mirroring", "policy", "mirrored", "changed"), ("strip_mirroring", "queue", "payments", "changed"),
            ("drop_empty_policies", "policy", "lazy", "dropped")} <= changes
    assert [q.target_queue_type for q in plan.queues if q.source_queue == "orders"] == ["quorum"]
    assert "prio" not in {q.source_queue for q in plan.queues}
    assert any(line.startswith("-policy") and '"ha-mode":"all"' in line for line in plan.migration["diff"])
    assert any(line.startswith("+queue") and '"x-queue-type":"quorum"' in line for line in plan.migration["diff"])
    # and the approval request shows both, and the refusal
    body = approval_body(plan, settings, "rabbitmq_target")
    assert "### Transformations" in body and "**1 queues are refused**" in body and "`classic -> quorum`" in body
    assert '-policy {"apply-to":"queues","definition":{"ha-mode":"all"' in body
    # and nothing changed on the target
    assert report.dry_run
    assert second_broker.api("GET", "definitions").json() == before
    # and the transformed definitions were stored where the restore keeps its definitions records
    storage = open_storage(source[1])
    key = report.definitions["transformed_key"]
    assert key.startswith("mig-1/definitions/transformed-") and key.endswith(".json")
    document = orjson.loads(storage.get(key))
    assert {q["name"]: q["arguments"].get("x-queue-type") for q in document["queues"]} == {
        "orders": "quorum", "payments": "quorum", "audit": "quorum", "dead-letters": "quorum"}

    # When that file is imported by hand (under another vhost name)
    text = storage.get(key).decode().replace(f'"{into}"', f'"{by_hand}"')
    second_broker.api("POST", "definitions", data=text, headers={"content-type": "application/json"})

    # Then the broker takes it: the queues are quorum queues
    assert {q["name"]: q["type"] for q in _queues(second_broker, by_hand).values()} == {
        "orders": "quorum", "payments": "quorum", "audit": "quorum", "dead-letters": "quorum"}
