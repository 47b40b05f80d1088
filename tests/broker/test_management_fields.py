"""The management API fields the code decides from, read from the session's real node (3.10 or 4.3): the version,
each queue's type and arguments, its effective policy and operator policy, the delivery limit computed from them,
the message counts, the definitions export's queue types and version, the cluster identity and the stream consumers.

Each expectation comes from the broker itself where it says it (``rabbitmqctl version``; a 4.x quorum queue's own
``delivery_limit``; how many messages a ``max-length`` policy lets a queue keep) or from tests/broker/behaviour.py,
never from the code under test: a broker that reports these fields otherwise fails here before a backup decides
from them wrongly. The setup is shared by the module (one vhost, a few small queues): the management API shows a
queue's policy and counts only once its statistics refresh (about 5 s), so they are waited for once."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pika
import pytest

from airflow_rbak.broker.discovery import (
    QueueInfo,
    describe_queue,
    discover_queues,
    effective_delivery_limit,
    parse_version,
)
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.preflight import ROLES
from airflow_rbak.capture.capture_options import management_counts
from airflow_rbak.capture.queue_features import CaptureMethod, Facts, decide
from airflow_rbak.restore.transformations import queue_type as exported_queue_type
from tests.broker.behaviour import Behaviour
from tests.broker.conftest import Broker

pytestmark = pytest.mark.broker

#: name -> (type, arguments, messages published); "pol-*" match the policy LIMITS, "cap-c" the policy CAP.
QUEUES: dict[str, tuple[str, dict[str, Any], int]] = {
    "c-plain": ("classic", {}, 2),
    "c-arg": ("classic", {"x-max-length": 7}, 0),
    "q-plain": ("quorum", {}, 0),
    "q-arg": ("quorum", {"x-delivery-limit": 4}, 3),
    "pol-q": ("quorum", {}, 0),
    "pol-c": ("classic", {}, 150),
    "cap-c": ("classic", {}, 15),
    "s": ("stream", {}, 0),
}
#: A policy with a key only quorum queues take (delivery-limit): RabbitMQ applies a policy to a queue only if the
#: queue's type takes every key, so it reaches "pol-q" and not "pol-c" (whose 150 messages it would otherwise refuse).
LIMITS = {"pattern": "^pol-", "definition": {"delivery-limit": 3, "max-length": 100, "overflow": "reject-publish"},
          "apply-to": "queues", "priority": 1}
CAP = {"pattern": "^cap-", "definition": {"max-length": 10}, "apply-to": "queues", "priority": 1}
OPERATOR = {"pattern": "^pol-q$", "definition": {"delivery-limit": 5}, "apply-to": "queues", "priority": 1}
#: From 4.0 a negative delivery limit means none, and the broker reports the limit it applies: quorum queues that
#: combine a negative or zero limit with the others (argument, policy "unlimited", operator policies), declared only
#: there (3.10 gives a negative limit no such meaning and reports none).
UNLIMITED = "q-unlimited"
QUORUM_4X = {UNLIMITED: {"x-delivery-limit": -1}, "q-zero": {"x-delivery-limit": 0}, "unl-plain": {},
             "unl-arg": {"x-delivery-limit": 6}, "unl-op": {}, "cap-op": {}, "plain-opneg": {},
             "arg-opneg": {"x-delivery-limit": 7}}
UNLIMITED_POLICY = {"pattern": "^unl-", "definition": {"delivery-limit": -1}, "apply-to": "queues", "priority": 1}
OPERATOR_2 = {"pattern": "-op$", "definition": {"delivery-limit": 2}, "apply-to": "queues", "priority": 1}
OPERATOR_NONE = {"pattern": "-opneg$", "definition": {"delivery-limit": -1}, "apply-to": "queues", "priority": 2}


def _wait_for(what: str, check: Any, timeout: float = 40.0) -> Any:
    """``check()`` once it is truthy: the management API's statistics lag the broker by up to a refresh."""
    deadline = time.monotonic() + timeout
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found, f"the management API never showed {what} within {timeout:.0f} s"
    return found


