"""Every DAG triggered with its shipped params under the shipped ``[rbak]`` options (``airflow dags test``): each runs,
or refuses at its first task naming the one thing to change.

tests/dags/airflow_env.py opens the access rules for the other DAG tests; here they are back at their shipped values
(``allowed_storage_urls`` and ``allowed_conn_ids`` unset, ``allow_skip_approval`` off), as tests/dags/test_access.py
closes them. The deployment is a new one's: the connections ``rabbitmq_default`` and ``spark_default`` exist, not
``rabbitmq_drill``.

``rbak_restore`` cannot run to the end here with its shipped params: it waits for a person to approve, which
``dags test`` cannot answer. So it runs twice: as a dry run (which never waits) to the end, and with the one param
``dags test`` needs, ``skip_approval``, which the shipped options refuse at ``approve`` naming
``[rbak] allow_skip_approval`` (its first task, ``plan``, only reads).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.dags.airflow_env import dags_test, run_facts
from tests.dags.test_access import closed_env
from tests.restore.helpers import declare, publish

pytestmark = pytest.mark.broker


def _output(done) -> str:
    return done.stdout + done.stderr


def test_every_dag_runs_with_its_shipped_params_or_refuses_at_its_first_task_naming_the_setting(
        broker, vhost, airflow_home, tmp_path):
    # Given a queue with messages, and the shipped [rbak] options but the location (a new folder)
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 20)
    env = closed_env(airflow_home, (tmp_path / "backups").as_uri())

    # When rbak_backup, rbak_verify and rbak_freshness run with their shipped params
    for dag in ("rbak_backup", "rbak_verify", "rbak_freshness"):
        done = dags_test(env, {}, dag_id=dag)
        # Then each runs to the end
        assert done.returncode == 0, (dag, _output(done)[-4000:])
        assert run_facts(env, dag)["state"] == "success", dag

    # When the queue's messages are lost (a restore refuses to add to a queue holding messages, as shipped)
    broker.api("DELETE", f"queues/{quote(vhost, safe='')}/orders/contents")
    # and rbak_restore runs as a dry run (never waits for an approval), its other params shipped
    done = dags_test(env, {"dry_run": True}, dag_id="rbak_restore")
    assert done.returncode == 0, _output(done)[-4000:]
    # and with skip_approval, which the shipped options do not allow
    done = dags_test(env, {"skip_approval": True}, dag_id="rbak_restore")
    tasks = run_facts(env, "rbak_restore")["tasks"]
    # Then the dry run ran to the end; the other failed at approve naming the one setting, after a plan that only read
    assert done.returncode != 0 and tasks["plan[-1]"] == "success" and tasks["approve[-1]"] == "failed", (
        tasks, _output(done)[-3000:])
    assert "[rbak] allow_skip_approval" in _output(done)

    # When rbak_drill runs with its shipped params: its connection rabbitmq_drill is allowed, but does not exist here
    done = dags_test(env, {}, dag_id="rbak_drill")
    tasks = run_facts(env, "rbak_drill")["tasks"]
    # Then it fails at its first task naming the connection to create, not the allowlist
    assert done.returncode != 0 and tasks["drill[-1]"] == "failed", tasks
    assert "rabbitmq_drill" in _output(done) and "allowed_conn_ids" not in _output(done)
