"""``airflow dags test``: stream chains through the DAGs (issue 15, Must show 1-3 on the DAG path).

Three ``rbak_backup`` runs of a growing stream (10,000, +5,000, +5,000), the
third with ``retention: {"keep_last": 1}``; then ``rbak_restore`` of
``latest`` into another vhost restores all 20,000 messages once, in order,
byte-exact. A fourth run with ``streams: full`` depends on nothing.
"""

from __future__ import annotations

import pytest
import requests

from airflow_rbak.repository.chain import dependencies, referenced_keys, segment_owner
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.restore.helpers import body_of, declare, expected_view, publish, read_queue

GROWTH = (10_000, 5_000, 5_000)
TOTAL = sum(GROWTH)
SIZE = 100


@pytest.mark.broker
@pytest.mark.spark
def test_three_dag_backups_of_a_growing_stream_then_keep_last_1_restore_latest_whole(broker, vhost, tmp_path, airflow_home):
    # Given a stream that grows between three runs of the backup DAG, the third with retention keep_last 1
    c = broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(c.host, c.amqp_port, c.management_port,
                                                                                 c.stream_port))
    location = (tmp_path / "b").as_uri()
    declare(c, vhost, {"events": "stream"})
    start = 0
    for n, count in enumerate(GROWTH, start=1):
        publish(c, vhost, "events", start, count, size=SIZE, decimal=False)
        start += count
        conf = {"storage_url": location, "backup_id": f"dag-c{n}", "vhosts": [vhost], "segment_max_bytes": 512 * 1024,
                "verify": "quick", "retention": {"keep_last": 1} if n == 3 else None}
        done = dags_test(env, conf)
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    # Then the third backup lists the whole chain, and retention kept exactly what it needs
    storage = open_storage(location)
    third = ManifestStore(storage).load("dag-c3")
    assert dependencies(third) == ("dag-c1", "dag-c2")
    assert third.queue(vhost, "events").message_count == TOTAL
    finalize = run_facts(env)["xcom"]["finalize[-1].return_value"]
    assert finalize["retention_deleted"] == ["dag-c1", "dag-c2"]
    assert set(finalize["retention_segments_kept_for_chains"]) == {"dag-c1", "dag-c2"}
    assert finalize["retention_kept"] == {"dag-c3": "the backup just written"}
    needed = set(referenced_keys([third]))
    assert [i.key for i in storage.list("") if not i.key.startswith("dag-c3/") and i.key not in needed] == []

    # When rbak_restore restores `latest` into another vhost
    target = f"{vhost}-chain"
    conf = {"storage_url": location, "backup_id": "latest", "vhosts": [vhost], "vhost_map": {vhost: target},
            "restore_definitions": True, "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True}
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")["xcom"]
        assert facts["report[-1].return_value"]["planned"] == facts["report[-1].return_value"]["published"] == TOTAL
        # (the plan XCom is the sealed plan: restore/authority.py)
        assert facts["plan[-1].plan"]["body"]["plan"]["drawn_from"] == ["dag-c1", "dag-c2", "dag-c3"]

        # Then the target stream holds all 20,000 messages once, in order, byte-exact
        restored = read_queue(c, target, "events", "stream", TOTAL)
        expected = [(body_of(i, SIZE),) + expected_view(i, "stream")[1:] for i in range(TOTAL)]
        assert restored == expected
    finally:
        try:
            broker.api("DELETE", f"vhosts/{target}")
        except requests.RequestException:
            pass

    # When a fourth run uses the full mode
    conf = {"storage_url": location, "backup_id": "dag-f4", "vhosts": [vhost], "verify": "quick", "streams": "full"}
    done = dags_test(env, conf)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    # Then it holds the whole stream in its own folder and depends on no other backup
    full = ManifestStore(storage).load("dag-f4")
    assert dependencies(full) == () and full.queue(vhost, "events").message_count == TOTAL
    assert {segment_owner(s.key) for s in full.queue(vhost, "events").segments} == {"dag-f4"}


def test_an_unknown_streams_mode_is_rejected_by_the_param_schema(airflow_home, tmp_path):
    done = dags_test(airflow_env(airflow_home), {"storage_url": (tmp_path / "b").as_uri(), "streams": "differential"})

    assert done.returncode != 0
    assert "'differential' is not one of ['incremental', 'full']" in done.stdout + done.stderr
    assert not (tmp_path / "b").exists()