@pytest.fixture(scope="module")
def described(broker: Broker) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """A vhost of the module's queues, policies and messages, and each queue as the management API lists it once its
    policies and counts show."""
    behaviour = Behaviour(broker.version)
    vhost = f"mf-{uuid.uuid4().hex[:10]}"
    v = quote(vhost, safe="")
    broker.api("PUT", f"vhosts/{v}")
    broker.api("PUT", f"permissions/{v}/{quote(broker.connection.username, safe='')}",
               json={"configure": ".*", "write": ".*", "read": ".*"})
    broker.api("PUT", f"policies/{v}/limits", json=LIMITS)
    broker.api("PUT", f"policies/{v}/cap", json=CAP)
    broker.api("PUT", f"operator-policies/{v}/operator", json=OPERATOR)
    queues = dict(QUEUES)
    if behaviour.reports_delivery_limit():
        broker.api("PUT", f"policies/{v}/unlimited", json=UNLIMITED_POLICY)
        broker.api("PUT", f"operator-policies/{v}/two", json=OPERATOR_2)
        broker.api("PUT", f"operator-policies/{v}/none", json=OPERATOR_NONE)
        queues.update({name: ("quorum", arguments, 0) for name, arguments in QUORUM_4X.items()})
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for name, (kind, arguments, count) in queues.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": kind, **arguments})
            for i in range(count):
                channel.basic_publish("", name, f"{name}-{i}".encode())

    def listed() -> dict[str, dict[str, Any]] | None:
        rows = {q["name"]: q for q in broker.api("GET", f"queues/{v}").json()}
        shown = all(rows.get(n, {}).get("policy") for n in ("pol-q", "cap-c")) and rows.get("q-arg", {}).get("messages") == 3
        shown = shown and all(rows.get(n, {}).get("operator_policy") for n in queues if n.endswith(("-op", "-opneg")))
        return rows if shown else None

    try:
        yield vhost, _wait_for("the policies of pol-q and cap-c and the 3 messages of q-arg", listed)
    finally:
        broker.api("DELETE", f"vhosts/{v}")


def test_the_version_the_code_reads_is_the_one_the_node_runs(broker: Broker, behaviour: Behaviour):
    with ManagementClient(broker.connection) as client:
        version = client.version()

    assert version == broker.ctl("version").splitlines()[-1].strip()
    assert parse_version(version)[:2] == behaviour.series


def test_each_queue_type_and_its_arguments_are_read_as_declared(broker: Broker, described):
    vhost, _ = described
    with ManagementClient(broker.connection) as client:
        found = {q.name: q for q in discover_queues(client)}
        definitions = json.loads(client.definitions_raw())

    for name, (kind, arguments, _) in QUEUES.items():
        info = found[name]
        assert (info.vhost, info.queue_type) == (vhost, kind), name
        assert info.arguments == {"x-queue-type": kind, **arguments}, name
        assert (info.durable, info.auto_delete, info.exclusive) == (True, False, False), name
    # The definitions export, as a restore and a repository rebuild read it: each queue's type and the version
    exported = {q["name"]: exported_queue_type(q) for q in definitions["queues"] if q["vhost"] == vhost}
    assert {n: exported[n] for n in QUEUES} == {n: kind for n, (kind, _, _) in QUEUES.items()}
    assert (definitions.get("rabbitmq_version") or definitions.get("rabbit_version")) == broker.version


def test_the_delivery_limit_the_code_computes_is_the_one_the_broker_applies(broker: Broker, behaviour: Behaviour,
                                                                             described):
    vhost, listed = described
    version = parse_version(broker.version)
    with ManagementClient(broker.connection) as client:
        infos = {name: describe_queue(client, vhost, name) for name in listed}

    # The policy and the operator policy are read as the broker resolved them; the smallest limit wins
    assert infos["pol-q"].effective_policy == LIMITS["definition"]
    assert infos["pol-q"].operator_policy == OPERATOR["definition"]
    computed = {name: effective_delivery_limit(infos[name], version) for name in ("q-plain", "q-arg", "pol-q")}
    assert computed == {"q-plain": behaviour.default_delivery_limit("quorum"), "q-arg": 4, "pol-q": 3}
    if behaviour.reports_delivery_limit():
        # And where the broker says which limit it applies, the code computes exactly that one, for every quorum queue
        quorum = [name for name, row in listed.items() if row["type"] == "quorum"]
        applied = {name: None if listed[name]["delivery_limit"] == "unlimited" else listed[name]["delivery_limit"]
                   for name in quorum}
        assert {name: effective_delivery_limit(infos[name], version) for name in quorum} == applied
        assert applied[UNLIMITED] is None and applied["cap-op"] == 2
    else:
        assert all("delivery_limit" not in row for row in listed.values())


