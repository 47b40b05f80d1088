"""``airflow dags test rbak_restore`` with ``publish_threads``: one publish task publishes its six queues three at a
time, each exactly as alone; a queue that fails leaves the others complete, the task names it, a re-run resumes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.reliability.secrets import log_files
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

#: Six queues of both types and different lengths, so that no queue's messages could pass for another's.
QUEUES = {f"q{n}": ("classic" if n % 2 else "quorum", 90 + 17 * n) for n in range(6)}


def _backup_of_six(broker: Any, vhost: str, location: str) -> None:
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    backup(broker.connection, location, "thr-1", vhost)


def _conf(location: str, vhost: str, target: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"storage_url": location, "backup_id": "thr-1", "vhosts": [vhost], "vhost_map": {vhost: target},
            "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True,
            "max_publish_tasks": 1, "publish_threads": 3, **extra}  # all six queues in one task, three at once


def _logs(done: Any, home: Path) -> str:
    """What ``airflow dags test`` printed and every log file it wrote (where its task logs go)."""
    return done.stdout + done.stderr + "".join(v.decode(errors="replace") for v in log_files(home).values())


def _target_holds_every_message_in_order(broker: Any, behaviour: Any, target: str, names: Any) -> None:
    for name in names:
        queue_type, count = QUEUES[name]
        restored = read_queue(broker.connection, target, name, queue_type, count)
        assert restored == expected_views(count, queue_type, behaviour), name


@pytest.mark.broker
def test_one_publish_task_publishes_six_queues_three_at_once_each_byte_exact_and_in_order(
        broker, behaviour, vhost, tmp_path, airflow_home):
    # Given a backup of six queues
    location = (tmp_path / "b").as_uri()
    _backup_of_six(broker, vhost, location)
    target = f"{vhost}-thr"
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn())
    try:
        # When the restore DAG runs them in one publish task, three at a time
        done = dags_test(env, _conf(location, vhost, target, tmp_path, restore_definitions=True), dag_id="rbak_restore")

        # Then it succeeded with one publish task, whose results are the six queues' in the group's order
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        assert sorted(t for t in facts["tasks"] if t.startswith("publish")) == ["publish[0]"]
        results = facts["xcom"]["publish[0].return_value"]
        assert [(r["source_queue"], r["published"], r["published_total"], r["completed"]) for r in results] == [
            (name, count, count, True) for name, (_, count) in QUEUES.items()]
        # and the report counts each queue
        report = facts["xcom"]["report[-1].return_value"]
        assert {r["source_queue"]: r["published"] for r in report["queues"]} == {n: c for n, (_, c) in QUEUES.items()}
        assert report["planned"] == report["published"] == sum(c for _, c in QUEUES.values())
        # and each queue's progress and result lines are in the task log
        logs = _logs(done, airflow_home)
        for name, (_, count) in QUEUES.items():
            assert f"{vhost}/{name} -> {target}/{name}: {count} published now, {count} in total" in logs, name
        # and every queue holds every message, byte-exact in every property and header, in order
        _target_holds_every_message_in_order(broker, behaviour, target, QUEUES)
    finally:
        broker.api("DELETE", f"vhosts/{target}")


@pytest.mark.broker
def test_a_queue_that_fails_leaves_the_others_complete_names_itself_and_a_rerun_resumes_only_it(
        broker, behaviour, vhost, tmp_path, airflow_home):
    # Given a backup of six queues, and a target vhost where a policy refuses q3's publishes past 40 messages
    location = (tmp_path / "b").as_uri()
    _backup_of_six(broker, vhost, location)
    target = f"{vhost}-thr-fail"
    broker.api("PUT", f"vhosts/{target}")
    broker.api("PUT", f"permissions/{target}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    broker.api("PUT", f"policies/{target}/cap-q3", json={
        "pattern": "^q3$", "apply-to": "queues", "definition": {"max-length": 40, "overflow": "reject-publish"}})
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn())
    conf = _conf(location, vhost, target, tmp_path)
    try:
        # When the restore DAG runs the six queues in one task, three at a time
        done = dags_test(env, conf, dag_id="rbak_restore")

        # Then the publish task failed naming q3 (the broker refused its publishes), and the report did not run
        assert done.returncode != 0 or run_facts(env, dag_id="rbak_restore")["state"] == "failed"
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["tasks"]["publish[0]"] == "failed", facts["tasks"]
        logs = _logs(done, airflow_home)
        assert f"rbak publish of {vhost}/q3 failed" in logs
        assert "basic.nack" in logs
        # and every other queue was published whole, its result in the task log
        others = [n for n in QUEUES if n != "q3"]
        for name in others:
            count = QUEUES[name][1]
            assert f"{vhost}/{name} -> {target}/{name}: {count} published now, {count} in total" in logs, name
        _target_holds_every_message_in_order(broker, behaviour, target, others)

        # When the cause is gone and the restore runs again with the same checkpoints
        broker.api("DELETE", f"policies/{target}/cap-q3")
        again = dags_test(env, conf, dag_id="rbak_restore")

        # Then only q3 is published: the others' checkpoints are complete, q3 resumes after its confirmed records
        assert again.returncode == 0, (again.stdout + again.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        results = {r["source_queue"]: r for r in facts["xcom"]["publish[0].return_value"]}
        assert {n: r["published"] for n, r in results.items() if n != "q3"} == {n: 0 for n in others}
        q3 = results["q3"]
        assert q3["completed"] and q3["published_total"] == QUEUES["q3"][1]
        assert 0 < q3["published"] < QUEUES["q3"][1] and q3["resumed_from"] > 0
        _target_holds_every_message_in_order(broker, behaviour, target, ["q3"])
    finally:
        broker.api("DELETE", f"vhosts/{target}")
