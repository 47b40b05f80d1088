"""``rbak backup`` and ``rbak restore``: the DAGs' engines on the day Airflow is down.

Both run as real processes without an ``AIRFLOW_HOME``, ``-X importtime``
records every module they import, and the broker's password reaches them
only through a file or the environment, never argv or their output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.reliability.secrets import create_user, leaks
from tests.restore.helpers import PROPERTY_NAMES, declare, expected_view, publish, read_queue

QUEUES = {"orders": ("classic", 50), "payments": ("quorum", 30)}


def rbak_without_airflow(args: list[str], home: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``rbak`` with no Airflow home; returns the result and the names of every module it imported."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RBAK_BROKER"))}
    clean.update({"HOME": str(home), **env})
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "airflow_rbak.cli.main", *args],
                          env=clean, capture_output=True, text=True, timeout=300)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    output = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, output), modules


def without_user_id(view: tuple) -> tuple:
    body, props, headers = view
    return body, tuple(None if n == "user_id" else v for n, v in zip(PROPERTY_NAMES, props)), headers


def broker_url(connection, user) -> str:
    return (f"amqp://{quote(user.name, safe='')}:{quote(user.password, safe='')}@{connection.host}:{connection.amqp_port}/"
            f"?management_port={connection.management_port}&stream_port={connection.stream_port}")


@pytest.mark.broker
def test_rbak_backs_up_and_restores_into_another_vhost_byte_exact_without_airflow(broker, vhost, tmp_path):  # noqa: F811
    # Given two seeded queues and a user whose password only a file (backup) and the environment (restore) hold
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    user = create_user(broker, vhost)
    secret_file = tmp_path / "broker-url"
    secret_file.write_text(broker_url(broker.connection, user))
    location, target, home = (tmp_path / "backups").as_uri(), f"{vhost}-dr", tmp_path / "home"
    home.mkdir()
    try:
        # When `rbak backup` and then `rbak restore` run, with no Airflow anywhere
        backed_up, backup_modules = rbak_without_airflow(
            ["backup", "--path", location, "--backup-id", "dr-1", "--broker-file", str(secret_file), "--format", "json",
             "--conf", json.dumps({"vhosts": [vhost]})], home)
        # (the messages carry user_id guest, which RabbitMQ refuses from another user: strip_user_id)
        conf = {"vhosts": [vhost], "restore_definitions": True, "checkpoint_state": str(tmp_path / "restore.db"),
                "strip_user_id": True}
        restored, restore_modules = rbak_without_airflow(
            ["restore", "--path", location, "--backup-id", "latest", "--vhost-map", f"{vhost}={target}",
             "--conf", json.dumps(conf), "--format", "json"], home, RBAK_BROKER_URL=broker_url(broker.connection, user))

        # Then both succeed without importing Airflow
        assert backed_up.returncode == 0, backed_up.stdout + backed_up.stderr
        assert restored.returncode == 0, restored.stdout + restored.stderr
        assert "airflow_rbak.restore.run" in restore_modules and "airflow_rbak.backup.run" in backup_modules
        assert [m for m in backup_modules | restore_modules if m == "airflow" or m.startswith("airflow.")] == []
        assert ManifestStore(open_storage(location)).load("dr-1").completed_at is not None
        report = json.loads(restored.stdout)
        assert report["planned"] == report["published"] == sum(c for _, c in QUEUES.values())
        # and the other vhost holds every message as it was published, byte for byte, every property and typed
        # header, in order (but the user_id stripped)
        broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        for name, (queue_type, count) in QUEUES.items():
            published = [without_user_id(expected_view(i, queue_type)) for i in range(count)]
            assert read_queue(broker.connection, target, name, queue_type, count) == published, name
        # and the password is in neither command's output
        places = {"backup output": backed_up.stdout + backed_up.stderr, "restore output": restored.stdout + restored.stderr}
        assert leaks(user, places) == []
    finally:
        try:
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")
        except requests.RequestException:
            pass
        broker.api("DELETE", f"users/{user.name}")


def test_rbak_restore_without_a_broker_says_where_to_put_one_and_repeats_no_secret(tmp_path):
    done, _ = rbak_without_airflow(["restore", "--path", (tmp_path / "b").as_uri(), "--backup-id", "latest"], tmp_path)

    assert done.returncode == 2  # a usage error
    assert "RBAK_BROKER_URL" in done.stderr and "--broker-file" in done.stderr
    assert "Traceback" not in done.stderr


def test_rbak_restore_refuses_a_setting_the_dag_does_not_have(tmp_path):
    done, _ = rbak_without_airflow(["restore", "--conf", '{"publish_mod": "queue"}'], tmp_path,
                                   RBAK_BROKER_URL="amqp://u:Hidden-Pw-1@127.0.0.1:1/")

    assert done.returncode == 2
    assert "unknown restore settings ['publish_mod']" in done.stderr
    assert "Hidden-Pw-1" not in done.stdout + done.stderr
