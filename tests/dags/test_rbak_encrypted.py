"""``airflow dags test`` of a backup and a restore on an encrypted S3 location: the backup (its segments encoded and
deep-verified by Spark) stores nothing in plaintext, and the restore reads it back byte-exact through the same keys."""

from __future__ import annotations

import json

import pytest
import requests

from airflow_rbak.storage import open_storage
from airflow_rbak.storage.encrypted import MAGIC, MARKER_KEY
from airflow_rbak.storage.keyring import KEYRING_ENV, new_key_text, parse_keyring
from tests.dags.airflow_env import airflow_env, dags_test, runs_facts
from tests.reliability.secrets import log_files
from tests.restore.helpers import body_of, declare, publish, read_queue

QUEUES = {"orders": ("classic", 40), "payments": ("quorum", 20)}
KEYS = f"{new_key_text('k2')},{new_key_text('k1')}"  # as after a rotation: k2 writes


def _as_stored(body: bytes) -> bytes:
    """A stretch of a body as an uncompressed segment holds it (docs/format.md: one number per byte)."""
    return ",".join(str(b) for b in body[8:48]).encode()


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.s3
def test_a_backup_and_restore_on_an_encrypted_s3_location_store_no_plaintext_and_restore_byte_exact(
        broker, vhost, airflow_home, s3_storage_url):
    # Given two queues of known bodies, and the location's keys in a connection named by [rbak] encryption_conn_id
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    env = airflow_env(airflow_home, AIRFLOW_CONN_RBAK_ENCRYPTION=json.dumps({"conn_type": "generic", "password": KEYS}),
                      AIRFLOW__RBAK__ENCRYPTION_CONN_ID="rbak_encryption")
    env.pop(KEYRING_ENV, None)
    target = f"{vhost}-restored"
    backup_conf = {"storage_url": s3_storage_url, "backup_id": "enc-1", "vhosts": [vhost], "segment_work": "spark",
                   "verify": "deep", "compression": "none", "allow_delivery_count_increase": True}
    restore_conf = {"storage_url": s3_storage_url, "backup_id": "latest", "vhosts": [vhost],
                    "vhost_map": {vhost: target}, "restore_definitions": True, "skip_approval": True}

    try:
        # When the backup DAG and then the restore DAG run
        backed_up = dags_test(env, backup_conf)
        assert backed_up.returncode == 0, (backed_up.stdout + backed_up.stderr)[-6000:]
        restored = dags_test(env, restore_conf, dag_id="rbak_restore")
        assert restored.returncode == 0, (restored.stdout + restored.stderr)[-6000:]

        # Then both succeeded, the segments were encoded and verified on Spark, and every message came back in order
        facts = runs_facts(env, "rbak_backup", "rbak_restore")
        assert facts["rbak_backup"]["state"] == facts["rbak_restore"]["state"] == "success"
        assert facts["rbak_backup"]["xcom"]["encode[-1].return_value"]["ran"] == ["spark"]
        assert facts["rbak_restore"]["xcom"]["report[-1].return_value"]["published"] == 60
        for name, (queue_type, count) in QUEUES.items():
            messages = read_queue(broker.connection, target, name, queue_type, count)
            assert [m[0] for m in messages] == [body_of(i, 300) for i in range(count)], name

        # and every stored object but the marker is an envelope holding none of the bodies nor the definitions
        raw = open_storage(s3_storage_url, keyring=None).inner  # the stored bytes, under the unkeyed guard
        stored = {i.key: raw.get(i.key) for i in raw.list()}
        bodies = [_as_stored(body_of(i, 300)) for i in range(40)]
        assert any("/segment-" in k for k in stored) and any("/definitions/" in k for k in stored)
        assert any("restore" in k or "/state/" in k for k in stored)  # the runs' state objects are sealed too
        for key, data in stored.items():
            if key.endswith(MARKER_KEY):
                continue
            assert data.startswith(MAGIC), key
            assert not any(body in data for body in bodies), key
            assert b"x-queue-type" not in data and b"orders" not in data, key
        # (the same segments opened with the keys hold the bodies: the search above would have found them)
        keyed = open_storage(s3_storage_url, keyring=parse_keyring(KEYS))
        opened = b"".join(keyed.get(k) for k in stored if "/orders/segment-" in k)
        assert all(body in opened for body in bodies)
        # and the keys are in no task log, no output, no XCom
        secrets = [entry.split(":", 1)[1] for entry in KEYS.split(",")]
        places = {"output": backed_up.stdout + backed_up.stderr + restored.stdout + restored.stderr,
                  "xcom": json.dumps(facts), **{k: v.decode(errors="replace") for k, v in log_files(airflow_home).items()}}
        assert [(where, i) for where, text in places.items() for i, s in enumerate(secrets) if s in text] == []
    finally:
        try:
            broker.api("DELETE", f"vhosts/{target}")
        except requests.RequestException:
            pass
