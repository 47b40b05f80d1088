"""``airflow dags test rbak_journal``: one archive per journaled vhost, its summary in XCom, an Asset event each."""

from __future__ import annotations

import pika

from airflow_rbak.broker import journal
from tests.broker.conftest import vhost_of_its_own
from tests.dags.airflow_env import airflow_env, dags_test, run_facts
from tests.journal.helpers import records_of


def test_the_journal_dag_archives_each_vhost_and_reports_its_range_and_recovery_point(airflow_home, broker, tmp_path):
    url = (tmp_path / "journal").as_uri()
    with vhost_of_its_own(broker, "jd") as first, vhost_of_its_own(broker, "jd") as second:
        for n, vhost in enumerate((first, second)):
            journal.enable(broker.connection, vhost)
            conn = pika.BlockingConnection(broker.connection.pika_parameters(vhost))
            channel = conn.channel()
            channel.queue_declare("q")
            channel.confirm_delivery()
            for i in range(3 + n):
                channel.basic_publish("", "q", f"{vhost}:{i}".encode())
            conn.close()
        env = airflow_env(airflow_home)

        done = dags_test(env, {"vhosts": [first, second], "storage_url": url, "seconds": 30}, dag_id="rbak_journal")

        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        facts = run_facts(env, "rbak_journal")
        assert facts["tasks"] == {"vhosts[-1]": "success", "archive[0]": "success", "archive[1]": "success"}
        for n, vhost in enumerate((first, second)):
            summary = facts["xcom"][f"archive[{n}].return_value"]
            assert (summary["vhost"], summary["messages"], summary["gaps"]) == (vhost, 3 + n, [])
            assert summary["from"] <= summary["to"] and summary["recovery_point_ms"] >= 0
            assert [bytes(r["body"]) for r in records_of(url, summary["backup_id"])] == [
                f"{vhost}:{i}".encode() for i in range(3 + n)]
        assert sorted(e["extra"]["backup_id"] for e in facts["events"]) == sorted(
            facts["xcom"][f"archive[{n}].return_value"]["backup_id"] for n in range(2))
        assert "recovery point of" in done.stdout + done.stderr
