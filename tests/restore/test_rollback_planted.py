"""Issue 39, case 1: planted ``rollback-before-import-*`` and ``import-record-*`` files in a backup's ``definitions/``
folder leave the target untouched. ``rbak definitions rollback --apply`` acts only on an import record this
deployment sealed, whose pinned snapshot matches, listing only what a restore imports; anything else exits non-zero
with a clear error, and the live vhost, its queue and messages, the users and permissions are as they were. Issue 50
item 7: a record our key sealed for another cluster, or naming none, is refused the same way."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.cli.main import EXIT_FAILED, main
from airflow_rbak.restore.definitions import IMPORT_RECORD
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import StateSeal, default_seal
from tests.restore.helpers import backup, body_of, declare, publish, read_queue

pytestmark = pytest.mark.broker

SNAPSHOT = "plant-1/definitions/rollback-before-import-20991231T235959999Z"
RECORD = "plant-1/definitions/import-record-20991231T235959999Z.json"
#: A snapshot that "puts back" an administrator with a known password hash.
EVIL = {"users": [{"name": "evil", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"]}],
        "permissions": [{"user": "evil", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]}


def rollback(broker, location: str, *extra: str) -> tuple[int, str, str]:
    c = broker.connection
    url = f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}"
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        broker_file = Path(folder) / "broker"
        broker_file.write_text(url)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["definitions", "rollback", "--path", location, "--backup-id", "plant-1",
                         "--broker-file", str(broker_file), *extra])
    return code, out.getvalue(), err.getvalue()


def target_state(broker, vhost: str) -> dict:
    """What the rollback must not change: vhosts, users, permissions, policies, queues, and the messages held."""
    return {
        "vhosts": sorted(v["name"] for v in broker.api("GET", "vhosts").json()),
        "users": sorted((u["name"], str(u.get("tags"))) for u in broker.api("GET", "users").json()),
        "permissions": sorted((p["user"], p["vhost"]) for p in broker.api("GET", "permissions").json()),
        "policies": sorted(p["name"] for p in broker.api("GET", "policies").json()),
        "queues": sorted((q["vhost"], q["name"]) for q in broker.api("GET", f"queues/{quote(vhost, safe='')}").json()),
    }


def cluster_of(broker) -> str:
    with ManagementClient(broker.connection) as client:
        return client.cluster_identity()


def planted(vhost: str, how: str, cluster: str) -> tuple[bytes, bytes]:
    """The snapshot and record bytes of one way to plant them (see the parameters below); ``cluster``: the target's."""
    snapshot = json.dumps(EVIL).encode()
    record = {"snapshot": SNAPSHOT, "snapshot_sha256": hashlib.sha256(snapshot).hexdigest(),
              "snapshot_size": len(snapshot), "cluster": cluster, "cluster_name": "rabbit@target",
              "run": "airflow:rbak_restore/planted", "mode": "replace",
              "created": [{"kind": "vhosts", "item": {"name": vhost}}], "replaced": []}
    ours = default_seal()
    if how == "unsealed":
        return snapshot, json.dumps(record).encode()
    if how == "other-key":
        return snapshot, StateSeal(b"another deployment's key entirely").seal(IMPORT_RECORD, RECORD, record)
    if how == "moved":  # a record our key sealed for another import, copied beside the planted snapshot
        return snapshot, ours.seal(IMPORT_RECORD, "plant-1/definitions/import-record-20260101T000000000Z.json", record)
    if how == "snapshot-swapped":  # our own record, but its snapshot replaced after it was written
        return snapshot + b" ", ours.seal(IMPORT_RECORD, RECORD, record)
    if how == "lists-users":  # sealed with our key, yet listing what a restore never imports
        record["replaced"] = [{"kind": "users", "item": {"name": "evil"}},
                              {"kind": "permissions", "item": {"user": "evil", "vhost": "/"}}]
        return snapshot, ours.seal(IMPORT_RECORD, RECORD, record)
    if how == "no-cluster":  # sealed with our key by an older version, which named no cluster
        del record["cluster"], record["cluster_name"], record["run"]
        return snapshot, ours.seal(IMPORT_RECORD, RECORD, record)
    if how == "other-cluster":  # sealed with our key for an import into another cluster
        record["cluster"], record["cluster_name"] = "another-cluster-id", "rabbit@staging"
        return snapshot, ours.seal(IMPORT_RECORD, RECORD, record)
    raise AssertionError(how)


EXPECTED = {
    "unsealed": f"{RECORD} is not trusted state: no seal",
    "other-key": f"{RECORD} is not trusted state: bad MAC",
    "moved": f"{RECORD} is not trusted state: sealed for another key",
    "snapshot-swapped": f"{SNAPSHOT} holds",
    "lists-users": f"{RECORD} lists what a restore never imports",
    "no-cluster": f"{RECORD} names no cluster (written by an older version)",
    "other-cluster": (f"{RECORD} is the import record of restore run airflow:rbak_restore/planted into cluster "
                      "'rabbit@staging' (id another-cluster-id), but the connection reaches cluster"),
}


@pytest.mark.parametrize("how", list(EXPECTED))
def test_planted_rollback_files_leave_the_target_untouched_and_exit_non_zero(broker, vhost, location, how):
    # Given a live vhost whose queue holds 5 messages, backed up, and two files planted in the backup's folder
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    backup(broker.connection, location, "plant-1", vhost)
    snapshot, record = planted(vhost, how, cluster_of(broker))
    storage = open_storage(location)
    storage.put(SNAPSHOT, snapshot)
    storage.put(RECORD, record)
    before = target_state(broker, vhost)

    # When the rollback is asked to act
    code, out, err = rollback(broker, location, "--apply")

    # Then it refused, saying why, and nothing changed: the vhost, its queue and messages, no user 'evil'
    assert code == EXIT_FAILED and out == ""
    assert err.startswith("rbak: error: ") and EXPECTED[how] in err and "nothing was changed" in err
    assert target_state(broker, vhost) == before
    assert "evil" not in [u[0] for u in before["users"]]
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 5)] == [body_of(i, 300) for i in range(5)]
    if how == "lists-users":
        assert 'replaced[0]: users {"name":"evil"}; replaced[1]: permissions {"user":"evil","vhost":"/"}' in err
