"""``airflow dags test rbak_restore``: the upgrade from a RabbitMQ 3.10 backup into RabbitMQ 4.3 with the migration's
transformations (the engine's case, and what "in order" means there: tests/restore/test_upgrade_to_43.py)."""

from __future__ import annotations

import uuid

import pytest

from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.reliability.expect import header_order_free
from tests.restore.helpers import backup, expected_view, read_queue
from tests.restore.migration_source import MIGRATION, QUEUES, path, set_up
from tests.restore.test_upgrade_to_43 import delivery_order_on_4_3


@pytest.mark.broker
@pytest.mark.rabbitmq("4.3")
def test_the_restore_dag_upgrades_a_3_10_backup_into_4_3_as_quorum_queues(broker, broker_310, tmp_path, airflow_home):
    # Given a backup of the mirrored vhost taken on the 3.10 node
    vhost, target = f"up-{uuid.uuid4().hex[:8]}", f"up-dag-{uuid.uuid4().hex[:8]}"
    set_up(broker_310, vhost)
    location = (tmp_path / "b").as_uri()
    backup(broker_310.connection, location, "up-dag", vhost)
    c = broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        c.host, c.amqp_port, c.management_port, c.stream_port))
    conf = {"storage_url": location, "backup_id": "up-dag", "vhosts": [vhost], "vhost_map": {vhost: target},
            "restore_definitions": True, "transformations": MIGRATION,
            "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True}

    # When rbak_restore runs into the 4.3 node with the migration's transformations
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")

        # Then it succeeded with every queue quorum and every message once, byte-exact, in 4.3's delivery order
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        plan = facts["xcom"]["plan[-1].plan"]["body"]["plan"]  # the sealed plan's (restore/authority.py)
        assert plan["migration"]["refused"] == [] and plan["migration"]["target_version"].startswith("4.3.")
        report = facts["xcom"]["report[-1].return_value"]
        assert report["planned"] == report["published"] == sum(n for _, n in QUEUES.values())
        types = {q["name"]: q["type"] for q in broker.api("GET", path("queues", target)).json()}
        assert types == dict.fromkeys(QUEUES, "quorum")
        for name in QUEUES:
            found = read_queue(c, target, name, "quorum", QUEUES[name][1])
            assert header_order_free(found) == header_order_free(
                [expected_view(i, "classic") for i in delivery_order_on_4_3(name)]), name
    finally:
        broker_310.api("DELETE", path("vhosts", vhost))
        try:
            broker.api("DELETE", path("vhosts", target))
        except Exception:  # noqa: BLE001 - the vhost may not exist when the run failed early
            pass
