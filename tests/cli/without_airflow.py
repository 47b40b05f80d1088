"""``rbak`` run as a real process with no Airflow home, and the backup-then-restore round trip the command-line tests
share: seed queues, ``rbak backup`` with the broker's URL in a file, ``rbak restore`` into another vhost with the URL
in the environment, then every message compared byte for byte with what was published.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import requests

from tests.restore.helpers import PROPERTY_NAMES, declare, expected_view, publish, read_queue

#: Queue name -> (queue type, messages seeded).
Queues = dict[str, tuple[str, int]]


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


def seed_with_broker_file(broker, vhost: str, queues: Queues, user, tmp_path: Path) -> Path:
    """Declare and fill ``queues``; the broker's URL with ``user``'s password in a file, which only the backup reads."""
    declare(broker.connection, vhost, {n: t for n, (t, _) in queues.items()})
    for name, (_, count) in queues.items():
        publish(broker.connection, vhost, name, 0, count)
    secret_file = tmp_path / "broker-url"
    secret_file.write_text(broker_url(broker.connection, user))
    return secret_file


def rbak_backup(location: str, backup_id: str, vhost: str, secret_file: Path, home: Path
                ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``rbak backup`` of ``vhost``, the broker's URL read from ``secret_file``."""
    return rbak_without_airflow(
        ["backup", "--path", location, "--backup-id", backup_id, "--broker-file", str(secret_file), "--format", "json",
         "--conf", json.dumps({"vhosts": [vhost]})], home)


def rbak_restore(location: str, vhost: str, target: str, url: str, tmp_path: Path, home: Path
                 ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``rbak restore`` of the latest backup's ``vhost`` into ``target``, definitions first, the broker's URL in the
    environment."""
    # (the messages carry user_id guest, which RabbitMQ refuses from another user: strip_user_id)
    conf = {"vhosts": [vhost], "restore_definitions": True, "checkpoint_state": str(tmp_path / "restore.db"),
            "strip_user_id": True}
    return rbak_without_airflow(
        ["restore", "--path", location, "--backup-id", "latest", "--vhost-map", f"{vhost}={target}",
         "--conf", json.dumps(conf), "--format", "json"], home, RBAK_BROKER_URL=url)


def assert_restored_as_published(broker, target: str, queues: Queues) -> None:
    """``target`` holds every message of ``queues`` as it was published, byte for byte, every property and typed
    header, in order (but the user_id stripped)."""
    broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    for name, (queue_type, count) in queues.items():
        published = [without_user_id(expected_view(i, queue_type)) for i in range(count)]
        assert read_queue(broker.connection, target, name, queue_type, count) == published, name


@contextmanager
def deleted_afterwards(broker, target: str) -> Iterator[str]:
    """The vhost a restore creates, deleted when the test ends, however it ends."""
    try:
        yield target
    finally:
        try:
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")
        except requests.RequestException:
            pass
