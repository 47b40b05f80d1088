"""Nodes of the cluster lost while a backup captures: the quorum queue's leader, and every node in turn.

Each fault lands from inside the capture's own storage call (a staged chunk's put, ``TriggerStorage``), so at a
known point of the capture while it holds the rest of the queue unacknowledged, never wherever a timer falls. The
backup connects through the node list [node 1, node 2, node 3], as a scheduled task with ``hosts`` does.

After each: the backup is complete and byte-exact, either at once or after runs that failed saying "Re-run the same
backup_id" (the task's retries); the source holds every message, in its order, once (none dead-lettered or dropped),
with the delivery counts the broker's returns explain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.capture.errors import CaptureInterruptedError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.cluster.conftest import Cluster
from tests.cluster.nodes import ClusterNode
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, backed_up, header_order_free, published, without_broker_headers
from tests.reliability.test_broker_faults import as_delivered
from tests.restore.helpers import declare, publish, read_queue, ready_count

pytestmark = pytest.mark.broker
COUNT, SIZE = 3_000, 6_144  # three staging chunks per queue (a chunk ends at 5,000 deliveries or 8 MiB staged)
#: A run interrupted by each of the three restarts, then one that completes.
MAX_RUNS = 4


def leader_of(cluster: Cluster, vhost: str, queue: str) -> str:
    """The node leading a quorum queue or a stream, as the management API reports it (its figures lag a few seconds;
    RabbitMQ 3.10 names a stream's leader as its ``node`` only)."""
    deadline = time.monotonic() + 30
    while True:
        info = cluster.nodes[0].api("GET", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}").json()
        leader = info.get("leader") or (info.get("node") if info.get("type") == "stream" else None)
        if (leader and leader != "undefined") or time.monotonic() > deadline:  # "undefined" until its stats arrive
            return str(leader)
        time.sleep(0.5)


def restart(node: ClusterNode) -> None:
    """Stop the node, then start it again (its data kept): one step of a rolling restart."""
    node.stop()
    node.start()


def source_state(cluster: Cluster, vhost: str, queue: str, queue_type: str, behaviour: Behaviour) -> tuple[list[tuple], list[int]]:
    """Every message of the source queue in order (read through node 1, so consumed: the test's last look), with the
    publisher's header order where the broker's own re-encoding sorted it, and each one's ``x-delivery-count``."""
    views, counts = without_broker_headers(read_queue(cluster.nodes[0].connection, vhost, queue, queue_type, COUNT,
                                                      broker_headers=True))
    return (header_order_free(views) if behaviour.sorts_headers(queue_type, returned=True) else views), counts


def expected_source(behaviour: Behaviour, queue_type: str, persistent: bool = False) -> list[tuple]:
    views = as_delivered(behaviour, queue_type, published(COUNT, SIZE, persistent=persistent), returned=True)
    return header_order_free(views) if behaviour.sorts_headers(queue_type, returned=True) else views


def run_until_complete(settings: BackupSettings, connect: Callable, storage, failures: list[str]):
    """Run the backup as the task and its retries do; every failed run must say to re-run the same backup_id."""
    for _ in range(MAX_RUNS):
        try:
            return BackupRun(connect(), settings, storage).run()
        except CaptureInterruptedError as failed:
            assert_clear_failure(failed, CaptureInterruptedError, "Re-run the same backup_id")
            assert ManifestStore(storage).load(settings.backup_id).completed_at is None
            failures.append(str(failed))
    raise AssertionError(f"no run of {MAX_RUNS} completed: {failures}")


def test_the_quorum_leader_stopped_mid_capture_then_every_message_is_backed_up_and_kept(cluster, cluster_vhost, tmp_path):
    behaviour = Behaviour(cluster.version)
    vhost, node_2 = cluster_vhost, cluster.nodes[1]
    # Given a quorum queue led by node 2, holding messages nobody has received yet (no delivery count)
    declare(node_2.connection, vhost, {"orders": "quorum"})
    publish(node_2.connection, vhost, "orders", 0, COUNT, SIZE)
    assert leader_of(cluster, vhost, "orders") == node_2.name
    assert ready_count(node_2.connection, vhost, "orders") == COUNT
    storage = faults.TriggerStorage(open_storage((tmp_path / "b").as_uri()))
    settings = BackupSettings("leader-1", storage.url, selector=QueueSelector(vhosts=(vhost,)),
                              allow_delivery_count_increase=behaviour.backup_leaves_out_by_default("quorum"))

    # When node 2 stops once the capture (connected to node 1) has staged its first chunk and holds the rest
    storage.arm(lambda op, key: op == "put" and key.endswith("chunk-00000001.zst"), node_2.stop)
    failures: list[str] = []
    try:
        manifest = run_until_complete(settings, cluster.connection, storage, failures)
        assert storage.fired_at is not None
        # (another node leads now, elected while the messages were held)
        assert leader_of(cluster, vhost, "orders") in {cluster.nodes[0].name, cluster.nodes[2].name}
    finally:
        node_2.start()

    # Then the backup is complete and holds every message once, in order, byte-exact
    assert manifest.completed_at is not None and manifest.queue(vhost, "orders").message_count == COUNT
    expected = expected_source(behaviour, "quorum")
    assert header_order_free(backed_up(storage, "leader-1", vhost, "orders")) == header_order_free(expected)
    # And the source holds every message in order once, none dead-lettered; each counts the returns it had
    source, delivery_counts = source_state(cluster, vhost, "orders", "quorum", behaviour)
    assert source == expected
    assert set(delivery_counts) == {len(failures) + behaviour.returns_count("quorum")}, failures


def test_a_rolling_restart_of_the_three_nodes_mid_backup_then_the_backup_completes_and_the_source_is_unchanged(
        cluster, cluster_vhost, tmp_path):
    """Node 2 restarts at the first chunk staged of the classic queue it holds, node 3 at the first staged of the
    quorum queue it leads, node 1 (the capture's own) at the quorum queue's next: each restart lands on a capture
    holding messages, and is over (the node back in the cluster) before the capture goes on, as an upgrade rolled
    through the nodes one at a time."""
    behaviour = Behaviour(cluster.version)
    vhost = cluster_vhost
    node_1, node_2, node_3 = cluster.nodes
    queues = {"orders": "classic", "payments": "quorum"}  # captured in this order
    # Given a classic queue on node 2 and a quorum queue led by node 3, of persistent messages (a classic queue keeps
    # only those across its node's restart)
    declare(node_2.connection, vhost, {"orders": "classic"})
    declare(node_3.connection, vhost, {"payments": "quorum"})
    for name, node in (("orders", node_2), ("payments", node_3)):
        publish(node.connection, vhost, name, 0, COUNT, SIZE, persistent=True)
        assert ready_count(node_1.connection, vhost, name) == COUNT
    assert leader_of(cluster, vhost, "payments") == node_3.name
    storage = faults.TriggerStorage(open_storage((tmp_path / "b").as_uri()))
    settings = BackupSettings("rolling-1", storage.url, selector=QueueSelector(vhosts=(vhost,)),
                              allow_delivery_count_increase=behaviour.backup_leaves_out_by_default("quorum"))

    # When the nodes restart one at a time, each at a chunk the capture stages
    roll = [(node_2, "orders"), (node_3, "payments"), (node_1, "payments")]
    restarted: list[str] = []

    def arm_next() -> None:
        node, queue = roll[len(restarted)]
        storage.arm(lambda op, key: op == "put" and f"/staging/{vhost}/{queue}/chunk-" in key, lambda: restart_then_arm(node))

    def restart_then_arm(node: ClusterNode) -> None:
        restart(node)
        restarted.append(node.name)
        if len(restarted) < len(roll):
            arm_next()

    arm_next()
    failures: list[str] = []
    try:
        manifest = run_until_complete(settings, cluster.connection, storage, failures)
    finally:
        for node in cluster.nodes:  # a failed assertion mid-roll leaves no node down
            if node.name not in cluster.running():
                node.start()

    # Then all three restarted during the backup, which completed, every queue byte-exact
    assert restarted == [node.name for node, _ in roll], failures
    assert manifest.completed_at is not None
    for name, queue_type in queues.items():
        expected = expected_source(behaviour, queue_type, persistent=True)
        assert manifest.queue(vhost, name).message_count == COUNT
        assert header_order_free(backed_up(storage, "rolling-1", vhost, name)) == header_order_free(expected), name
        # And the source holds every message in order once
        source, delivery_counts = source_state(cluster, vhost, name, queue_type, behaviour)
        assert source == expected, name
        # (a quorum queue counts the capture's own return where returns count, not the return of the messages a
        # consumer held when its node was stopped: measured on 4.3.6 and 3.10.8)
        counted = behaviour.returns_count(queue_type) if queue_type == "quorum" else 0
        assert set(delivery_counts) == {counted}, (name, failures)
