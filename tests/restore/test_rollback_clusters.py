"""Issue 50 item 7: a definitions rollback is bound to the cluster its import changed and to the restore run that made it.

Two real brokers, two clusters: ``prod`` (the session's broker) and ``staging`` (the second node). The same backup is
restored with its definitions into both, under the same vhost name, so a record of the staging import lists as
created exactly the objects prod now holds. ``rbak definitions rollback --apply`` on prod must never act on it: the
whole of prod (definitions and every queue's messages) is read before and after each refusal.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import uuid
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from urllib.parse import quote

import pika
import pytest

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.cli.main import EXIT_FAILED, main
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.import_record import import_record_key
from airflow_rbak.storage import open_storage
from tests.reliability.target_state import changes, target_state
from tests.restore.helpers import backup, body_of, publish

pytestmark = pytest.mark.broker

PROD_RUN, STAGING_RUN = "airflow:rbak_restore/prod-run", "airflow:rbak_restore/staging-run"


@pytest.fixture
def restored_name(broker, second_broker):
    """The vhost name both restores create (on both clusters), deleted from both afterwards."""
    name = f"r-{uuid.uuid4().hex[:10]}"
    yield name
    for node in (broker, second_broker):
        with contextlib.suppress(Exception):
            node.api("DELETE", f"vhosts/{quote(name, safe='')}")


@pytest.fixture
def backed_up(broker, vhost, tmp_path):
    """A vhost with an exchange routing to a queue of 20 messages, backed up as ``two-1``."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "direct", durable=True)
        ch.queue_declare("orders", durable=True)
        ch.queue_bind("orders", "orders.x", "new")
    publish(broker.connection, vhost, "orders", 0, 20)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "two-1", vhost)
    return location


def restore_into(node, location: str, vhost: str, target: str, run_ref: str, checkpoints: Path) -> dict:
    """Definitions and messages of the backup's vhost restored into ``target`` on ``node``, as restore run ``run_ref``."""
    settings = RestoreRequest(location, backup_id="two-1", vhosts=[vhost], vhost_map={vhost: target},
                              restore_definitions=True, checkpoint_state=str(checkpoints))
    report = RestoreRun(node.connection, settings, run_ref=run_ref).run()
    assert report.published == 20
    return report.definitions


def rollback(node, location: str, *extra: str) -> tuple[int, str, str]:
    """``rbak definitions rollback`` of backup two-1 against ``node`` (JSON output)."""
    c = node.connection
    url = f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}"
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        broker_file = Path(folder) / "broker"
        broker_file.write_text(url)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["definitions", "rollback", "--path", location, "--backup-id", "two-1",
                         "--broker-file", str(broker_file), "--format", "json", *extra])
    return code, out.getvalue(), err.getvalue()


def cluster_of(node) -> tuple[str, str]:
    with ManagementClient(node.connection) as client:
        return client.cluster_identity(), client.cluster_name()


def test_a_rollback_on_prod_refuses_the_sealed_record_of_a_staging_import_and_changes_nothing(
        broker, second_broker, vhost, backed_up, restored_name, tmp_path):
    # Given the backup restored with its definitions into staging, then into prod, under the same vhost name
    staging = restore_into(second_broker, backed_up, vhost, restored_name, STAGING_RUN, tmp_path / "staging.db")
    prod = restore_into(broker, backed_up, vhost, restored_name, PROD_RUN, tmp_path / "prod.db")
    assert staging["rollback_key"] < prod["rollback_key"]  # the prod import is the newest
    (staging_id, staging_name), (prod_id, prod_name) = cluster_of(second_broker), cluster_of(broker)
    assert staging_id != prod_id
    assert (prod["cluster"], prod["restore_run"], staging["cluster"], staging["restore_run"]) == (
        prod_id, PROD_RUN, staging_id, STAGING_RUN)
    # and the prod import's snapshot and record deleted, leaving the staging import's, validly sealed, the newest
    storage = open_storage(backed_up)
    for key in (prod["rollback_key"], import_record_key(prod["rollback_key"])):
        storage.delete(key)
    before = target_state(broker)
    assert [m[0] for m in before.queue_messages(restored_name, "orders")] == [body_of(i, 300) for i in range(20)]

    # When a rollback is applied on prod: by default (the newest import), and naming either run
    newest = rollback(broker, backed_up, "--apply")
    staging_run = rollback(broker, backed_up, "--apply", "--restore-run", STAGING_RUN)
    prod_run = rollback(broker, backed_up, "--apply", "--restore-run", PROD_RUN)

    # Then each refused, naming both clusters and the run, and prod is exactly as it was, messages included
    for code, out, err in (newest, staging_run):
        assert code == EXIT_FAILED and out == "", err
        assert f"import record of restore run {STAGING_RUN} into cluster {staging_name!r} (id {staging_id})" in err
        assert f"the connection reaches cluster {prod_name!r} (id {prod_id})" in err and "nothing was changed" in err
    assert prod_run[0] == EXIT_FAILED and f"names restore run {PROD_RUN}; nothing was changed" in prod_run[2]
    assert changes(before, target_state(broker)) == []

    # When the staging import is rolled back on staging, where it was made
    code, out, err = rollback(second_broker, backed_up, "--apply")

    # Then it is undone there, the JSON naming that cluster and run, and prod is still as it was
    assert code == 0, err
    result = json.loads(out)
    assert (result["cluster"], result["cluster_name"], result["restore_run"]) == (staging_id, staging_name, STAGING_RUN)
    assert result["deleted"] == [f"vhost {restored_name}"]
    assert restored_name not in [v["name"] for v in second_broker.api("GET", "vhosts").json()]
    assert changes(before, target_state(broker)) == []


def test_a_newer_import_into_another_cluster_is_refused_not_passed_over_and_the_named_run_is_undone(
        broker, second_broker, vhost, backed_up, restored_name, tmp_path):
    # Given the backup restored into prod, then into staging (whose import is now the newest)
    before_restore = target_state(broker)
    prod = restore_into(broker, backed_up, vhost, restored_name, PROD_RUN, tmp_path / "prod.db")
    restore_into(second_broker, backed_up, vhost, restored_name, STAGING_RUN, tmp_path / "staging.db")
    restored = target_state(broker)

    # When a rollback on prod takes the newest import
    code, out, err = rollback(broker, backed_up, "--apply")

    # Then it refuses rather than fall back to the older import into prod, and nothing changed
    assert code == EXIT_FAILED and f"import record of restore run {STAGING_RUN}" in err and "--restore-run" in err
    assert changes(restored, target_state(broker)) == []

    # When the prod run is named, first as a dry run, then applied
    listed = rollback(broker, backed_up, "--restore-run", PROD_RUN)
    code, out, err = rollback(broker, backed_up, "--restore-run", PROD_RUN, "--apply")

    # Then it undid exactly the prod import: prod is as before the restore, and the listing named cluster and run
    assert listed[0] == 0 and json.loads(listed[1])["dry_run"] is True
    assert code == 0, err
    result = json.loads(out)
    assert (result["snapshot_key"], result["cluster"], result["restore_run"]) == (
        prod["rollback_key"], cluster_of(broker)[0], PROD_RUN)
    assert changes(before_restore, target_state(broker)) == []
    assert restored_name in [v["name"] for v in second_broker.api("GET", "vhosts").json()]  # staging's is untouched