def test_the_effective_policy_the_code_reads_is_the_one_the_broker_enforces(broker: Broker, described):
    vhost, listed = described
    with ManagementClient(broker.connection) as client:
        capped, uncapped = describe_queue(client, vhost, "cap-c"), describe_queue(client, vhost, "pol-c")
        limited = describe_queue(client, vhost, "pol-q")

    # cap-c: max-length 10 by policy, read as such, and the broker kept 10 of the 15 published
    assert (listed["cap-c"]["policy"], capped.effective_policy) == ("cap", CAP["definition"])
    assert _depth(broker, vhost, "cap-c") == 10
    # pol-c: the policy of a quorum-only key does not apply to a classic queue: none read, and none enforced
    # (150 messages kept, over its max-length of 100)
    assert (listed["pol-c"].get("policy"), uncapped.effective_policy) == (None, {})
    assert _depth(broker, vhost, "pol-c") == 150
    # So the backup decides from the bounds the broker enforces: pol-q, which refuses publishes over 100, is left out
    # (a held message does not count toward the bound); pol-c, bound by nothing, is read
    facts = Facts(broker.version, allow_delivery_count_increase=True)
    left_out = decide(limited, facts)
    assert left_out.method is CaptureMethod.LEAVE_OUT and "max-length with overflow reject-publish" in str(left_out.reason)
    assert decide(uncapped, facts).method is CaptureMethod.CONSUMERS


def test_the_message_counts_the_capture_reads_are_the_queues(broker: Broker, described):
    vhost, listed = described
    info = QueueInfo.from_api(listed["q-arg"])

    assert management_counts(broker.connection, info) == (3, 0)
    assert (info.messages, info.consumers) == (3, 0)


def test_the_cluster_identity_is_the_nodes_own_random_id(broker: Broker):
    with ManagementClient(broker.connection) as client:
        identity, again, name = client.cluster_identity(), client.cluster_identity(), client.cluster_name()

    # The broker's own random cluster id (3.8+), not the fallback of name and node that two clusters may share
    assert identity == again and identity.startswith("rabbitmq-cluster-id-"), identity
    assert isinstance(name, str) and name


def test_a_named_stream_consumer_is_listed_as_the_stream_capture_reads_it(broker: Broker, described):
    # Given a stream-protocol consumer named "reader-1" subscribed to the stream "s"
    vhost, _ = described
    with ManagementClient(broker.connection) as client:

        def listed() -> list[dict[str, Any]]:
            return _wait_for("the named stream consumer", lambda: client.stream_consumers(vhost))

        # When the management API lists the vhost's stream consumers while it is subscribed
        consumers = _while_subscribed(broker, vhost, "s", "reader-1", listed)

    # Then it is there with the two fields the stream capture reads to find its stored offset
    # (capture/stream_capture.py: consumer["queue"]["name"] and consumer["properties"]["name"])
    assert [(c.get("queue", {}).get("name"), (c.get("properties") or {}).get("name")) for c in consumers] == [("s", "reader-1")]


def _while_subscribed(broker: Broker, vhost: str, stream: str, name: str, check: Any) -> Any:
    """``check()`` run while a stream-protocol consumer with the subscription property ``name`` reads ``stream``."""
    import asyncio

    import rstream

    c = broker.connection

    async def main() -> Any:
        consumer = rstream.Consumer(host=c.host, port=c.stream_port, vhost=vhost, username=c.username, password=c.password)
        await consumer.start()
        try:
            await consumer.subscribe(stream, lambda message, context: None, properties={"name": name},
                                     offset_specification=rstream.ConsumerOffsetSpecification(rstream.OffsetType.FIRST))
            return await asyncio.to_thread(check)
        finally:
            await consumer.close()

    return asyncio.run(main())


def _depth(broker: Broker, vhost: str, queue: str) -> int:
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        return conn.channel().queue_declare(queue, passive=True).method.message_count


def test_the_backup_role_reads_every_queue_as_an_administrator_does_but_not_the_cluster_id(broker: Broker, described):
    # Given a user with exactly the backup role on the module's vhost (tests/broker/test_roles.py runs its backup)
    vhost, listed = described
    role, name = ROLES["backup"], f"fields-{uuid.uuid4().hex[:6]}"
    broker.api("PUT", f"users/{name}", json={"password": "Fields-Pw/1", "tags": role.tag})
    broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{name}",
               json={"configure": role.configure, "write": role.write, "read": role.read})
    try:
        # When it and the administrator describe every queue, and name the cluster
        with ManagementClient(replace(broker.connection, username=name, password="Fields-Pw/1")) as client:
            as_role = {q: describe_queue(client, vhost, q) for q in listed}
            role_identity = client.cluster_identity()
        with ManagementClient(broker.connection) as client:
            as_admin = {q: describe_queue(client, vhost, q) for q in listed}
            admin_identity, cluster_name = client.cluster_identity(), client.cluster_name()
    finally:
        broker.api("DELETE", f"users/{name}")

    # Then it reads the same types, arguments, policies and operator policies (the counts may have been resampled)
    assert {q: replace(i, messages=0, consumers=0) for q, i in as_role.items()} == \
        {q: replace(i, messages=0, consumers=0) for q, i in as_admin.items()}
    # But not the cluster's random id: it names the cluster by its name (docs/operations.md#least-privilege)
    assert role_identity != admin_identity and str(cluster_name) in role_identity
