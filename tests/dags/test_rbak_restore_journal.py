"""``airflow dags test rbak_restore`` with ``journal_until``: the snapshot, then the journal's records before T.

The snapshot is a real backup of a journaled vhost; the journal's archives are the real archiver's. The run's report must count what came from each and the possible
duplicates, and the target must hold the snapshot's messages then the journal's records before T, in order.
"""

from __future__ import annotations

import pytest

from airflow_rbak.broker import journal
from airflow_rbak.broker.pika_connection import blocking_connection
from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.journal.helpers import archive
from tests.restore.helpers import backup, body_of, props_of, publish, read_queue
from tests.restore.journal_archives import Published
from tests.restore.test_journal_recovery import publish_all


@pytest.mark.broker
def test_a_recovery_to_a_moment_through_the_dag(broker, vhost, tmp_path, airflow_home):
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.queue_declare("orders", durable=True)
        ch.queue_declare("audit", durable=True)
        ch.exchange_declare("events", "topic", durable=True)
        ch.queue_bind("orders", "events", "order.#")
        ch.queue_bind("audit", "events", "order.#")
    journal.enable(broker.connection, vhost)
    publish(broker.connection, vhost, "orders", 0, 3)
    location = (tmp_path / "b").as_uri()
    archive(broker.connection, vhost, location)
    backup(broker.connection, location, "snap-dag-1", vhost)
    records = [Published(0, "events", "order.new", body_of(100 + n, 80), props_of(100 + n)) for n in range(1, 7)]
    publish_all(broker, vhost, records[:4])
    until = archive(broker.connection, vhost, location).to_ms
    publish_all(broker, vhost, records[4:])
    archive(broker.connection, vhost, location)
    target = f"{vhost}-pit"
    conn_uri = rabbitmq_conn(broker.connection.host, broker.connection.amqp_port, broker.connection.management_port,
                             broker.connection.stream_port)
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=conn_uri)
    conf = {"storage_url": location, "vhosts": [vhost], "vhost_map": {vhost: target}, "restore_definitions": True,
            "journal_until": until, "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True}
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        report = facts["xcom"]["report[-1].return_value"]
        facts_of = report["journal_recovery"]
        assert (facts_of["snapshot"], facts_of["from_snapshot"], facts_of["from_journal"]) == ("snap-dag-1", 3, 4)
        assert facts_of["gaps"] == [] and facts_of["redelivered_by_journal"] == 0
        assert report["published"] == 3 + 4
        assert "recovery to" in output and "4 from the journal" in output
        orders = read_queue(broker.connection, target, "orders", "classic", 7)
        assert [m[0] for m in orders] == [body_of(i, 300) for i in range(3)] + [r.body for r in records[:4]]
        audit = read_queue(broker.connection, target, "audit", "classic", 4)
        assert [m[0] for m in audit] == [r.body for r in records[:4]]
    finally:
        try:
            broker.api("DELETE", f"vhosts/{target}")
        except Exception:  # noqa: BLE001 - it may not exist
            pass
