"""``airflow dags test rbak_restore`` end to end: a backup made by the backup steps, restored into a fresh vhost."""

from __future__ import annotations

import json
import sys

import pytest
import requests

from airflow_rbak.cli.runs import AIRFLOW_ONLY
from airflow_rbak.operators.metrics import location_tag
from airflow_rbak.restore.request import CONF_NAMES
from airflow_rbak.restore.rollback import load_record
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import default_seal
from tests.dags.airflow_env import REPO, airflow_env, dags_test, rabbitmq_conn, run, run_facts
from tests.dags.conftest import documented
from tests.reliability.secrets import leaks, log_files, stored_objects
from tests.restore.helpers import backup, body_of, declare, publish, read_queue, ready_count

QUEUES = {"orders": ("classic", 120), "payments": ("quorum", 60)}


@pytest.mark.broker
def test_the_restore_dag_plans_imports_publishes_per_queue_and_reports(broker, vhost, tmp_path, airflow_home, secret_user,
                                                                       statsd):
    # Given a backup of two queues (made by the BackupRun steps rbak_backup runs)
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "dag-r1", vhost)
    target = f"{vhost}-restored"
    c = broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        c.host, c.amqp_port, c.management_port, c.stream_port, login=secret_user.name, password=secret_user.password),
        **statsd.env())
    # (the messages carry user_id guest, which RabbitMQ refuses from another user: strip_user_id)
    conf = {"storage_url": location, "backup_id": "latest", "vhosts": [vhost], "vhost_map": {vhost: target},
            "restore_definitions": True, "checkpoint_state": str(tmp_path / "restore.db"), "strip_user_id": True,
            "max_publish_tasks": 1,  # both queues in one publish task, as a broker with more queues than Airflow maps
            "skip_approval": True}  # `dags test` runs unattended (tests/dags/test_rbak_restore_approval.py waits)

    # When the restore DAG runs
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")

        # Then every task succeeded, one publish task for the two queues, and the target holds every message in order
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        assert sorted(facts["tasks"]) == ["approve[-1]", "definitions[-1]", "plan[-1]", "publish[0]", "report[-1]"]
        approval = facts["xcom"]["approve[-1].return_value"]
        assert {k: v for k, v in approval.items() if k != "approval"} == {
            "approved": True, "asked": False, "reason": "skip_approval is set"}
        # sealed as not asked, for the plan of the plan task's first try
        assert (approval["approval"]["body"]["mode"], approval["approval"]["body"]["plan_try"]) == ("skip_approval", 1)
        assert [r["source_queue"] for r in facts["xcom"]["publish[0].return_value"]] == sorted(QUEUES)
        report = facts["xcom"]["report[-1].return_value"]
        assert report["planned"] == report["published"] == 180 and report["unroutable"] == 0
        assert report["definitions"]["rollback_key"].startswith("dag-r1/definitions/rollback-before-import-")
        # and its import record is sealed with the deployment's [rbak] state_key, pinning the snapshot
        record = load_record(open_storage(location), report["definitions"]["rollback_key"], default_seal())
        assert record["snapshot"] == report["definitions"]["rollback_key"] and len(record["snapshot_sha256"]) == 64
        # naming the Airflow run that imported, so that `rbak definitions rollback --restore-run` finds it
        assert record["run"].startswith("airflow:rbak_restore/") and record["cluster"]
        # and the run's metrics reached StatsD: the restore's counts, and each queue's
        metrics, where = documented(statsd.received()), location_tag(location)
        assert {k: v for k, v in metrics.items() if len(k) == 2} == {
            ("rbak.restore.complete", where): (1, "c"), ("rbak.restore.messages", where): (180, "c"),
            ("rbak.restore.unroutable", where): (0, "c")}
        assert {k: v for k, v in metrics.items() if len(k) == 4} == {
            ("rbak.restore.queue.messages", where, target, name): (count, "c") for name, (_, count) in QUEUES.items()}
        broker.api("PUT", f"permissions/{target}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        for name, (queue_type, count) in QUEUES.items():  # (the restoring user made the vhost: let guest read it)
            restored = read_queue(broker.connection, target, name, queue_type, count)
            assert [m[0] for m in restored] == [body_of(i, 300) for i in range(count)], name
        # and neither the password nor its hash is in the output, task logs, metadata DB, XCom or stored objects
        # (the definitions export holds hashes by design; the rollback snapshot holds none)
        places = {"dags test output": done.stdout + done.stderr, "xcom": json.dumps(facts), **log_files(airflow_home),
                  **stored_objects(open_storage(location), skip=["/definitions/"])}
        assert leaks(secret_user, places) == []
    finally:
        try:
            broker.api("DELETE", f"vhosts/{target}")
        except requests.RequestException:
            pass


@pytest.mark.broker
def test_the_restore_dag_with_only_a_location_and_a_backup_id_refuses_to_add_to_the_source_queue(
        broker, vhost, tmp_path, airflow_home):
    # Given a backup of a queue that still holds its 5 messages, and rabbitmq_default pointing at that same broker
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "dag-safe-1", vhost)
    env = airflow_env(airflow_home)

    # When rbak_restore runs with nothing but storage_url and backup_id (and skip_approval: nobody answers here)
    done = dags_test(env, {"storage_url": location, "backup_id": "dag-safe-1", "skip_approval": True}, dag_id="rbak_restore")

    # Then the plan task failed, saying why and what to set; nothing after it ran, and the queue holds its 5 messages
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert f"{vhost}/orders holds 5" in output and "on_existing_messages: append" in output
    facts = run_facts(env, dag_id="rbak_restore")
    assert facts["tasks"]["plan[-1]"] == "failed"
    assert all(state != "success" for task, state in facts["tasks"].items() if not task.startswith("plan"))
    assert ready_count(broker.connection, vhost, "orders") == 5
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 5)] == [body_of(i, 300) for i in range(5)]


_PARSE = r'''
import copy, json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags["rbak_restore"]
errors = {}
for name, value in [("publish_mode", "fanout"), ("max_publish_rate", 0), ("time_window_start", True),
                    ("on_existing_messages", "overwrite"), ("definitions_mode", "merge"),
                    ("backup_id", "../etc"), ("vhost_map", {"a": ""}), ("definitions_selection", {"users": ["*"]})]:
    params = copy.deepcopy(dag.params)
    try:
        params[name] = value
        params.validate()
        errors[name] = None
    except Exception as exc:
        errors[name] = str(exc)
copy.deepcopy(dag.params).validate()
print(json.dumps({"import_errors": {k: str(v) for k, v in bag.import_errors.items() if "rbak_restore" in k},
                  "tasks": [t.task_id for t in dag.tasks], "schedule": str(dag.schedule), "param_errors": errors,
                  "params": list(dag.params)}))
'''


def test_the_restore_dag_parses_is_manual_and_its_params_reject_bad_values(tmp_path):
    done = run([sys.executable, "-c", _PARSE, str(REPO / "dags")], airflow_env(tmp_path), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])

    assert facts["import_errors"] == {}
    assert facts["tasks"] == ["plan", "approve", "definitions", "publish", "report"]
    assert facts["schedule"] == "None"
    assert all(facts["param_errors"].values()), facts["param_errors"]
    # every param is a restore setting `rbak restore --conf` takes, or one it knowingly ignores (skip_approval: whoever
    # runs the command approves it)
    assert sorted(set(facts["params"]) - set(CONF_NAMES)) == sorted(set(AIRFLOW_ONLY) & set(facts["params"]))
    assert "skip_approval" in AIRFLOW_ONLY
