"""The journal on a three-node cluster: what tracing set through one node's endpoint does, and a journal turned on
through every node, which archives the publishes of every node."""

from __future__ import annotations

from airflow_rbak.broker import journal
from tests.journal.helpers import archive, channel_of, records_of


def _publish_through_each_node(cluster, vhost, label: str) -> None:
    for n, node in enumerate(cluster.nodes):
        conn, channel = channel_of(node.connection, vhost)
        channel.queue_declare("q", durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", "q", f"{label} via node {n + 1}".encode())
        conn.close()


def test_tracing_set_through_one_nodes_endpoint_is_that_nodes_alone(cluster, cluster_vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(cluster.connection(0), cluster_vhost)  # the connection lists node 1 only

    seen = {n.node: n.state for n in journal.node_tracing(cluster.connection(), cluster_vhost)}
    _publish_through_each_node(cluster, cluster_vhost, "one")
    kept = [bytes(r["body"]) for r in records_of(url, archive(cluster.connection(0), cluster_vhost, url).backup_id)]

    assert seen == {cluster.nodes[0].name: "on", cluster.nodes[1].name: "off", cluster.nodes[2].name: "off"}
    assert kept == [b"one via node 1"]


def test_a_journal_enabled_through_every_node_archives_what_each_node_took(cluster, cluster_vhost, tmp_path):
    url = f"file://{tmp_path}"
    state = journal.enable(cluster.connection(), cluster_vhost)
    _publish_through_each_node(cluster, cluster_vhost, "all")

    result = archive(cluster.connection(), cluster_vhost, url)

    assert state.tracing_everywhere and len(state.nodes) == 3
    assert sorted(bytes(r["body"]) for r in records_of(url, result.backup_id)) == [
        b"all via node 1", b"all via node 2", b"all via node 3"]
    assert result.gaps == []


def test_a_running_node_the_connection_does_not_list_is_unverified(cluster, cluster_vhost):
    journal.enable(cluster.connection(), cluster_vhost)

    states = {n.node: n.state for n in journal.status(cluster.connection(0, 1), cluster_vhost).nodes}

    assert states == {cluster.nodes[0].name: "on", cluster.nodes[1].name: "on", cluster.nodes[2].name: "unverified"}
