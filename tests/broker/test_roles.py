"""Least privilege on a real broker: users with exactly the backup and the restore role of ``preflight.ROLES``
(docs/operations.md#least-privilege) back up and restore every message, and the connection test says what each
may and may not do. The same roles, unchanged, on every series the suite runs (3.10 and 4.3); only the order and form
in which the broker delivers the messages follow its version (tests/broker/behaviour.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from urllib.parse import quote

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.errors import BrokerAuthError
from airflow_rbak.broker.preflight import ROLES, check_broker
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour, message_priorities
from tests.reliability.expect import header_order_free
from tests.restore.helpers import PROPERTY_NAMES, body_of, declare, expected_view, publish, read_queue, ready_count
from tests.spark_jobs.staging import read_queue_independently
from tests.test_configuration_docs import REPO, first_code, table_rows

QUEUES, COUNT = {"orders": "classic", "payments": "quorum", "events": "stream"}, 200
PASSWORD = "Role-Test-Pw/1"


def test_the_operations_guide_lists_every_role_as_the_code_has_it():
    rows = table_rows((REPO / "docs" / "operations.md").read_text(), "Least privilege")
    documented = {name: [first_code(cell) for cell in cells[:4]] for name, cells in rows.items()}
    assert documented == {name: [r.tag, r.configure, r.write, r.read] for name, r in ROLES.items()}


@pytest.fixture
def role_user(broker, vhost) -> Iterator[Callable[[str], RabbitMQConnection]]:
    """A user with exactly one role of ``ROLES`` on the test's vhost (tag and permission patterns), as a connection."""
    made: list[str] = []

    def make(role: str) -> RabbitMQConnection:
        name = f"{role.split()[0]}-{uuid.uuid4().hex[:6]}"
        made.append(name)
        granted = ROLES[role]
        broker.api("PUT", f"users/{name}", json={"password": PASSWORD, "tags": granted.tag})
        broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{name}",
                   json={"configure": granted.configure, "write": granted.write, "read": granted.read})
        return replace(broker.connection, username=name, password=PASSWORD)

    yield make
    for name in made:
        broker.api("DELETE", f"users/{name}")


@pytest.fixture
def queues(broker, vhost) -> None:
    """A classic, a quorum and a stream queue of ``COUNT`` messages each, published by the administrator."""
    declare(broker.connection, vhost, QUEUES)
    for queue, queue_type in QUEUES.items():
        publish(broker.connection, vhost, queue, 0, COUNT, decimal=queue_type != "stream")


def _without_user_id(view: tuple) -> tuple:
    body, props, headers = view
    user_id = PROPERTY_NAMES.index("user_id")
    return body, props[:user_id] + (None,) + props[user_id + 1:], headers


def _quorum_needs_consent(behaviour: Behaviour) -> bool:
    """Whether the quorum queue is backed up only with ``allow_delivery_count_increase`` (4.0: returns count toward
    its default limit of 20; the roles are what this file shows, not that refusal)."""
    return behaviour.backup_leaves_out_by_default("quorum")


def _lines(connection: RabbitMQConnection, vhost: str) -> tuple[bool, dict[str, str]]:
    """The connection test's verdict, and its "can ..." lines as what -> answer."""
    access = check_broker(connection, vhost)
    return access.usable, {r.what: r.line().split(": ", 1)[1] for r in access.rights.values()}


