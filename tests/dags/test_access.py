"""The ``[rbak]`` access rules on the real DAGs (``airflow dags test``): a param naming a location or connection the
administrator did not allow fails the run's first task, before anything is read or written; ``skip_approval``
fails at ``approve`` unless ``[rbak] allow_skip_approval`` allows it. The rules themselves: tests/test_access.py.

The shared test environment opens the rules (tests/dags/airflow_env.py); each test here closes them again, as a
deployment that sets nothing has them.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.dags.airflow_env import airflow_env, dags_test, run_facts
from tests.dags.test_rbak_freshness import location_finished
from tests.restore.helpers import backup, declare, publish, read_queue


def closed_env(airflow_home: Path, storage_url: str, **extra: str) -> dict[str, str]:
    """The DAGs' environment with the access rules at their defaults, ``storage_url`` the configured location."""
    return airflow_env(airflow_home, AIRFLOW__RBAK__STORAGE_URL=storage_url, AIRFLOW__RBAK__ALLOWED_STORAGE_URLS="",
                       AIRFLOW__RBAK__ALLOWED_CONN_IDS="", AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL="False", **extra)


def _refused_first(env: dict[str, str], conf: dict, dag_id: str, first: str) -> str:
    """Run the DAG; assert that its first task failed and nothing after it ran; its output."""
    done = dags_test(env, conf, dag_id=dag_id)
    assert done.returncode != 0
    tasks = run_facts(env, dag_id)["tasks"]
    assert tasks.pop(f"{first}[-1]") == "failed", tasks
    assert set(tasks.values()) <= {"upstream_failed", "None"}, tasks
    return done.stdout + done.stderr


def test_a_backup_naming_a_location_beside_the_allowed_one_or_another_connection_is_refused_before_anything_runs(
        airflow_home, tmp_path):
    # Given the configured location /…/backups, and nothing else allowed
    allowed = tmp_path / "backups"
    env = closed_env(airflow_home, allowed.as_uri())

    # When a backup names /…/backups-evil (a prefix of the name, not a folder below it)
    output = _refused_first(env, {"storage_url": f"{allowed.as_uri()}-evil", "backup_id": "evil-1"}, "rbak_backup",
                            "discover")

    # Then discover failed naming the param and the option to change, and nothing was written anywhere
    assert f"param storage_url names '{allowed.as_uri()}-evil', which is not an allowed storage location" in output
    assert "[rbak] allowed_storage_urls" in output
    assert not Path(f"{allowed}-evil").exists() and not allowed.exists()

    # And a backup naming a folder outside through '..', or a connection not allowed, is refused the same way
    output = _refused_first(env, {"storage_url": f"{allowed.as_uri()}/../outside", "rabbitmq_conn_id": "rabbitmq_prod"},
                            "rbak_backup", "discover")
    assert "param storage_url names" in output and not (tmp_path / "outside").exists()
    assert "param rabbitmq_conn_id names connection 'rabbitmq_prod', which is not an allowed connection" in output
    assert "[rbak] allowed_conn_ids" in output


def test_verify_and_freshness_refuse_at_their_first_task_and_pass_at_their_defaults(airflow_home, tmp_path):
    # Given a configured location holding a recent backup
    allowed = location_finished(tmp_path, "backups", 1)
    elsewhere = location_finished(tmp_path, "elsewhere", 1)
    env = closed_env(airflow_home, allowed)

    # When rbak_verify names another Spark connection, and rbak_freshness another location
    verify = _refused_first(env, {"spark_conn_id": "spark_cluster"}, "rbak_verify", "resolve_backup")
    freshness = _refused_first(env, {"storage_urls": [allowed, elsewhere]}, "rbak_freshness", "locations")

    # Then each is refused naming what to change
    assert "param spark_conn_id names connection 'spark_cluster'" in verify and "[rbak] allowed_conn_ids" in verify
    assert f"param storage_urls names '{elsewhere}'" in freshness
    # and a run left at its defaults (the configured location) is not refused
    done = dags_test(env, {}, dag_id="rbak_freshness")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert run_facts(env, "rbak_freshness")["tasks"] == {"locations[-1]": "success", "check[0]": "success"}


@pytest.mark.broker
def test_a_restore_refuses_a_checkpoint_state_outside_and_skip_approval_unless_allowed_changing_nothing(
        broker, vhost, tmp_path, airflow_home):
    # Given a backup of 5 messages in the configured location, and an empty target vhost
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    allowed = (tmp_path / "backups").as_uri()
    backup(broker.connection, allowed, "access-1", vhost)
    broker.api("DELETE", f"queues/{quote(vhost, safe='')}/orders")
    env = closed_env(airflow_home, allowed)
    conf = {"backup_id": "access-1", "vhosts": [vhost], "strip_user_id": True}

    # When a restore keeps its checkpoints in a file outside every allowed location
    outside = tmp_path / "state" / "restore.db"
    output = _refused_first(env, {**conf, "checkpoint_state": str(outside)}, "rbak_restore", "plan")

    # Then plan failed naming checkpoint_state, and the file was never made
    assert f"param checkpoint_state names '{outside}', which is not an allowed storage location" in output
    assert not outside.parent.exists()

    # When a restore asks to skip the approval, which [rbak] allow_skip_approval (off) does not allow
    done = dags_test(env, {**conf, "skip_approval": True}, dag_id="rbak_restore")

    # Then it fails at approve saying which option to set, and nothing after it ran: the queue was not even created
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "skip_approval is set, but [rbak] allow_skip_approval is off" in output
    tasks = run_facts(env, "rbak_restore")["tasks"]
    assert (tasks["plan[-1]"], tasks["approve[-1]"], tasks["definitions[-1]"]) == ("success", "failed", "upstream_failed")
    assert all(state == "upstream_failed" for task, state in tasks.items() if task.startswith(("publish", "report")))
    queues = broker.api("GET", f"queues/{quote(vhost, safe='')}").json()
    assert [q["name"] for q in queues] == []

    # And where the administrator allows it, the same run goes on and restores the 5 messages
    done = dags_test({**env, "AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL": "True"}, {**conf, "skip_approval": True},
                     dag_id="rbak_restore")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert len(read_queue(broker.connection, vhost, "orders", "classic", 5)) == 5
