"""The broker as each DAG will use it: the user's tags and rights (``broker.preflight``), and the vhosts it misses.

What each DAG needs is docs/operations.md#least-privilege: ``rbak_backup`` reads every vhost it backs up and, with
``include_definitions`` (on by default), needs the ``administrator`` tag; ``rbak_restore`` declares and publishes
(configure and write); ``rbak_drill`` creates and deletes scratch vhosts (``administrator``). A backup's needs are
failures; a restore's and a drill's are warnings, as they often run as other users (their own connections).
"""

from __future__ import annotations

from urllib.parse import quote

from airflow_rbak.broker.errors import BrokerUnreachableError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.preflight import DEFINITIONS_TAG, ROLES, amqp_rights, check_broker
from airflow_rbak.doctor.deployment import Deployment
from airflow_rbak.doctor.findings import Finding, failure, ok, warning
from airflow_rbak.exceptions import RbakError

#: The most vhosts whose AMQP rights are probed (each probe is a connection): the others are named as not probed.
MAX_PROBED_VHOSTS = 10


def broker_findings(d: Deployment) -> list[Finding]:
    """The broker's endpoints, the user's tags and rights for each DAG, and the vhosts it cannot see."""
    if d.connection is None:
        return [failure("broker", d.broker_problem or "no broker named",
                        "name the broker: --conn-id CONN_ID, --broker-file FILE or $RBAK_BROKER_URL")]
    user = d.connection.username
    try:
        with ManagementClient(d.connection) as client:
            tags = _tags(client)
            seen = client.vhosts()
            permitted = _permitted(client, user, tags, seen)
            vhosts = vhost_finding(user, tags, seen, permitted, d.vhosts)
    except BrokerUnreachableError as exc:
        return [failure("broker", f"{d.broker_name}: {exc}", "start the broker, or correct the connection's host and "
                        "management_port", unreachable=True)]
    except RbakError as exc:
        return [failure("broker", f"{d.broker_name}: {exc}", f"give {user!r} a tag that opens the management API: "
                        f"rabbitmqctl set_user_tags {user} management")]
    found = [tag_finding(d, user, tags), vhosts]
    if d.probe_rights:
        found += rights_findings(d, [v for v in (seen if d.vhosts is None else d.vhosts) if v in permitted])
    return found


def _tags(client: ManagementClient) -> list[str]:
    found = client.get("whoami").get("tags") or []
    return found.split(",") if isinstance(found, str) else [str(t) for t in found]


def tag_finding(d: Deployment, user: str, tags: list[str]) -> Finding:
    """``rbak_backup``'s definitions export needs the administrator tag (the broker serves /api/definitions to no
    one else)."""
    if DEFINITIONS_TAG in tags or not d.include_definitions:
        why = "administrator" if DEFINITIONS_TAG in tags else "include_definitions off: messages only"
        return ok("broker: rbak_backup", f"{d.broker_name} as {user!r} (tags {tags}): {why}")
    return failure("broker: rbak_backup", f"{d.broker_name} as {user!r} has tags {tags}: the backup's definitions "
                   f"export (include_definitions, on by default) needs the {DEFINITIONS_TAG!r} tag",
                   f"rabbitmqctl set_user_tags {user} {DEFINITIONS_TAG} (or run rbak_backup with include_definitions "
                   "false)")


def _permitted(client: ManagementClient, user: str, tags: list[str], seen: list[str]) -> set[str]:
    """The vhosts the user has permissions on: an administrator sees every vhost, and may read its own permissions;
    anyone else sees only the vhosts it has permissions on."""
    if DEFINITIONS_TAG not in tags:
        return set(seen)
    return {p.get("vhost") for p in client.get(f"users/{quote(user, safe='')}/permissions")}


def vhost_finding(user: str, tags: list[str], seen: list[str], permitted: set[str],
                  named: tuple[str, ...] | None) -> Finding:
    """The vhosts a backup misses: named ones the user cannot see; with ``vhosts`` null (every vhost the user sees),
    how many exist that it has no permissions on, when an administrator's API can tell."""
    if named is not None:
        missing = [v for v in named if v not in permitted]
        if missing:
            return failure("vhosts", f"the vhosts param names {missing}, which user {user!r} cannot see",
                           f"rabbitmqctl set_permissions -p {missing[0]} {user} '^$' '^$' '.*' (the backup role), or "
                           "correct the vhosts param")
        return ok("vhosts", f"user {user!r} sees every vhost the vhosts param names ({len(named)})")
    if DEFINITIONS_TAG not in tags:
        return warning("vhosts", f"vhosts null backs up every vhost user {user!r} sees ({len(seen)}); the management API "
                       f"shows a user with tags {tags} only its own, so whether others exist cannot be told here",
                       "rabbitmqctl list_vhosts as an administrator, or name the vhosts in the backup's vhosts param")
    hidden = [v for v in seen if v not in permitted]
    if hidden:
        shown = ", ".join(repr(v) for v in hidden[:5]) + (f" and {len(hidden) - 5} more" if len(hidden) > 5 else "")
        return warning("vhosts", f"{len(hidden)} of {len(seen)} vhosts exist on which user {user!r} has no permissions, "
                       f"so vhosts null cannot back them up: {shown}",
                       f"rabbitmqctl set_permissions -p {hidden[0]} {user} '^$' '^$' '.*' on each, or name the vhosts "
                       "to back up in the vhosts param")
    return ok("vhosts", f"user {user!r} has permissions on all {len(seen)} vhosts")


def rights_findings(d: Deployment, vhosts: list[str]) -> list[Finding]:
    """The endpoints (AMQP, stream) and, per vhost, read (rbak_backup: failure), write and configure (rbak_restore:
    warning), and the administrator tag rbak_drill needs (warning)."""
    assert d.connection is not None
    user, probed = d.connection.username, vhosts[:MAX_PROBED_VHOSTS]
    access = check_broker(d.connection, probed[0] if probed else "/")
    found = [failure("broker", f"{c.name}: {c.detail}", "open that port to this host, or correct the connection's "
                     "port extras", unreachable=True) for c in access.endpoints if not c.ok]
    if found:
        return found
    unread, unwritten = [], []
    for vhost in probed:
        rights = access.rights if vhost == probed[0] else amqp_rights(d.connection, vhost)
        unread += [vhost] if not rights["read"].allowed else []
        unwritten += [vhost] if not (rights["write"].allowed and rights["configure"].allowed) else []
    more = f" ({len(vhosts) - len(probed)} more vhosts not probed)" if len(vhosts) > len(probed) else ""
    found.append(failure("broker: rbak_backup reads", f"user {user!r} may not read queues in vhosts {unread}",
                         ROLES["backup"].set_permissions(user, unread[0])) if unread else
                 ok("broker: rbak_backup reads", f"user {user!r} may read queues in {len(probed)} vhost(s){more}"))
    found.append(warning("broker: rbak_restore", f"user {user!r} may not declare and publish in vhosts {unwritten}: "
                         "a restore with this connection is refused there", ROLES["restore"].set_permissions(
                             user, unwritten[0]) + " (or give rbak_restore a restore user's connection)")
                 if unwritten else ok("broker: rbak_restore", f"user {user!r} may declare and publish in "
                                      f"{len(probed)} vhost(s){more}"))
    admin = access.rights["import"].allowed
    found.append(ok("broker: rbak_drill", f"user {user!r} may create and delete scratch vhosts") if admin else warning(
        "broker: rbak_drill", f"user {user!r} is not an administrator: a drill creates and deletes scratch vhosts",
        "give rbak_drill's connection (rabbitmq_drill) a user with the administrator tag"))
    return found
