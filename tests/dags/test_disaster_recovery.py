"""Disaster recovery (docs/disaster-recovery.md): the Airflow that made an encrypted backup is gone; a new Airflow,
configured from nothing but what the procedure says to keep outside Airflow, restores it into a new cluster.

Host A is an Airflow home of its own (its own fernet key and database) that backs up with ``airflow dags test
rbak_backup`` onto an encrypted S3 location whose credentials are in an ``aws`` connection. The escrow is written as
the procedure lists it: the location URL, the storage connection, the encryption keyring and ``[rbak] state_key``.
Host B is a NEW home (another fernet key, an empty database) whose settings come only from the escrow and the new
broker's connection; moto checks every request's signature, so the escrowed keys are the only way in. Then the
procedure's path without Airflow, ``rbak restore`` with the same escrow in its environment, restores it again into
another vhost of the new cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from cryptography.fernet import Fernet

from airflow_rbak.storage import open_storage
from airflow_rbak.storage.encrypted import MAGIC, MARKER_KEY
from airflow_rbak.storage.keyring import KEYRING_ENV, new_key_text
from tests.aws_role import AWS_KEY_VARIABLES, iam_enforced, keys_only_connection
from tests.broker.conftest import behaviour, second_broker  # noqa: F401 - fixtures
from tests.dags.airflow_env import VENV_BIN, airflow_env, dags_test, rabbitmq_conn, run, runs_facts
from tests.reliability.secrets import log_files
from tests.restore.helpers import declare, expected_views, publish, read_queue

QUEUES = {"orders": ("classic", 40), "payments": ("quorum", 25), "events": ("stream", 15)}


def new_home(root: Path, name: str, **settings: str) -> dict[str, str]:
    """A new Airflow home (its own fernet key, a freshly migrated empty database) and its environment; nothing of the
    test process's storage credentials or encryption keys reaches it."""
    home = root / name
    home.mkdir()
    env = {k: v for k, v in airflow_env(home, AIRFLOW__CORE__FERNET_KEY=Fernet.generate_key().decode(), **settings).items()
           if k not in (*AWS_KEY_VARIABLES, KEYRING_ENV)}
    done = run([str(VENV_BIN / "airflow"), "db", "migrate"], env, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return env


def from_escrow(escrow: dict[str, str]) -> dict[str, str]:
    """The settings docs/disaster-recovery.md says to configure on a new Airflow, from the escrowed values."""
    return {"AIRFLOW__RBAK__STORAGE_URL": escrow["storage_url"],
            "AIRFLOW_CONN_RBAK_STORAGE": escrow["storage_connection"], "AIRFLOW__RBAK__STORAGE_CONN_ID": "rbak_storage",
            "AIRFLOW_CONN_RBAK_ENCRYPTION": json.dumps({"conn_type": "generic", "password": escrow["encryption_keyring"]}),
            "AIRFLOW__RBAK__ENCRYPTION_CONN_ID": "rbak_encryption",
            "AIRFLOW__RBAK__STATE_KEY": escrow["state_key"]}


def rbak_restore_from_escrow(escrow: dict[str, str], target, source_vhost: str, target_vhost: str,
                             home: Path) -> subprocess.CompletedProcess[str]:
    """``rbak restore`` as docs/disaster-recovery.md runs it without Airflow: the escrowed keyring, state key and storage
    keys in the environment, the new broker in ``RBAK_BROKER_URL``, no Airflow home."""
    home.mkdir()
    keys = json.loads(escrow["storage_connection"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RBAK_", *AWS_KEY_VARIABLES))}
    env.update({"HOME": str(home), KEYRING_ENV: escrow["encryption_keyring"], "AIRFLOW__RBAK__STATE_KEY": escrow["state_key"],
                "AWS_ACCESS_KEY_ID": keys["login"], "AWS_SECRET_ACCESS_KEY": keys["password"],
                "RBAK_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{target.amqp_port}/?management_port="
                                   f"{target.management_port}&stream_port={target.stream_port}"})
    return subprocess.run([sys.executable, "-m", "airflow_rbak.cli.main", "restore", "--path", escrow["storage_url"],
                           "--backup-id", "latest", "--vhost-map", f"{source_vhost}={target_vhost}", "--format", "json",
                           "--conf", json.dumps({"vhosts": [source_vhost], "restore_definitions": True})],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.broker
@pytest.mark.s3
def test_a_new_airflow_configured_from_the_escrow_restores_an_encrypted_backup_byte_exact_into_a_new_cluster(
        broker, second_broker, vhost, behaviour, s3_server, s3_storage_url, tmp_path):  # noqa: F811
    # Given messages of every queue type on the source broker
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (queue_type, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count, decimal=queue_type != "stream")
    # and what the procedure keeps outside Airflow, chosen when host A was set up
    escrow = {"storage_url": s3_storage_url, "storage_connection": keys_only_connection(s3_server),
              "encryption_keyring": f"{new_key_text('2026-11')}", "state_key": secrets.token_hex(32)}
    host_a = new_home(tmp_path, "host-a", **from_escrow(escrow))
    (tmp_path / "escrow.json").write_text(json.dumps(escrow))  # kept apart from host A (a vault, a safe)

    with iam_enforced(s3_server):
        # When host A backs up, and is then lost (nothing of its home is used again)
        backed_up = dags_test(host_a, {"backup_id": "dr-1", "vhosts": [vhost], "verify": "deep",
                                       "allow_delivery_count_increase": True})
        assert backed_up.returncode == 0, (backed_up.stdout + backed_up.stderr)[-6000:]
        assert runs_facts(host_a, "rbak_backup")["rbak_backup"]["state"] == "success"

        # and a new Airflow home, configured from the escrow and the new cluster's connection, restores the latest
        kept = json.loads((tmp_path / "escrow.json").read_text())
        c = second_broker.connection
        host_b = new_home(tmp_path, "host-b", **from_escrow(kept), AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
            amqp_port=c.amqp_port, management_port=c.management_port, stream_port=c.stream_port))
        assert host_b["AIRFLOW__CORE__FERNET_KEY"] != host_a["AIRFLOW__CORE__FERNET_KEY"]
        restored = dags_test(host_b, {"backup_id": "latest", "vhosts": [vhost], "restore_definitions": True,
                                      "skip_approval": True}, dag_id="rbak_restore")

        # and, the procedure's path without Airflow, `rbak restore` with the same escrow into another vhost there
        by_hand = rbak_restore_from_escrow(kept, c, vhost, f"{vhost}-cli", tmp_path / "no-airflow")
    try:
        # Then the restore succeeded, and every message is in the new cluster, byte for byte, every property and header
        assert restored.returncode == 0, (restored.stdout + restored.stderr)[-6000:]
        facts = runs_facts(host_b, "rbak_restore")["rbak_restore"]
        assert facts["state"] == "success", facts["tasks"]
        assert facts["xcom"]["report[-1].return_value"]["published"] == sum(n for _, n in QUEUES.values())
        for name, (queue_type, count) in QUEUES.items():
            got = read_queue(second_broker.connection, vhost, name, queue_type, count)
            assert got == expected_views(count, queue_type, behaviour), name
        assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr
        assert json.loads(by_hand.stdout)["published"] == sum(n for _, n in QUEUES.values())
        for name, (queue_type, count) in QUEUES.items():
            got = read_queue(second_broker.connection, f"{vhost}-cli", name, queue_type, count)
            assert got == expected_views(count, queue_type, behaviour), name
        # and the location host A wrote is encrypted (every object but the marker is an envelope; moto no longer checks)
        stored = open_storage(s3_storage_url, keyring=None).inner
        keys = [i.key for i in stored.list() if not i.key.endswith(MARKER_KEY)]
        assert any("/segment-" in k for k in keys) and all(stored.get(k).startswith(MAGIC) for k in keys)
        # and neither the keyring, the state key nor the storage secret is in host B's output or logs
        secret_key = json.loads(kept["storage_connection"])["password"]
        words = [kept["encryption_keyring"].split(":", 1)[1], kept["state_key"], secret_key]
        places = {"output": restored.stdout + restored.stderr + by_hand.stdout + by_hand.stderr, "xcom": json.dumps(facts),
                  **{k: v.decode(errors="replace") for k, v in log_files(Path(host_b["AIRFLOW_HOME"])).items()}}
        assert [(where, i) for where, text in places.items() for i, w in enumerate(words) if w in text] == []
    finally:
        for name in (vhost, f"{vhost}-cli"):
            try:
                second_broker.api("DELETE", f"vhosts/{name}")
            except requests.RequestException:
                pass
