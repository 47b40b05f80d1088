"""Before a backup or restore: can this connection reach every endpoint it needs, as a user allowed to do the work?

A backup reads over three endpoints (the management API for discovery and
definitions, AMQP for queues, the stream protocol for stream tails and
consumer offsets), and a wrong port or a missing tag on any of them only
shows up mid-run otherwise. Every check runs, whatever the others found, so
one answer names everything that is wrong (as restic's checker collects
every error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from airflow_rbak.broker.amqp_client import close_quietly, open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.stream_protocol import stream_handshake
from airflow_rbak.exceptions import RbakError

#: The definitions export and import read and write every vhost's objects and users: only an administrator may.
REQUIRED_TAG = "administrator"
#: A backup reads queues and declares them passively; a restore declares, binds and publishes.
REQUIRED_PERMISSIONS = ("configure", "write", "read")


@dataclass(frozen=True)
class Check:
    """One endpoint or right: whether it passed, and what was found (never a password)."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.name}: {'ok' if self.ok else 'FAILED'} ({self.detail})"


def _run(name: str, check: Callable[[], str]) -> Check:
    try:
        return Check(name, True, check())
    except RbakError as exc:
        return Check(name, False, str(exc))


def check_broker(connection: RabbitMQConnection, vhost: str = "/") -> list[Check]:
    """Management API, the user's tags and permissions on ``vhost``, AMQP and the stream port, in that order."""
    checks = [_run(f"management API {connection.management_base_url}", lambda: f"RabbitMQ {_version(connection)}")]
    checks.append(_run(f"user {connection.username!r} tags", lambda: _tags(connection)))
    checks.append(_run(f"user {connection.username!r} permissions on vhost {vhost!r}", lambda: _permissions(connection, vhost)))
    checks.append(_run(f"AMQP {connection.host}:{connection.amqp_port}", lambda: _amqp(connection, vhost)))
    checks.append(_run(f"stream {connection.host}:{connection.stream_port}", lambda: _stream(connection, vhost)))
    return checks


def _version(connection: RabbitMQConnection) -> str:
    with ManagementClient(connection) as client:
        return client.version()


def _tags(connection: RabbitMQConnection) -> str:
    with ManagementClient(connection) as client:
        found = client.get("whoami").get("tags") or []
    tags = found.split(",") if isinstance(found, str) else list(found)
    if REQUIRED_TAG not in tags:
        raise RbakError(f"has tags {tags}; exporting and importing definitions needs the {REQUIRED_TAG!r} tag "
                        f"(rabbitmqctl set_user_tags {connection.username} {REQUIRED_TAG})")
    return ", ".join(tags)


def _permissions(connection: RabbitMQConnection, vhost: str) -> str:
    with ManagementClient(connection) as client:
        granted = client.get(f"users/{quote(connection.username, safe='')}/permissions")
    found: dict[str, Any] = next((p for p in granted if p.get("vhost") == vhost), {})
    missing = [k for k in REQUIRED_PERMISSIONS if not found.get(k)]
    if missing:
        raise RbakError(f"no {'/'.join(missing)} permission (rabbitmqctl set_permissions -p {vhost} "
                        f"{connection.username} '.*' '.*' '.*')")
    return ", ".join(f"{k} {found[k]!r}" for k in REQUIRED_PERMISSIONS)


def _amqp(connection: RabbitMQConnection, vhost: str) -> str:
    close_quietly(open_connection(connection, vhost))
    return "login and vhost accepted"


def _stream(connection: RabbitMQConnection, vhost: str) -> str:
    stream_handshake(connection, vhost)
    return "login and vhost accepted"
