"""A broker with more queues than Airflow maps over one task: the backup DAG captures them in groups."""

from __future__ import annotations

import pika
import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.dags.airflow_env import airflow_env, capture_results, dags_test, run_facts

QUEUES = 1_100


@pytest.mark.broker
@pytest.mark.spark
def test_a_backup_of_1100_queues_completes_in_groups_under_max_map_length(broker, vhost, tmp_path, airflow_home):
    # Given 1,100 classic queues of one tiny message each (every tenth empty)
    names = [f"q-{i:04d}" for i in range(QUEUES)]
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i, name in enumerate(names):
            channel.queue_declare(name, durable=True)
            if i % 10:
                channel.basic_publish("", name, f"m-{i}".encode())
    location = (tmp_path / "b").as_uri()
    # and an Airflow that maps at most 6 items per task (1,024 by default: the same limit, cheaper to run)
    env = airflow_env(airflow_home, AIRFLOW__CORE__MAX_MAP_LENGTH="6")

    # When the backup DAG runs, asking for as many capture tasks as it may
    done = dags_test(env, {"storage_url": location, "backup_id": "many-1", "vhosts": [vhost], "verify": "quick",
                           "max_capture_tasks": 1024})

    # Then it completes with 6 capture tasks, which captured every queue once
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    facts = run_facts(env)
    assert facts["state"] == "success"
    assert sorted(t for t in facts["tasks"] if t.startswith("capture[")) == [f"capture[{i}]" for i in range(6)]
    captures = capture_results(facts["xcom"])
    assert sorted(captures) == names
    assert {q: r["messages"] for q, r in captures.items()} == {n: int(i % 10 != 0) for i, n in enumerate(names)}
    # and the manifest lists all 1,100 queues with their messages
    manifest = ManifestStore(open_storage(location)).load("many-1")
    assert manifest.completed_at is not None
    assert sorted(q.name for q in manifest.queues) == names
    assert manifest.total_messages == QUEUES - QUEUES // 10
