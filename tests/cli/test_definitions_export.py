"""``rbak definitions export``: a backup's definitions as RabbitMQ's own JSON, imported by hand into another cluster.

The file is imported the way a person would (``POST /api/definitions`` on a second node, a cluster of its own), and
the vhost read back from it is compared with the source's: the same queues, exchanges, bindings and policies. The
users' password hashes the backup holds reach the file only with ``--include-users``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.broker.conftest import broker, second_broker, vhost  # noqa: F401 - fixtures
from tests.reliability.secrets import create_user, leaks
from tests.restore.helpers import backup, declare

KINDS = ("queues", "exchanges", "bindings", "policies")


def rbak(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``rbak ARGS`` as a process with no Airflow configuration."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return subprocess.run([sys.executable, "-m", "airflow_rbak.cli.main", *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def vhost_definitions(node, name: str) -> dict[str, list]:
    """The vhost's queues, exchanges, bindings and policies as its broker exports them, in a stable order."""
    doc = node.api("GET", f"definitions/{quote(name, safe='')}").json()
    return {k: sorted(doc.get(k, []), key=lambda i: json.dumps(i, sort_keys=True)) for k in KINDS}


def seed(node, name: str) -> None:
    """Two queues, an exchange bound to one of them, a policy: what a hand import must bring back."""
    declare(node.connection, name, {"orders": "classic", "payments": "quorum"})
    v = quote(name, safe="")
    node.api("PUT", f"exchanges/{v}/events", json={"type": "topic", "durable": True})
    node.api("POST", f"bindings/{v}/e/events/q/orders", json={"routing_key": "order.*", "arguments": {}})
    node.api("PUT", f"policies/{v}/cap", json={"pattern": "^orders$", "definition": {"max-length": 1000},
                                             "apply-to": "queues", "priority": 1})


@pytest.mark.broker
def test_the_exported_definitions_import_into_another_cluster_and_carry_hashes_only_when_asked(
        broker, second_broker, vhost, tmp_path):  # noqa: F811
    # Given a vhost with queues, an exchange, a binding, a policy and a user, backed up with the users' hashes
    seed(broker, vhost)
    user = create_user(broker, vhost)
    location = (tmp_path / "backups").as_uri()
    backup(broker.connection, location, "defs-1", vhost, include_users=True)
    plain, full = tmp_path / "plain.json", tmp_path / "full.json"
    try:
        # When the definitions are exported without --include-users, and imported into the other cluster
        done = rbak("definitions", "export", "--path", location, "--backup-id", "latest", "--vhost", vhost,
                    "-o", str(plain))
        assert done.returncode == 0, done.stderr
        second_broker.api("POST", "definitions", data=plain.read_bytes(), headers={"content-type": "application/json"})

        # Then the other cluster's vhost holds what the source's does, and the file holds no user, hash or password
        assert vhost_definitions(second_broker, vhost) == vhost_definitions(broker, vhost)
        assert all(vhost_definitions(broker, vhost)[k] for k in KINDS)  # (nothing compared empty)
        document = json.loads(plain.read_text())
        assert "users" not in document and "permissions" not in document
        assert [v["name"] for v in document["vhosts"]] == [vhost]
        assert leaks(user, {"file": plain.read_bytes(), "output": (done.stdout + done.stderr).encode()}) == []
        assert "left out (" in done.stdout and "--include-users writes them" in done.stdout
        assert stat.S_IMODE(plain.stat().st_mode) == 0o600

        # When exported again with --include-users and imported
        done = rbak("definitions", "export", "--path", location, "--backup-id", "defs-1", "--vhost", vhost,
                    "-o", str(full), "--include-users", "--format", "json")
        assert done.returncode == 0, done.stderr
        second_broker.api("POST", "definitions", data=full.read_bytes(), headers={"content-type": "application/json"})

        # Then the user, with the source's hash, signs in to the other cluster with the source's password
        users = {u["name"]: u for u in json.loads(full.read_text())["users"]}
        assert users[user.name]["password_hash"] == user.password_hash
        c = second_broker.connection
        who = requests.get(f"{c.management_base_url}/api/whoami", auth=(user.name, user.password), timeout=30)
        assert who.status_code == 200 and who.json()["name"] == user.name
        assert json.loads(done.stdout)["users"] == "written as stored"
        assert user.password not in done.stdout + done.stderr
    finally:
        for path in (f"vhosts/{quote(vhost, safe='')}", f"users/{quote(user.name, safe='')}"):
            try:
                second_broker.api("DELETE", path)
            except requests.RequestException:
                pass
        broker.api("DELETE", f"users/{quote(user.name, safe='')}")


def test_a_whole_export_without_users_to_standard_output_says_what_it_left_out(tmp_path):
    # Given a backup whose definitions export (stored as the broker returned it) holds a user and a shovel URI
    from airflow_rbak.codec.compression import compress
    from airflow_rbak.codec.constants import Compression
    from airflow_rbak.codec.layout import definitions_key
    from airflow_rbak.codec.manifest import BackupManifest, DefinitionsBackup
    from airflow_rbak.repository.manifest_store import ManifestStore
    from airflow_rbak.storage import open_storage

    doc = {"rabbit_version": "3.10.8", "users": [{"name": "ops", "password_hash": "SECRETHASH", "tags": ["administrator"]}],
           "vhosts": [{"name": "/"}], "permissions": [{"user": "ops", "vhost": "/", "configure": ".*", "write": ".*",
                                                      "read": ".*"}],
           "parameters": [{"vhost": "/", "component": "shovel", "name": "s",
                           "value": {"src-uri": "amqp://ops:PASSWORD1@mq"}}],
           "global_parameters": [{"name": "cluster_name", "value": "prod"}],
           "queues": [{"name": "q", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
           "exchanges": [], "bindings": [], "policies": []}
    location = (tmp_path / "b").as_uri()
    storage = open_storage(location)
    key = definitions_key("b1", Compression.ZSTD)
    raw = json.dumps(doc).encode()
    storage.put(key, compress(raw, Compression.ZSTD, 3))
    ManifestStore(storage).save(BackupManifest("b1", 1, "0", completed_at=2,
                                               definitions=DefinitionsBackup.of(key, doc, len(raw))))

    # When it is exported to standard output without --include-users
    done = rbak("definitions", "export", "--path", location, "--backup-id", "latest", "-o", "-")

    # Then stdout is the document alone, without the user, its permission or the URI's credentials; stderr says so
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert "SECRETHASH" not in done.stdout and "PASSWORD1" not in done.stdout + done.stderr
    assert written["queues"] == doc["queues"] and written["global_parameters"] == doc["global_parameters"]
    assert "users" not in written and "permissions" not in written
    assert "left out (1 users with their password hashes" in done.stderr

    # and an unknown vhost is a usage error naming the ones there are
    done = rbak("definitions", "export", "--path", location, "--backup-id", "b1", "--vhost", "prod", "-o",
                str(tmp_path / "x.json"))
    assert done.returncode == 2 and "no vhost 'prod'" in done.stderr and not Path(tmp_path / "x.json").exists()
