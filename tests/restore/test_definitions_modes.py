"""Issue 14, Must show 2: a default definitions restore only creates what the target lacks, ``replace`` overwrites,
and ``rbak definitions rollback`` returns the target's ``GET /api/definitions`` to the snapshot, object by object."""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stdout
from pathlib import Path
from urllib.parse import quote

import orjson
import pika
import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.definitions import load_definitions
from airflow_rbak.restore.definitions_diff import index as full_index
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, body_of, publish, read_queue

pytestmark = pytest.mark.broker

#: What a restore imports, and so what a rollback can change; a snapshot leaves users, permissions and parameter
#: credentials out (docs/operations.md), and a restore never changes those.
RESTORED_KINDS = ("vhosts", "queues", "exchanges", "bindings", "policies")


def index(document):
    return {key: item for key, item in full_index(document).items() if key[0] in RESTORED_KINDS}


def _policy(broker, vhost: str, max_length: int) -> None:
    broker.api("PUT", f"policies/{quote(vhost, safe='')}/limits",
               json={"pattern": "^orders$", "apply-to": "queues", "definition": {"max-length": max_length}})


def _max_length(broker, vhost: str) -> int:
    return broker.api("GET", f"policies/{quote(vhost, safe='')}/limits").json()["definition"]["max-length"]


@pytest.fixture
def backed_up(broker, vhost, tmp_path):
    """A vhost with a routed queue of 20 messages and a policy ``limits`` (max-length 1,000), backed up as ``pol-1``."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.queue_declare("orders", durable=True)
        ch.queue_bind("orders", "orders.x", "new")
    _policy(broker, vhost, 1000)
    publish(broker.connection, vhost, "orders", 0, 20)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "pol-1", vhost)
    return location


def _rollback(broker, location: str, *extra: str, output: str = "json") -> dict | str:
    """``rbak definitions rollback`` of backup pol-1 (a dry run unless ``extra`` says ``--apply``)."""
    c = broker.connection
    url = f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}"
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        broker_file = Path(folder) / "broker"
        broker_file.write_text(url)
        with redirect_stdout(out):
            code = main(["definitions", "rollback", "--path", location, "--backup-id", "pol-1",
                         "--broker-file", str(broker_file), "--format", output, *extra])
    assert code == 0
    return json.loads(out.getvalue()) if output == "json" else out.getvalue()


def test_a_newer_policy_survives_the_default_import_replace_overwrites_it_and_rollback_restores_it(
        broker, vhost, backed_up, tmp_path):
    # Given the policy raised to 50,000 after the backup, and the queue's messages lost since
    _policy(broker, vhost, 50000)
    broker.api("DELETE", f"queues/{quote(vhost, safe='')}/orders/contents")
    fields = {"storage_url": backed_up, "backup_id": "pol-1", "vhosts": [vhost], "restore_definitions": True,
              "checkpoint_state": str(tmp_path / "r.db")}

    # When the backup is restored with the default definitions mode
    run = RestoreRun(broker.connection, RestoreRequest(**fields))
    plan = run.plan()
    report = run.run()

    # Then the plan listed the policy as existing and different, created nothing, and the newer policy survived
    assert plan.definitions_changes["mode"] == "missing"
    assert plan.definitions_changes["create"] == [] and plan.definitions_changes["replace"] == [f"policy {vhost}/limits"]
    assert _max_length(broker, vhost) == 50000
    assert report.published == 20

    # When the explicit replace mode runs (the same restore: its checkpoint says every message is back already)
    replaced = RestoreRun(broker.connection, RestoreRequest(**fields, definitions_mode="replace")).run()

    # Then the backed-up policy is back, and no message was published twice
    assert _max_length(broker, vhost) == 1000
    assert replaced.published == 0 and replaced.definitions["changes"]["replace"] == [f"policy {vhost}/limits"]
    snapshot_key = replaced.definitions["rollback_key"]

    # When that import is rolled back
    result = _rollback(broker, backed_up, "--apply")

    # Then GET /api/definitions equals the snapshot taken before it, object by object, and the policy is 50,000 again
    assert result["snapshot_key"] == snapshot_key and result["restored"] == [f"policy {vhost}/limits"]
    snapshot = load_definitions(open_storage(backed_up), snapshot_key)
    assert index(broker.api("GET", "definitions").json()) == index(snapshot)
    assert _max_length(broker, vhost) == 50000
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 20)] == [body_of(i, 300) for i in range(20)]


def test_rollback_deletes_every_object_the_import_created_and_nothing_else(broker, vhost, target_vhost, backed_up, tmp_path):
    # Given a restore of the backup's definitions into a vhost the target does not have
    before = broker.api("GET", "definitions").json()
    settings = RestoreRequest(backed_up, backup_id="pol-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                               restore_definitions=True, checkpoint_state=str(tmp_path / "r.db"))
    report = RestoreRun(broker.connection, settings).run()
    created = report.definitions["changes"]["create"]
    assert f"vhost {target_vhost}" in created and f"policy {target_vhost}/limits" in created
    assert f"queue {target_vhost}/orders" in created and f"exchange {target_vhost}/orders.x" in created
    assert index(broker.api("GET", "definitions").json()) != index(before)
    assert _rollback(broker, backed_up, "--dry-run")["dry_run"] is True
    listing = _rollback(broker, backed_up, output="text")  # without --apply: a dry run, listing everything
    assert index(broker.api("GET", "definitions").json()) != index(before)  # a dry run changes nothing
    assert f"  delete vhost {target_vhost}\n" in listing and "run again with --apply" in listing
    assert "sealed import record" in listing

    # When the import is rolled back
    result = _rollback(broker, backed_up, "--apply")

    # Then the target's definitions are the snapshot's again, object by object (the created vhost is gone with its
    # contents), and the snapshot is exactly what the broker held before the restore
    snapshot = load_definitions(open_storage(backed_up), report.definitions["rollback_key"])
    assert index(snapshot) == index(before)
    assert index(broker.api("GET", "definitions").json()) == index(snapshot)
    assert result["deleted"] == [f"vhost {target_vhost}"]
    assert orjson.dumps(result).find(b"password") == -1


def test_replace_mode_lists_an_existing_queue_it_cannot_change_and_leaves_it_as_it_was(broker, behaviour, vhost, target_vhost,
                                                                                          backed_up, tmp_path):
    # Given a target vhost whose queue 'orders' exists with other arguments than the backup's
    broker.api("PUT", f"vhosts/{target_vhost}")
    broker.api("PUT", f"permissions/{target_vhost}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    broker.api("PUT", f"queues/{target_vhost}/orders", json={"durable": True, "arguments": {"x-max-length": 500}})
    # (as the broker holds it: 4.x adds the default x-queue-type to the arguments of a queue declared without one)
    held = broker.api("GET", f"queues/{target_vhost}/orders").json()["arguments"]
    assert held == behaviour.declared_arguments({"x-max-length": 500})
    settings = RestoreRequest(backed_up, backup_id="pol-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                               restore_definitions=True, definitions_mode="replace", checkpoint_state=str(tmp_path / "r.db"))

    # When the definitions are restored in replace mode
    run = RestoreRun(broker.connection, settings)
    changes = run.plan().definitions_changes
    report = run.run()

    # Then the plan said the queue differs and will be kept; RabbitMQ's import indeed left it as it was
    assert changes["cannot_replace"] == [f"queue {target_vhost}/orders"]
    assert f"queue {target_vhost}/orders" not in changes["create"] + changes["replace"]
    assert broker.api("GET", f"queues/{target_vhost}/orders").json()["arguments"] == held
    assert report.published == 20
