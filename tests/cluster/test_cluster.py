"""The cluster the cluster tests run on is one: three running nodes, and a quorum queue replicated on all three."""

from __future__ import annotations

import time
from urllib.parse import quote

import pika
import pytest

from tests.cluster.nodes import running_nodes

pytestmark = pytest.mark.broker


def test_the_three_nodes_form_one_cluster(cluster):
    names = [node.name for node in cluster.nodes]

    assert sorted(cluster.running()) == sorted(names)
    for node in cluster.nodes:  # each node sees the same three, by the CLI too
        assert sorted(running_nodes(node)) == sorted(names)
    assert len({node.connection.amqp_port for node in cluster.nodes}) == 3


def test_a_quorum_queue_of_initial_group_size_three_has_a_member_on_each_node(cluster, cluster_vhost):
    with pika.BlockingConnection(cluster.nodes[1].connection.pika_parameters(cluster_vhost)) as conn:
        conn.channel().queue_declare("replicated", durable=True,
                                     arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3})

    path = f"queues/{quote(cluster_vhost, safe='')}/replicated"
    deadline = time.monotonic() + 30  # the management API's queue stats are refreshed every few seconds
    while not (info := cluster.nodes[0].api("GET", path).json()).get("members") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sorted(info["members"]) == sorted(node.name for node in cluster.nodes)
    assert info["leader"] in info["members"]