@pytest.mark.broker
def test_the_backup_role_backs_up_every_message_and_is_told_what_else_it_cannot_do(broker, vhost, role_user, queues,
                                                                                   behaviour: Behaviour, tmp_path):
    # Given a user with the backup role: tag management, read on the vhost, no configure, no write
    user = role_user("backup")

    # When its connection is tested
    usable, can = _lines(user, vhost)

    # Then the test passes, and says it may back up but neither export definitions nor restore
    assert usable
    assert can[f"list queues in vhost {vhost!r}"] == "yes (3 queues)"
    assert can[f"back up queues in vhost {vhost!r}"] == "yes (read permission)"
    assert can["export definitions"].startswith(f"no (needs the 'administrator' tag; user {user.username!r} has tags "
                                                "['management']: back up with include_definitions false")
    assert can[f"publish into vhost {vhost!r} (restore)"].startswith("no (no write permission")
    assert can[f"declare queues in vhost {vhost!r} (a restore creates missing ones)"].startswith("no (no configure")
    assert PASSWORD not in str(can)

    # When it backs up the messages (no definitions)
    location = (tmp_path / "b").as_uri()
    settings = BackupSettings("least-1", location, selector=QueueSelector(vhosts=(vhost,)), include_definitions=False,
                              allow_delivery_count_increase=_quorum_needs_consent(behaviour))
    manifest = BackupRun(user, settings).run()

    # Then every message is stored byte-exact, in the order the queue delivers it (a 4.3 quorum queue: by priority),
    # and the queues hold what they held
    assert {q.name: q.message_count for q in manifest.queues} == dict.fromkeys(QUEUES, COUNT)
    for queue, queue_type in QUEUES.items():
        _, records = read_queue_independently(open_storage(location), "least-1", vhost, queue)
        order = behaviour.delivery_order(queue_type, message_priorities(COUNT))
        assert [bytes(r["body"] or b"") for r in records] == [body_of(i, 300) for i in order], queue
    assert ready_count(broker.connection, vhost, "orders") == COUNT

    # And a backup with definitions is refused by the broker, saying why
    with pytest.raises(BrokerAuthError, match=r"/api/definitions \(HTTP 401: Not administrator user\)"):
        BackupRun(user, replace(settings, backup_id="least-2", include_definitions=True)).run()


@pytest.mark.broker
def test_the_restore_role_restores_every_message_into_queues_it_creates(broker, vhost, role_user, queues,
                                                                       behaviour: Behaviour, tmp_path):
    # Given a backup of the queues, and a user with the restore role (tag management, every permission on the vhost)
    location = (tmp_path / "b").as_uri()
    BackupRun(broker.connection, BackupSettings("least-r", location, selector=QueueSelector(vhosts=(vhost,)),
                                                include_definitions=False,
                                                allow_delivery_count_increase=_quorum_needs_consent(behaviour))).run()
    user = role_user("restore")

    # When its connection is tested, then it may restore messages, but not import definitions
    usable, can = _lines(user, vhost)
    assert usable
    assert can[f"publish into vhost {vhost!r} (restore)"] == "yes (write permission)"
    assert can[f"declare queues in vhost {vhost!r} (a restore creates missing ones)"] == "yes (configure permission)"
    assert can["import definitions and create vhosts"].startswith("no (needs the 'administrator' tag")

    # When it restores every queue into a new queue beside it (the source's user_id is another user's: RabbitMQ
    # refuses to let this user publish it)
    report = RestoreRun(user, RestoreRequest(location, backup_id="least-r", queue_map={q: f"{q}-back" for q in QUEUES},
                                              strip_user_id=True, checkpoint_state=(tmp_path / "state").as_uri())).run()

    # Then each new queue holds every message, byte-exact with every property but user_id, in the source's order
    assert report.published == COUNT * len(QUEUES)
    for queue, queue_type in QUEUES.items():
        order = behaviour.delivery_order(queue_type, message_priorities(COUNT))
        expected = [_without_user_id(expected_view(i, queue_type)) for i in order]
        found = read_queue(broker.connection, vhost, f"{queue}-back", queue_type, COUNT)
        if behaviour.sorts_headers(queue_type):  # 4.x delivers every header table sorted by key
            found, expected = header_order_free(found), header_order_free(expected)
        if queue_type == "stream" and behaviour.series >= (4, 0):
            # A 4.x stream holds AMQP 1.0: its 0-9-1 headers come back converted. The restored stream's headers are
            # the ones the source stream delivers; body and properties are still the published ones.
            source = [_without_user_id(v) for v in read_queue(broker.connection, vhost, queue, queue_type, COUNT)]
            assert [v[2] for v in found] == [v[2] for v in source], queue
            found, expected = [v[:2] for v in found], [v[:2] for v in expected]
        assert found == expected, queue


