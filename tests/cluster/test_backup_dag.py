"""``airflow dags test rbak_backup`` against the three-node cluster through a TCP proxy in front of it (one address,
as a load balancer gives): a classic queue living on node 2, a quorum queue led by node 3 and a stream led by node 1,
each backed up byte-exact, the source queues keeping every message."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.backup.test_run import expected_json, seed_queues, settled_depths
from tests.broker.behaviour import Behaviour
from tests.cluster.test_backup_faults import leader_of
from tests.codec.independent_reader import read_segment
from tests.dags.airflow_env import airflow_env, dags_test, run_facts
from tests.dags.conftest import airflow_home  # noqa: F401 - fixture

pytestmark = [pytest.mark.broker, pytest.mark.spark]
#: Each queue declared and seeded through the node that is to hold it (a classic queue's home, a quorum queue's and
#: a stream's leader: the declaring node).
SPREAD = {"orders": ("classic", 120, 1), "payments": ("quorum", 90, 2), "events": ("stream", 60, 0)}


def test_the_backup_dag_through_a_proxy_backs_up_queues_led_by_each_node_byte_exact(
        cluster, cluster_proxy, cluster_vhost, airflow_home, tmp_path):  # noqa: F811
    behaviour = Behaviour(cluster.version)
    vhost = cluster_vhost
    # Given a classic queue on node 2, a quorum queue led by node 3 and a stream led by node 1
    for name, (queue_type, count, node) in SPREAD.items():
        seed_queues(cluster.nodes[node], vhost, {name: (queue_type, count)})
    seeded = {name: count for name, (_, count, _) in SPREAD.items()}
    assert settled_depths(cluster.nodes[0], vhost, seeded) == seeded
    for name in ("payments", "events"):
        assert leader_of(cluster, vhost, name) == cluster.nodes[SPREAD[name][2]].name
    home = cluster.nodes[0].api("GET", f"queues/{quote(vhost, safe='')}/orders").json()["node"]
    assert home == cluster.nodes[1].name
    # And an Airflow connection to the proxy's one address (AMQP, management and stream ports)
    proxy = cluster_proxy.connection
    conn = json.dumps({"conn_type": "rabbitmq", "host": proxy.host, "port": proxy.amqp_port, "login": "guest",
                       "password": "guest", "extra": {"management_port": proxy.management_port,
                                                      "stream_port": proxy.stream_port, "timeout": 5}})
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=conn)
    location = (tmp_path / "backups").as_uri()
    conf = {"storage_url": location, "backup_id": "cluster-dag-1", "vhosts": [vhost], "segment_max_bytes": 65536,
            "verify": "deep", "allow_delivery_count_increase": behaviour.backup_leaves_out_by_default("quorum")}

    # When the DAG runs
    done = dags_test(env, conf)

    # Then it succeeds, the backup validates deeply and holds every message of each queue byte-exact, in order
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert run_facts(env)["state"] == "success"
    storage = open_storage(location)
    assert validate_backup(storage, "cluster-dag-1", deep=True).valid
    manifest = ManifestStore(storage).load("cluster-dag-1")
    assert {q.name: (q.queue_type, q.message_count) for q in manifest.queues} == {
        name: (queue_type, count) for name, (queue_type, count, _) in SPREAD.items()}
    for queue in manifest.queues:
        records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
        found = [(r["body"], r["properties"], sorted(map(repr, r["headers"]))) for r in records]
        order = behaviour.delivery_order(queue.queue_type, [i % 10 for i in range(queue.message_count)])
        assert found == [expected_json(queue.name, i, behaviour) for i in order], queue.name
    # And the source queues keep every message
    assert settled_depths(cluster.nodes[0], vhost, seeded) == seeded
