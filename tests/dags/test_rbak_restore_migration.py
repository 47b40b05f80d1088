"""``airflow dags test rbak_restore`` migrating a vhost of mirrored classic queues into the second cluster as quorum
queues (the engine's cases: tests/restore/test_migration.py)."""

from __future__ import annotations

import uuid

import pytest

from airflow_rbak.storage import open_storage
from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.restore.helpers import backup, expected_view, read_queue
from tests.restore.migration_source import MIGRATION, QUEUES, path, set_up, stored_order


@pytest.mark.broker
def test_the_restore_dag_migrates_mirrored_classic_queues_to_quorum_on_another_cluster(
        broker, second_broker, tmp_path, airflow_home):
    # Given a backup of the mirrored vhost on the first node
    vhost, target = f"mig-{uuid.uuid4().hex[:8]}", f"mig-dag-{uuid.uuid4().hex[:8]}"
    set_up(broker, vhost)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "mig-dag", vhost)
    c = second_broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        c.host, c.amqp_port, c.management_port, c.stream_port))
    conf = {"storage_url": location, "backup_id": "mig-dag", "vhosts": [vhost], "vhost_map": {vhost: target},
            "restore_definitions": True, "transformations": MIGRATION, "queue_types": {"*": "quorum", "prio": "classic"},
            "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True}

    # When rbak_restore runs into the second node with the migration's transformations
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")

        # Then it succeeded, the plan carried the changes and the diff, and the transformed file was stored
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        migration = facts["xcom"]["plan[-1].plan"]["body"]["plan"]["migration"]  # the sealed plan's
        assert migration["refused"] == [] and sorted(q for _, q in migration["converted"]) == [
            "audit", "dead-letters", "orders", "payments"]
        assert any(line.startswith("-policy") for line in migration["diff"])
        key = facts["xcom"]["definitions[-1].return_value"]["transformed_key"]
        assert open_storage(location).stat(key) is not None
        report = facts["xcom"]["report[-1].return_value"]
        assert report["planned"] == report["published"] == sum(n for _, n in QUEUES.values())
        # and the target holds quorum queues (the priority queue kept classic, as asked) with every message, in order
        types = {q["name"]: q["type"] for q in second_broker.api("GET", path("queues", target)).json()}
        assert types == {"orders": "quorum", "payments": "quorum", "audit": "quorum", "dead-letters": "quorum",
                         "prio": "classic"}
        for name, queue_type in types.items():
            found = read_queue(c, target, name, queue_type, QUEUES[name][1])
            assert found == [expected_view(i, "classic") for i in stored_order(name)], name
    finally:
        for node, name in ((broker, vhost), (second_broker, target)):
            node.api("DELETE", path("vhosts", name))