@pytest.mark.broker
def test_the_roles_with_definitions_export_them_and_import_them_into_a_new_vhost(broker, vhost, role_user, queues,
                                                                              behaviour: Behaviour, tmp_path):
    # Given a user with the backup-with-definitions role (tag administrator, read only) and one with the
    # restore-with-definitions role (tag administrator), both with permissions on the source vhost only
    target = f"{vhost}-to"
    try:
        backup_user, restore_user = role_user("backup with definitions"), role_user("restore with definitions")

        # When the first backs up with definitions, and the second restores them and the messages into a vhost that
        # does not exist yet (the restore creates it; its creator gets every permission there)
        location = (tmp_path / "b").as_uri()
        manifest = BackupRun(backup_user, BackupSettings("least-d", location, selector=QueueSelector(vhosts=(vhost,)),
                                                         include_definitions=True,
                                                         allow_delivery_count_increase=_quorum_needs_consent(behaviour))).run()
        report = RestoreRun(restore_user, RestoreRequest(location, backup_id="least-d", vhost_map={vhost: target},
                                                         restore_definitions=True, strip_user_id=True,
                                                         checkpoint_state=(tmp_path / "state").as_uri())).run()

        # Then the export held the queues, the import declared them with their types, and every message is there
        assert manifest.definitions is not None and manifest.definitions.queue_count >= len(QUEUES)
        assert report.published == COUNT * len(QUEUES)
        declared = {q["name"]: q["type"] for q in broker.api("GET", f"queues/{quote(target, safe='')}").json()}
        assert declared == QUEUES
        broker.api("PUT", f"permissions/{quote(target, safe='')}/{quote(broker.connection.username, safe='')}",
                   json={"configure": ".*", "write": ".*", "read": ".*"})  # for the test's own reading
        for queue, queue_type in QUEUES.items():
            order = behaviour.delivery_order(queue_type, message_priorities(COUNT))
            found = read_queue(broker.connection, target, queue, queue_type, COUNT)
            assert [body for body, _, _ in found] == [body_of(i, 300) for i in order], queue
    finally:
        broker.api("DELETE", f"vhosts/{quote(target, safe='')}")


@pytest.mark.broker
def test_a_user_who_may_do_nothing_useful_fails_the_connection_test_naming_each_missing_right(broker, vhost, role_user):
    # Given a user with a management tag whose only permission on the vhost is to configure
    user = role_user("backup")
    broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{user.username}", json={"configure": ".*", "write": "", "read": ""})

    # When its connection is tested
    access = check_broker(user, vhost)

    # Then it fails, each missing right named with the role that grants it, and the rest listed as passed
    assert not access.usable
    problems, passed = access.message().split(". Passed: ")
    assert f"can back up queues in vhost {vhost!r}: no (no read permission" in problems
    assert f"the backup role: rabbitmqctl set_permissions -p {vhost} {user.username} '^$' '^$' '.*'" in problems
    assert f"can publish into vhost {vhost!r} (restore): no" in problems
    assert "AMQP 127.0.0.1" in passed and f"can declare queues in vhost {vhost!r}" in passed


@pytest.mark.broker
def test_a_restore_into_a_stream_needs_read_there_and_is_refused_clearly_without_it(broker, vhost, role_user, queues):
    # Given a user with the restore role but no read permission (a restore reads a target stream's tail)
    user = role_user("restore")
    broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{user.username}", json={"configure": ".*", "write": ".*", "read": ""})

    # When it reads the stream's tail, then the stream protocol's refusal is a typed error naming the user
    with pytest.raises(BrokerAuthError, match=rf"vhost {vhost!r}: user {user.username!r} lacks the permission \(AccessRefused\)"):
        stream_protocol.stream_tail(user, vhost, "events")
