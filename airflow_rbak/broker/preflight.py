"""Before a backup or restore: can this connection reach every endpoint it needs, and what may its user do there?

A backup reads over three endpoints (the management API for discovery and
definitions, AMQP for queues, the stream protocol for stream tails and
consumer offsets), and a wrong port only shows up mid-run otherwise. Every
check runs, whatever the others found, so one answer names everything (as
restic's checker collects every error). Rights are reported, not demanded:
a user with the backup role (:data:`ROLES`) may back up messages without
being an administrator, and is told what else it could do with more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pika

from airflow_rbak.broker.amqp_client import close_quietly, open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.permission_probe import permitted
from airflow_rbak.broker.stream_protocol import stream_handshake
from airflow_rbak.exceptions import RbakError

#: Only an administrator may export or import definitions (``/api/definitions``) or create a vhost.
DEFINITIONS_TAG = "administrator"


@dataclass(frozen=True)
class Role:
    """The least a user needs for one kind of work: a user tag and permission patterns on each vhost it works in."""

    tag: str
    configure: str
    write: str
    read: str

    def set_permissions(self, user: str, vhost: str) -> str:
        """The ``rabbitmqctl`` command that gives ``user`` this role's permissions on ``vhost``."""
        return f"rabbitmqctl set_permissions -p {vhost} {user} '{self.configure}' '{self.write}' '{self.read}'"


#: The roles docs/operations.md#least-privilege describes. A message-only backup reads queues (consumes and
#: requeues, declares passively) and lists them through the management API; a restore declares missing queues,
#: publishes, and reads its streams' tails. Definitions need the administrator tag either way.
ROLES = {
    "backup": Role("management", "^$", "^$", ".*"),
    "backup with definitions": Role(DEFINITIONS_TAG, "^$", "^$", ".*"),
    "restore": Role("management", ".*", ".*", ".*"),
    "restore with definitions": Role(DEFINITIONS_TAG, ".*", ".*", ".*"),
}


@dataclass(frozen=True)
class Check:
    """One endpoint: whether it answered, and what was found (never a password)."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.name}: {'ok' if self.ok else 'FAILED'} ({self.detail})"


@dataclass(frozen=True)
class Right:
    """One operation the user may or may not do, and why."""

    what: str
    allowed: bool
    detail: str

    def line(self) -> str:
        return f"can {self.what}: {'yes' if self.allowed else 'no'} ({self.detail})"


@dataclass(frozen=True)
class Access:
    """What a connection reached, and what its user may do on one vhost."""

    endpoints: tuple[Check, ...]
    rights: dict[str, Right]

    @property
    def usable(self) -> bool:
        """Every endpoint answers and the user may list queues and back up or restore messages: something useful."""
        may = {key: right.allowed for key, right in self.rights.items()}
        return all(c.ok for c in self.endpoints) and may["list"] and (may["read"] or may["write"])

    def message(self) -> str:
        """Everything, one line each; when nothing useful is possible, what stands in the way first."""
        if self.usable:
            return "; ".join([c.line() for c in self.endpoints] + [r.line() for r in self.rights.values()])
        problems = [c.line() for c in self.endpoints if not c.ok] + [r.line() for r in self.rights.values() if not r.allowed]
        passed = [c.name for c in self.endpoints if c.ok] + [f"can {r.what}" for r in self.rights.values() if r.allowed]
        return "; ".join(problems) + ". Passed: " + (", ".join(passed) or "nothing")


def _run(name: str, check: Callable[[], str]) -> Check:
    try:
        return Check(name, True, check())
    except RbakError as exc:
        return Check(name, False, str(exc))


def check_broker(connection: RabbitMQConnection, vhost: str = "/") -> Access:
    """The management API, AMQP and the stream port on ``vhost``, and what the user may do there."""
    endpoints = (
        _run(f"management API {connection.management_base_url}", lambda: f"RabbitMQ {_version(connection)}"),
        _run(f"AMQP {connection.host}:{connection.amqp_port}", lambda: _amqp(connection, vhost)),
        _run(f"stream {connection.host}:{connection.stream_port}", lambda: _stream(connection, vhost)),
    )
    return Access(endpoints, {**_management_rights(connection, vhost), **amqp_rights(connection, vhost)})


def _version(connection: RabbitMQConnection) -> str:
    with ManagementClient(connection) as client:
        return client.version()


def _amqp(connection: RabbitMQConnection, vhost: str) -> str:
    close_quietly(open_connection(connection, vhost))
    return f"login to vhost {vhost!r} accepted"


def _stream(connection: RabbitMQConnection, vhost: str) -> str:
    stream_handshake(connection, vhost)
    return f"login to vhost {vhost!r} accepted"


def _management_rights(connection: RabbitMQConnection, vhost: str) -> dict[str, Right]:
    """Listing the vhost's queues, and the definitions rights the user's tags give."""
    user = connection.username
    try:
        with ManagementClient(connection) as client:
            found = client.get("whoami").get("tags") or []
            tags = found.split(",") if isinstance(found, str) else [str(t) for t in found]
            listed = Right(f"list queues in vhost {vhost!r}", True, f"{len(client.queues(vhost))} queues")
    except RbakError as exc:
        refused = Right(f"list queues in vhost {vhost!r}", False, str(exc))
        return {"list": refused, "export": Right("export definitions", False, "the management API refused"),
                "import": Right("import definitions and create vhosts", False, "the management API refused")}
    admin = DEFINITIONS_TAG in tags
    why = (f"tag {DEFINITIONS_TAG}" if admin else f"needs the {DEFINITIONS_TAG!r} tag; user {user!r} has tags {tags}: "
           "back up with include_definitions false")
    return {"list": listed, "export": Right("export definitions", admin, why),
            "import": Right("import definitions and create vhosts", admin, why.replace("back up with include_definitions",
                                                                                      "restore with restore_definitions"))}


#: Each permission a run needs over AMQP: what it allows, and the role (:data:`ROLES`) that grants it.
_AMQP_RIGHTS = {
    "read": ("back up queues in vhost {vhost!r}", "backup"),
    "write": ("publish into vhost {vhost!r} (restore)", "restore"),
    "configure": ("declare queues in vhost {vhost!r} (a restore creates missing ones)", "restore"),
}


def amqp_rights(connection: RabbitMQConnection, vhost: str) -> dict[str, Right]:
    """Read, write and configure on ``vhost``, each probed on a name that does not exist (:mod:`permission_probe`)."""
    whats = {key: what.format(vhost=vhost) for key, (what, _) in _AMQP_RIGHTS.items()}
    try:
        conn = open_connection(connection, vhost)
    except RbakError as exc:
        return {key: Right(what, False, f"not known: {exc}") for key, what in whats.items()}
    try:
        return {key: _amqp_right(conn, key, whats[key], connection.username, vhost) for key in _AMQP_RIGHTS}
    finally:
        close_quietly(conn)


def _amqp_right(conn: pika.BlockingConnection, permission: str, what: str, user: str, vhost: str) -> Right:
    try:
        if permitted(conn, permission):
            return Right(what, True, f"{permission} permission")
    except RbakError as exc:
        return Right(what, False, f"not known: {exc}")
    role = _AMQP_RIGHTS[permission][1]
    return Right(what, False, f"no {permission} permission, or a pattern narrower than '.*'; the {role} role: "
                              f"{ROLES[role].set_permissions(user, vhost)}")
