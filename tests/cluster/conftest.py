"""The cluster fixtures: a private three-node cluster of the session's series for the session, a vhost per test."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from urllib.parse import quote

import pytest
import requests

from airflow_rbak.broker.connection import RabbitMQConnection
from tests.broker.conftest import SCRIPT, _recorded
from tests.broker.versions import session_series, unavailable
from tests.cluster import nodes as cluster_nodes
from tests.cluster.nodes import ClusterNode
from tests.cluster.proxy import TcpProxy, proxies


@dataclass(frozen=True)
class Cluster:
    """The three nodes (node 1 first) and the series they run."""

    nodes: tuple[ClusterNode, ...]
    version: str

    def connection(self, *order: int) -> RabbitMQConnection:
        """One connection to the nodes of ``order`` (0-based; all, node 1 first, by default), tried in that order."""
        first, *rest = [self.nodes[i].connection for i in (order or range(len(self.nodes)))]
        return replace(first, more_nodes=tuple(c.first_node for c in rest))

    def running(self) -> list[str]:
        """The nodes the management API of the first running node lists as running."""
        for node in self.nodes:
            try:
                return [n["name"] for n in node.api("GET", "nodes").json() if n.get("running")]
            except requests.RequestException:
                continue
        return []


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """Start (or reuse) the three nodes on the session's series and cluster them; stop and remove them at the end if
    this session started them, unless ``RBAK_KEEP_BROKERS=1``."""
    series = session_series()
    if os.geteuid() != 0 or (series == "3.10" and shutil.which("rabbitmq-server") is None):
        unavailable("cluster tests need root and, for RabbitMQ 3.10, the host's rabbitmq-server (see scripts/rabbitmq.sh)")
    envs = cluster_nodes.node_envs()
    provisioned = subprocess.run([str(SCRIPT), "provision"], capture_output=True, text=True, env=envs[0], timeout=1800)
    if provisioned.returncode != 0:
        unavailable(f"no RabbitMQ {series} cluster: {provisioned.stderr.strip()[-800:]}")
    was_running = all(cluster_nodes.is_running(env) for env in envs)
    cluster_nodes.start(envs)
    try:
        nodes = tuple(cluster_nodes.node_of(env) for env in envs)
        versions = {_recorded(node).version for node in nodes}
        yield Cluster(nodes, versions.pop() if len(versions) == 1 else "?")
    finally:
        if not was_running and os.environ.get("RBAK_KEEP_BROKERS") != "1":
            cluster_nodes.stop(envs, purge=True)


@dataclass(frozen=True)
class ClusterProxy:
    """A TCP proxy in front of the three nodes (tests/cluster/proxy.py): one address per protocol, as a load
    balancer gives; ``connection`` reaches the cluster through it."""

    connection: RabbitMQConnection
    amqp: TcpProxy
    management: TcpProxy
    stream: TcpProxy


@pytest.fixture(scope="session")
def cluster_proxy(cluster: Cluster) -> Iterator[ClusterProxy]:
    nodes = [node.connection for node in cluster.nodes]
    with proxies([(c.host, c.amqp_port) for c in nodes], [(c.host, c.management_port) for c in nodes],
                 [(c.host, c.stream_port) for c in nodes]) as (amqp, management, stream):
        yield ClusterProxy(RabbitMQConnection(amqp_port=amqp.port, management_port=management.port, stream_port=stream.port),
                           amqp, management, stream)


@contextmanager
def vhost_on(cluster: Cluster) -> Iterator[str]:
    """A vhost of its own on the cluster, deleted afterwards (through whichever node answers)."""
    name = f"c-{uuid.uuid4().hex[:10]}"
    first = cluster.nodes[0]
    first.api("PUT", f"vhosts/{quote(name, safe='')}")
    first.api("PUT", f"permissions/{quote(name, safe='')}/{quote(first.connection.username, safe='')}",
              json={"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    for node in cluster.nodes:
        try:
            node.api("DELETE", f"vhosts/{quote(name, safe='')}")
            return
        except requests.RequestException:
            continue


@pytest.fixture
def cluster_vhost(cluster: Cluster) -> Iterator[str]:
    """A vhost of its own on the cluster for one test."""
    with vhost_on(cluster) as name:
        yield name
