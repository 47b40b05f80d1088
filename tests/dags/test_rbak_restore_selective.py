"""Must show 4: ``airflow dags test rbak_restore`` restores 37 chosen messages out of 20,000, and nothing else.

The backup is written from records (``tests/repository/backup_writer.py``: 20,000 small messages of one queue in
about a hundred segments), so the test pays for one DAG run, not for a capture. The 37 positions are spread over the
whole queue; the target must hold exactly those messages, in their stored order, byte for byte, and the plan, the
approval request and the report must name the selection and its count.
"""

from __future__ import annotations

import pytest
import requests

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.codec.properties import PIKA_NAMES
from airflow_rbak.restore import RestorePlan, RestoreRequest
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.storage import open_storage
from tests.dags.airflow_env import airflow_env, dags_test, rabbitmq_conn, run_facts
from tests.repository.backup_writer import BackupWriter
from tests.restore.helpers import read_queue

TOTAL = 20_000
#: 37 distinct positions spread over the queue (541 is prime to 20,000), chosen as the UI would send them: unsorted.
CHOSEN = [(7 + i * 541) % TOTAL for i in range(37)]
SELECTION = "filter messages with routing key like 'pay.*'; 37 chosen positions in 1 queues"


def _record(vhost: str, i: int) -> BackupRecord:
    return BackupRecord(
        body=b"pay-%05d:" % i + bytes((i * 13 + k) % 256 for k in range(24)),
        properties=BackupProperties(content_type="application/octet-stream", delivery_mode=2, message_id=f"pay-{i}",
                                    correlation_id=f"order-{i // 3}"),
        headers=(("x-n", HeaderValue.long(i)), ("tenant", HeaderValue.long_string(f"t{i % 5}"))),
        exchange="payments.x", routing_key=f"pay.{i % 4}", delivery_tag=i + 1, backed_up_at=1_764_000_000_000 + i,
        source_queue="payments", source_vhost=vhost)


def _untagged(value):
    """An XCom value as it was pushed (the stored form keeps a tuple as {"__classname__": …, "__data__": […]})."""
    if isinstance(value, dict):
        return _untagged(value["__data__"]) if "__classname__" in value else {k: _untagged(v) for k, v in value.items()}
    return [_untagged(v) for v in value] if isinstance(value, list) else value


@pytest.mark.broker
def test_a_selective_restore_through_the_dag_publishes_exactly_the_chosen_messages(broker, vhost, tmp_path,
                                                                                   airflow_home):
    # Given a backup of 20,000 messages of `payments`
    location = (tmp_path / "b").as_uri()
    writer = BackupWriter(open_storage(location), "sel-dag-1", segment_max_bytes=64 * 1024, rabbitmq_version="3.10.8")
    sink = writer.queue(vhost, "payments")
    sink.add_all(_record(vhost, i) for i in range(TOTAL))
    sink.close()
    writer.finish()
    c = broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        c.host, c.amqp_port, c.management_port, c.stream_port))
    conf = {"storage_url": location, "backup_id": "sel-dag-1", "vhosts": [vhost],
            "queue_map": {"payments": "payments-restored"}, "positions": {f"{vhost}/payments": CHOSEN},
            "select": {"routing_key": "pay.*"},  # which every message meets: the filter travels too
            "checkpoint_state": str(tmp_path / "restore.db"), "skip_approval": True}

    # When rbak_restore runs with the 37 positions chosen
    try:
        done = dags_test(env, conf, dag_id="rbak_restore")
        output = done.stdout + done.stderr

        # Then the run succeeded and the report names the selection and its count
        assert done.returncode == 0, output[-6000:]
        facts = run_facts(env, dag_id="rbak_restore")
        assert facts["state"] == "success"
        report = facts["xcom"]["report[-1].return_value"]
        assert (report["planned"], report["published"], report["unroutable"]) == (37, 37, 0)
        assert report["selection"] == SELECTION
        assert report["selected"] == {f"{vhost}/payments": 37}
        # and the plan named it too, in its log and in what it handed on; the approval request names it
        assert f"selection: {SELECTION}: 37 records selected in 1 queues" in output
        assert "no approval asked (skip_approval is set) for: Restore backup sel-dag-1: 37 selected records" in output
        plan = RestorePlan.from_json(_untagged(facts["xcom"]["plan[-1].plan"]["body"]["plan"]))  # the sealed plan's
        (queue,) = plan.queues
        assert queue.records_in_window == 37 and queue.records_total == TOTAL and len(queue.segments) <= 37
        body = approval_body(plan, RestoreRequest(**{k: v for k, v in conf.items() if k != "skip_approval"}),
                             "rabbitmq_default")
        assert f"only the selection `{SELECTION}`" in body
        assert f"- `{vhost}/payments`: 37 selected (of 37 chosen positions)" in body

        # and the target holds exactly those 37 messages, in their stored order, byte for byte
        got = read_queue(broker.connection, vhost, "payments-restored", "classic", 37)
        expected = [_record(vhost, i) for i in sorted(CHOSEN)]
        assert [m[0] for m in got] == [r.body for r in expected]
        assert [m[1][PIKA_NAMES.index("message_id")] for m in got] == [r.properties.message_id for r in expected]
        assert [[(h[0], h[1].value) for h in m[2]] for m in got] == [
            [("x-n", i), ("tenant", f"t{i % 5}")] for i in sorted(CHOSEN)]
    finally:
        try:
            broker.api("DELETE", f"queues/{vhost}/payments-restored")
        except requests.RequestException:
            pass
