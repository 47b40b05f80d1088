"""Streams in a cluster are read from a node that holds one of their members (the leader or a replica).

A node without a member refuses to deliver a stream over either protocol. So the capture asks the stream protocol's
metadata where the members are, and reads from the first node of the connection's list that holds one; with no such
node listed it refuses before reading, naming the members. And a stream whose leader's node is lost mid-capture is
backed up whole while its replicas elect another leader, the stream itself unchanged.
"""

from __future__ import annotations

import pika
import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.errors import StreamMemberUnreachableError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.cluster.test_backup_faults import leader_of, run_until_complete
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, backed_up
from tests.restore.helpers import expected_views, publish, read_queue

pytestmark = pytest.mark.broker
#: Three staging chunks (a chunk ends at 5,000 deliveries), so a fault can land between two of them.
COUNT = 12_000


def declare_stream(node, vhost: str, name: str, members: int | None = None) -> None:
    """A stream led by ``node`` (it is declared through it), with ``members`` members (all nodes when None)."""
    arguments = {"x-queue-type": "stream", "x-queue-leader-locator": "client-local"}
    if members is not None:
        arguments["x-initial-cluster-size"] = members
    with pika.BlockingConnection(node.connection.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare(name, durable=True, arguments=arguments)


def settings(backup_id: str, location: str, vhost: str) -> BackupSettings:
    return BackupSettings(backup_id, location, selector=QueueSelector(vhosts=(vhost,)))


def test_a_stream_whose_only_member_is_on_node_3_is_read_from_node_3(cluster, cluster_vhost, tmp_path):
    behaviour, vhost = Behaviour(cluster.version), cluster_vhost
    node_3 = cluster.nodes[2]
    # Given a stream with a single member, on node 3
    declare_stream(node_3, vhost, "events", members=1)
    publish(node_3.connection, vhost, "events", 0, 300, decimal=False)
    assert leader_of(cluster, vhost, "events") == node_3.name

    # When a backup connects through the node list [node 1, node 2, node 3]
    manifest = BackupRun(cluster.connection(0, 1, 2), settings("member-1", (tmp_path / "b").as_uri(), vhost)).run()

    # Then the stream is read from node 3, byte-exact and in order, and left as it was
    storage = open_storage((tmp_path / "b").as_uri())
    assert manifest.queue(vhost, "events").message_count == 300
    expected = expected_views(300, "stream", behaviour)
    assert backed_up(storage, "member-1", vhost, "events") == expected
    assert stream_protocol.member_connection(cluster.connection(0, 1, 2), vhost, "events").first_node == node_3.connection.first_node
    assert read_queue(node_3.connection, vhost, "events", "stream", 300) == expected


def test_a_stream_with_no_member_on_the_listed_nodes_is_refused_before_it_is_read(cluster, cluster_vhost, tmp_path):
    vhost = cluster_vhost
    node_3 = cluster.nodes[2]
    declare_stream(node_3, vhost, "events", members=1)
    publish(node_3.connection, vhost, "events", 0, 30, decimal=False)
    location = (tmp_path / "b").as_uri()

    # When a backup connects through node 1 and node 2 only
    with pytest.raises(StreamMemberUnreachableError) as refused:
        BackupRun(cluster.connection(0, 1), settings("member-2", location, vhost)).run()

    # Then it refuses the stream saying where its member is and what to do, and completes nothing
    assert_clear_failure(refused.value, StreamMemberUnreachableError, f":{node_3.connection.stream_port}",
                         "list one of them in the connection's hosts")
    assert ManifestStore(open_storage(location)).load("member-2").completed_at is None
    assert len(read_queue(node_3.connection, vhost, "events", "stream", 30)) == 30


def test_the_streams_leader_node_stopped_mid_capture_then_the_stream_is_backed_up_whole_and_unchanged(
        cluster, cluster_vhost, tmp_path):
    behaviour, vhost = Behaviour(cluster.version), cluster_vhost
    node_1, node_2, _ = cluster.nodes
    # Given a stream with a member on each node, led by node 2
    declare_stream(node_2, vhost, "events")
    publish(node_2.connection, vhost, "events", 0, COUNT, decimal=False)
    assert leader_of(cluster, vhost, "events") == node_2.name
    storage = faults.TriggerStorage(open_storage((tmp_path / "b").as_uri()))

    # When node 2 stops once the capture (reading node 1's replica) has staged its first chunk
    storage.arm(lambda op, key: op == "put" and key.endswith("chunk-00000001.zst"), node_2.stop)
    failures: list[str] = []
    try:
        manifest = run_until_complete(settings("member-3", storage.url, vhost), cluster.connection, storage, failures)
        assert storage.fired_at is not None
    finally:
        node_2.start()

    # Then the backup holds the whole stream, byte-exact and in order, through at most a re-run
    expected = expected_views(COUNT, "stream", behaviour)
    assert manifest.queue(vhost, "events").message_count == COUNT
    assert backed_up(storage, "member-3", vhost, "events") == expected
    assert len(failures) <= 1, failures
    # And the stream holds every message once, in order (offsets 0..COUNT-1: nothing appended, nothing lost)
    assert read_queue(node_1.connection, vhost, "events", "stream", COUNT) == expected
    assert stream_protocol.stream_tail(node_1.connection, vhost, "events") == COUNT - 1
