"""A resumed restore's earlier attempts: their connections closed on the broker before the target is measured.

A re-run skips exactly the records already in its target, counted by the target's depth. That count is exact only
once nothing an earlier attempt sent can still arrive. When the earlier attempt's node was lost, nothing can; but
when only its client went away (a worker killed, the network between worker and broker cut) while the node stays
up, the broker keeps that connection open until a heartbeat is missed, and publishes it has received, or has yet to
read from the socket, may land after the re-run has measured: they would be in the target twice. So a publishing
connection is named for the queue restore it serves and the attempt (``airflow-rbak restore <restore> <attempt>``;
a digest, so no location or name is shown), and a re-run closes every earlier attempt's connection through the
management API before it measures. The broker answers that close once it has stopped the connection's channels, and
from then on reads nothing from it but its end (it only waits, up to 30 s, for the client's reply to its close), so
no publish of it can land later. A connection the user's rights do not let it close stops the re-run before it
publishes anything. The management API lists a connection some seconds after it opens (its statistics interval, 5 s
by default): a re-run started sooner than that after an earlier attempt could miss it, which a task's retry delay
never is.
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import quote

import requests

from airflow_rbak.broker.connection import CONNECTION_NAME, RabbitMQConnection
from airflow_rbak.broker.errors import BrokerError
from airflow_rbak.broker.management import ManagementClient, reason_of
from airflow_rbak.restore.checkpoints import QueueCheckpoint
from airflow_rbak.restore.errors import PublishError

_REASON = "airflow-rbak: an earlier attempt of this restore, closed before the restore resumes"


def publisher_names(cp: QueueCheckpoint) -> tuple[str, str]:
    """The prefix every attempt of this queue restore names its connection with, and this attempt's full name."""
    identity = "\0".join((cp.backup_id, cp.source_vhost, cp.source_queue, cp.target_vhost, cp.target_queue, cp.window,
                          cp.target_cluster, cp.location))
    return publisher_names_for(f"{CONNECTION_NAME} restore {hashlib.sha256(identity.encode()).hexdigest()[:16]} ")


def publisher_names_for(prefix: str) -> tuple[str, str]:
    """``prefix`` and a new attempt's name under it."""
    return prefix, prefix + secrets.token_hex(4)


def close_earlier_attempts(connection: RabbitMQConnection, prefix: str, own: str) -> list[str]:
    """Close the broker's connections of this restore's earlier attempts; returns their names (none: nothing to do).

    Raises :class:`PublishError` when they cannot be listed or one cannot be closed."""
    try:
        with ManagementClient(connection) as client:
            earlier = _listed(client, prefix, own)
            for name in earlier:
                _close(client, name)
    except BrokerError as exc:
        raise PublishError(
            f"cannot close the earlier attempts' connections of this restore ({prefix.strip()} …): {exc}. A re-run "
            "measures its target only once nothing an earlier attempt sent can still arrive; close them (rabbitmqctl "
            "close_connection) and re-run") from None
    return earlier


def _listed(client: ManagementClient, prefix: str, own: str) -> list[str]:
    """The broker's names of the connections whose own name starts with ``prefix``, but ours (untrusted JSON)."""
    found = client.get("connections", params={"columns": "name,client_properties"})
    if not isinstance(found, list):
        raise BrokerError("management API: /api/connections did not return a list")
    names = []
    for entry in found:
        props = entry.get("client_properties") if isinstance(entry, dict) else None
        named = props.get("connection_name") if isinstance(props, dict) else None
        if isinstance(named, str) and named.startswith(prefix) and named != own and isinstance(entry.get("name"), str):
            names.append(entry["name"])
    return names


def _close(client: ManagementClient, name: str) -> None:
    try:
        response = client.send("DELETE", f"connections/{quote(name, safe='')}", headers={"X-Reason": _REASON},
                               timeout=client.connection.timeout)
    except requests.RequestException as exc:
        raise BrokerError(f"management API unreachable while closing connection {name!r} ({type(exc).__name__})") from None
    if response.status_code >= 400 and response.status_code != 404:  # 404: gone already
        raise BrokerError(f"DELETE /api/connections/{name} answered HTTP {response.status_code}: {reason_of(response)}")

