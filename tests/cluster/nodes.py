"""A private three-node RabbitMQ cluster on loopback, for the tests that need what production runs: several nodes.

Each node is a ``scripts/rabbitmq.sh`` node of the session's series (``RBAK_RABBITMQ_VERSION``) with its own ports,
name and folder; nodes 2 and 3 join node 1 with ``rabbitmqctl join_cluster``. The nodes share an Erlang cookie
because they run as the same ``rabbitmq`` user with the same home (the host's for 3.10, the chroot's for 4.x), and,
on 4.x, the port mapper of ``RBAK_EPMD_PORT``.

Ports and names come from ``RBAK_CLUSTER_*`` variables, so that ``scripts/test.sh`` can give each part its own:
``RBAK_CLUSTER_AMQP_PORT`` (node 1's; node *i* takes it + 10 * (i - 1)), ``RBAK_CLUSTER_MGMT_PORT``,
``RBAK_CLUSTER_STREAM_PORT``, ``RBAK_CLUSTER_NODE`` (``rabbit-cluster@localhost``: node *i* is
``rabbit-cluster<i>@localhost``) and ``RBAK_CLUSTER_DIR`` (node *i*'s folder is ``<dir>/node<i>``; by default one per
series, since a folder keeps the series it was made with).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from airflow_rbak.broker.connection import RabbitMQConnection
from tests.broker.conftest import REPO, SCRIPT, Broker
from tests.broker.versions import session_series

SIZE = 3
#: How far apart the nodes' ports are (a node's TLS listeners would take its plain ports + 1).
PORT_STEP = 10
START_TIMEOUT_S = 300


@dataclass(frozen=True)
class ClusterNode(Broker):
    """One node of the cluster: a :class:`Broker` (stop, start, ctl, api on its own ports) with its node name."""

    name: str = ""


def node_envs(environ: dict[str, str] | None = None) -> list[dict[str, str]]:
    """scripts/rabbitmq.sh's environment for each of the three nodes."""
    base = dict(os.environ if environ is None else environ)
    series = session_series()
    amqp = int(base.get("RBAK_CLUSTER_AMQP_PORT", 6172))
    mgmt = int(base.get("RBAK_CLUSTER_MGMT_PORT", 16172))
    stream = int(base.get("RBAK_CLUSTER_STREAM_PORT", 6272))
    stem, _, host = base.get("RBAK_CLUSTER_NODE", "rabbit-cluster@localhost").partition("@")
    folder = Path(base.get("RBAK_CLUSTER_DIR", REPO / ".run" / ("cluster" if series == "3.10" else f"cluster-{series}")))
    envs = []
    for i in range(SIZE):
        env = dict(base)
        step = PORT_STEP * i
        env.update({
            "RBAK_AMQP_PORT": str(amqp + step), "RBAK_MGMT_PORT": str(mgmt + step),
            "RBAK_STREAM_PORT": str(stream + step), "RBAK_DIST_PORT": str(amqp + step + 20000),
            "RBAK_RABBIT_NODE": f"{stem}{i + 1}@{host or 'localhost'}", "RBAK_RABBIT_DIR": str(folder / f"node{i + 1}"),
        })
        envs.append(env)
    return envs


def node_of(env: dict[str, str]) -> ClusterNode:
    return ClusterNode(RabbitMQConnection(amqp_port=int(env["RBAK_AMQP_PORT"]), management_port=int(env["RBAK_MGMT_PORT"]),
                                          stream_port=int(env["RBAK_STREAM_PORT"])), env, name=env["RBAK_RABBIT_NODE"])


def is_running(env: dict[str, str]) -> bool:
    return subprocess.run([str(SCRIPT), "status"], capture_output=True, env=env, timeout=60).returncode == 0


def _all(envs: list[dict[str, str]], *args: str) -> None:
    """``scripts/rabbitmq.sh ARGS`` for several nodes at once: a clustered node waits for its peers while it boots, so
    starting them one after the other could wait for a node not yet started."""
    running = [subprocess.Popen([str(SCRIPT), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for env in envs]
    failed = []
    for env, process in zip(envs, running):
        out, _ = process.communicate(timeout=START_TIMEOUT_S)
        if process.returncode != 0:
            failed.append(f"{env['RBAK_RABBIT_NODE']}: {out.strip()[-600:]}")
    if failed:
        raise RuntimeError(f"scripts/rabbitmq.sh {' '.join(args)} failed: " + " | ".join(failed))


def start(envs: list[dict[str, str]]) -> None:
    """Start the nodes that are not running (together) and join nodes 2 and 3 to node 1 where they are not members."""
    _all([env for env in envs if not is_running(env)], "start")
    nodes = [node_of(env) for env in envs]
    first = nodes[0]
    for node in nodes[1:]:
        if node.name in running_nodes(first):
            continue
        node.ctl("stop_app")
        try:
            node.ctl("join_cluster", first.name)
        except subprocess.CalledProcessError:  # a folder left by another cluster: forget it, then join
            node.ctl("reset")
            node.ctl("join_cluster", first.name)
        node.ctl("start_app", timeout=START_TIMEOUT_S)


def stop(envs: list[dict[str, str]], *, purge: bool) -> None:
    """Stop the nodes (together); ``purge`` removes their folders, so the next session forms a cluster afresh."""
    _all(envs, "stop", *(["--purge"] if purge else []))


def running_nodes(node: ClusterNode) -> list[str]:
    """The cluster's running nodes as ``node`` sees them (``rabbitmqctl cluster_status``)."""
    return list(json.loads(node.ctl("cluster_status", "--formatter", "json")).get("running_nodes", []))
