"""A connection that lists the cluster's nodes reaches the cluster while its first node is down: AMQP, the
management API and the stream port each fail over to the next node, and a backup through it is byte-exact; so is
one through a TCP proxy in front of the three nodes (one address, as a load balancer gives)."""

from __future__ import annotations

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.backup.test_run import expected_json, seed_queues, settled_depths
from tests.broker.behaviour import Behaviour
from tests.cluster.conftest import vhost_on
from tests.codec.independent_reader import read_segment

pytestmark = pytest.mark.broker

#: A classic queue lives on the node that declared it (node 2 here: seeded through it); the quorum queue and the
#: stream have a member on each node.
QUEUES = {"orders": ("classic", 120), "payments": ("quorum", 90), "events": ("stream", 60)}


@pytest.fixture(scope="module")
def node_1_down(cluster):
    """A vhost with the queues seeded through node 2, then node 1 stopped (for this module's tests: they only read);
    node 1 is started again afterwards."""
    with vhost_on(cluster) as vhost:
        seed_queues(cluster.nodes[1], vhost, QUEUES)
        expected = {name: count for name, (_, count) in QUEUES.items()}
        assert settled_depths(cluster.nodes[1], vhost, expected) == expected
        cluster.nodes[0].stop()
        try:
            yield vhost, expected
        finally:
            cluster.nodes[0].start()


@pytest.mark.parametrize("through", ["node list", "proxy"])
def test_a_backup_completes_byte_exact_while_the_first_node_is_down(cluster, cluster_proxy, node_1_down, tmp_path, through):
    """Through the list [node 1, node 2, node 3], or a TCP proxy in front of the three (that sends each connection
    to the first node that takes it)."""
    cluster_vhost, seeded = node_1_down
    behaviour = Behaviour(cluster.version)
    location = (tmp_path / "backups").as_uri()
    connection = cluster.connection(0, 1, 2) if through == "node list" else cluster_proxy.connection
    routed_before = len(cluster_proxy.amqp.routed)
    settings = BackupSettings("fo-1", location, selector=QueueSelector(vhosts=(cluster_vhost,)),
                              allow_delivery_count_increase=behaviour.backup_leaves_out_by_default("quorum"))

    manifest = BackupRun(connection, settings).run()

    storage = open_storage(location)
    assert {q.name: (q.queue_type, q.message_count) for q in manifest.queues} == QUEUES
    assert validate_backup(storage, "fo-1", deep=True).valid
    for queue in manifest.queues:
        records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
        found = [(r["body"], r["properties"], sorted(map(repr, r["headers"]))) for r in records]
        order = behaviour.delivery_order(queue.queue_type, [i % 10 for i in range(queue.message_count)])
        assert found == [expected_json(queue.name, i, behaviour) for i in order], queue.name
    assert settled_depths(cluster.nodes[1], cluster_vhost, seeded) == seeded
    node_2 = cluster.nodes[1].connection
    if through == "proxy":  # every AMQP connection of the run went to node 2
        assert set(cluster_proxy.amqp.routed[routed_before:]) == {(node_2.host, node_2.amqp_port)}


def test_the_management_client_answers_from_the_next_node_and_stays_there(cluster, node_1_down):
    with ManagementClient(cluster.connection(0, 2, 1)) as client:
        overview = client.overview()
        assert overview["node"] == cluster.nodes[2].name
        assert client.base_url == cluster.nodes[2].connection.management_base_url
        assert node_1_down[0] in client.vhosts()  # the next request goes to node 3 directly
