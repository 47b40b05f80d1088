"""Secrets never leave: no password or password hash in logs (at DEBUG), reports, error messages or stored
objects other than the definitions export; and by default (``include_users=False``) none in that either.

The full Airflow runs (task logs, XCom, Asset events) are checked by the DAG tests, which run as a user
made the same way: ``tests/dags/test_rbak_backup.py`` and ``tests/dags/test_rbak_restore.py``.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import replace
from urllib.parse import quote

import orjson
import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.exceptions import RbakError
from airflow_rbak.hooks.rabbitmq import connection_from_airflow
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.reliability.secrets import distinctive_password, leaks, stored_objects
from tests.restore.helpers import body_of, declare, publish, read_queue

pytestmark = pytest.mark.broker


def as_user(broker, user) -> RabbitMQConnection:
    return replace(broker.connection, username=user.name, password=user.password)


def test_a_backup_and_restore_logged_at_debug_leak_no_password_or_hash(broker, vhost, secret_user, tmp_path, caplog):
    # Given a queue, and a run as a user with a distinctive password, every logger at DEBUG, users asked for
    declare(broker.connection, vhost, {"orders": "quorum"})
    publish(broker.connection, vhost, "orders", 0, 50)
    location = (tmp_path / "b").as_uri()
    caplog.set_level(logging.DEBUG)

    # When it backs up (definitions included) and restores into another queue
    connection = as_user(broker, secret_user)
    BackupRun(connection, BackupSettings("s-1", location, selector=QueueSelector(vhosts=(vhost,)), include_users=True)).run()
    report = RestoreRun(connection, RestoreRequest(location, backup_id="s-1", queue_map={"orders": "restored"},
                                                    strip_user_id=True, restore_definitions=True,
                                                    checkpoint_state=str(tmp_path / "r.db"))).run()

    # Then neither the password nor the hash is in the logs, the report, or any object but the definitions
    storage = open_storage(location)
    assert [m[0] for m in read_queue(broker.connection, vhost, "restored", "quorum", 50)] == [body_of(i, 300) for i in range(50)]
    places = {"logs": caplog.text, "restore report": orjson.dumps(report.to_json()),
              **stored_objects(storage, skip=["/definitions/"])}
    assert leaks(secret_user, places) == []
    assert len(caplog.records) > 20 and "storage s-1/manifest.json" in places  # logs and objects were searched
    # and the search would have found them: the definitions export and the rollback snapshot hold the hash
    definitions = stored_objects(storage)
    assert any(f.startswith("password hash in storage s-1/definitions/") for f in leaks(secret_user, definitions))


def test_failures_name_the_user_and_never_the_password(broker, vhost, secret_user, tmp_path, caplog):
    # Given connections with a distinctive password that is wrong, or pointing at closed ports
    caplog.set_level(logging.DEBUG)
    wrong = replace(broker.connection, username=secret_user.name, password=distinctive_password())
    closed = replace(wrong, amqp_port=1, management_port=1)
    location = (tmp_path / "b").as_uri()
    attempts = {
        "management login": lambda: ManagementClient(wrong).version(),
        "backup, wrong password": lambda: BackupRun(wrong, BackupSettings("f-1", location)).run(),
        "backup, closed ports": lambda: BackupRun(closed, BackupSettings("f-2", location)).run(),
        "restore, wrong password": lambda: RestoreRun(wrong, RestoreRequest(location, backup_id="s-9")).publish(
            *_one_queue_plan(broker, vhost, tmp_path)),
        "connection URL": lambda: RabbitMQConnection.from_url(f"amqp://{secret_user.name}:{quote(wrong.password)}@h:bad/"),
        "Airflow connection": lambda: connection_from_airflow("h", 5672, "u", wrong.password, {"management_port": "x"}),
    }

    # When each is used
    errors = {}
    for name, attempt in attempts.items():
        with pytest.raises(RbakError) as info:
            attempt()
            pytest.fail(f"{name} did not fail")
        errors[name] = "".join(traceback.format_exception(info.value))

    # Then every error is typed and none shows the password in its message, repr or traceback, nor do the logs
    secret = {"password": wrong.password.encode(), "percent-encoded": quote(wrong.password).encode()}
    assert not [n for n, text in {**errors, "logs": caplog.text, "repr": repr(wrong)}.items()
                if any(v in text.encode() for v in secret.values())]
    assert secret_user.name in errors["management login"]


def _one_queue_plan(broker, vhost: str, tmp_path):
    """A plan (made as guest) of a one-queue backup, to publish with a wrong password."""
    declare(broker.connection, vhost, {"q": "classic"})
    publish(broker.connection, vhost, "q", 0, 3)
    location = (tmp_path / "b").as_uri()
    BackupRun(broker.connection, BackupSettings("s-9", location, selector=QueueSelector(vhosts=(vhost,)), include_definitions=False)).run()
    plan = RestoreRun(broker.connection, RestoreRequest(location, backup_id="s-9")).plan()
    return plan, plan.queues[0]


def test_a_default_backup_keeps_users_and_password_hashes_out_of_every_stored_object(broker, vhost, secret_user,
                                                                                      tmp_path):
    # Given a broker with users (guest and a user with a distinctive password)
    declare(broker.connection, vhost, {"orders": "classic"})
    location = (tmp_path / "b").as_uri()

    # When a backup runs with the default settings (include_users is off unless asked for)
    assert BackupSettings("x", location).include_users is False
    manifest = BackupRun(broker.connection, BackupSettings("nu-1", location, selector=QueueSelector(vhosts=(vhost,)))).run()

    # Then the definitions hold the vhosts and queues but no user, permission or hash, and the manifest says so
    storage = open_storage(location)
    raw = decompress(storage.get(manifest.definitions.key), Compression.ZSTD, 1 << 28, "d")
    doc = orjson.loads(raw)
    assert {"users", "permissions", "topic_permissions"}.isdisjoint(doc)
    assert any(q["name"] == "orders" and q["vhost"] == vhost for q in doc["queues"])
    assert b"password_hash" not in raw and leaks(secret_user, stored_objects(storage)) == []
    # and no other object (manifest, reports, segments), decompressed, holds a hash either
    assert [key for key, data in stored_objects(storage).items() if b"password_hash" in data] == []
    stored = ManifestStore(storage).load("nu-1").definitions
    assert stored.user_count == 0 and stored.extensions == {"users_included": False}
