"""``airflow dags test rbak_drill`` on a real broker: a passing drill, a drill of a damaged backup that fails and
alerts, and in both the scratch vhost gone afterwards (the broker's vhosts the same before and after).

That the DAG is paused when first seen and scheduled weekly: tests/dags/test_dagbag.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_rbak.operators.metrics import location_tag
from tests.dags.airflow_env import airflow_env, dags_test, run_facts
from tests.dags.conftest import documented
from tests.restore.helpers import backup, body_of, declare, publish, read_queue

QUEUES = {"orders": ("classic", 120), "payments": ("quorum", 60)}


def vhosts(broker) -> set[str]:
    return {v["name"] for v in broker.api("GET", "vhosts").json()}


@pytest.fixture
def location(broker, vhost, tmp_path) -> str:
    """A file location holding one backup of a classic and a quorum queue, every property and header type set."""
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    url = (tmp_path / "b").as_uri()
    backup(broker.connection, url, "drill-dag-1", vhost)
    return url


def drill(airflow_home, tmp_path, statsd, conf):
    """The drill DAG run with a recording failure notifier; its output, facts and notifier calls."""
    calls = tmp_path / "notifier.jsonl"
    env = airflow_env(airflow_home, AIRFLOW__RBAK__FAILURE_NOTIFIER="tests.dags.recording_notifier:RecordingNotifier",
                      RBAK_TEST_NOTIFIER_FILE=str(calls), **statsd.env())
    done = dags_test(env, {"rabbitmq_conn_id": "rabbitmq_default", **conf}, dag_id="rbak_drill")
    notified = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return done, run_facts(env, "rbak_drill"), notified


@pytest.mark.broker
def test_a_drill_restores_the_latest_backup_into_a_scratch_vhost_finds_it_equal_and_deletes_it(
        broker, vhost, location, airflow_home, tmp_path, statsd):
    before = vhosts(broker)

    # When the drill DAG drills the location's latest backup
    done, facts, notified = drill(airflow_home, tmp_path, statsd, {"storage_url": location, "vhosts": [vhost]})

    # Then it passed: every message of both queues restored and equal to the backup's record, in order
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert facts["state"] == "success" and facts["tasks"] == {"drill[-1]": "success", "cleanup[-1]": "success"}
    report = facts["xcom"]["drill[-1].return_value"]
    assert report["passed"] and report["backup_id"] == "drill-dag-1" and report["compared"] == report["published"] == 180
    assert [(q["queue"], q["expected"], q["delivered"], q["matched"]) for q in report["queues"]] == [
        ("orders", 120, 120, 120), ("payments", 60, 60, 60)]
    (scratch,) = report["scratch_vhosts"]
    assert scratch.startswith("rbak-drill-") and report["deleted_vhosts"] == [scratch]
    assert f"restore drill of drill-dag-1 from {location} passed: 2 queues, 180 messages" in done.stdout + done.stderr
    # and the scratch vhost is gone: the broker's vhosts are those it had before; the teardown found nothing left
    assert vhosts(broker) == before and facts["xcom"]["cleanup[-1].return_value"] == []
    # and no alert; the passed gauge went to StatsD
    assert notified == []
    metrics = documented(statsd.received())
    assert metrics[("rbak.drill.passed", location_tag(location))] == (1, "g")
    assert metrics[("rbak.drill.messages", location_tag(location))] == (180, "c")
    # and the source queues were only read
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 120)] == [body_of(i, 300) for i in range(120)]


@pytest.mark.broker
def test_a_drill_of_a_damaged_backup_fails_alerts_and_leaves_no_scratch_vhost(
        broker, vhost, location, airflow_home, tmp_path, statsd):
    # Given one byte flipped in the middle of a segment of the backup
    (segment,) = Path(location.removeprefix("file://")).glob("drill-dag-1/queues/*/payments/segment-*")
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x01
    segment.write_bytes(bytes(data))
    before = vhosts(broker)

    # When the drill DAG drills it
    done, facts, notified = drill(airflow_home, tmp_path, statsd, {"storage_url": location, "vhosts": [vhost]})

    # Then the drill failed, naming the damaged segment, and the run failed although its teardown succeeded
    assert done.returncode != 0
    assert facts["state"] == "failed" and facts["tasks"] == {"drill[-1]": "failed", "cleanup[-1]": "success"}
    report = facts["xcom"]["drill[-1].report"]
    assert not report["passed"] and report["error"] is None
    (damaged,) = report["damaged_segments"]
    assert damaged["key"].endswith(f"/payments/{segment.name}") and damaged["record_count"] == 60
    assert "SHA-256" in " ".join(damaged["reasons"])
    assert f"damaged segment {damaged['key']}" in done.stdout + done.stderr
    # and the rest of the backup was drilled all the same: the classic queue restored equal, message for message
    assert [(q["queue"], q["expected"], q["matched"], q["damaged_records"], q["passed"]) for q in report["queues"]] == [
        ("orders", 120, 120, 0, True), ("payments", 0, 0, 60, False)]
    # and the failure notifier was called for the drill task, as for a stale location
    (call,) = notified
    assert (call["dag_id"], call["task_id"]) == ("rbak_drill", "drill") and segment.name in call["exception"]
    # and the scratch vhost it had made is gone
    assert report["deleted_vhosts"] == report["scratch_vhosts"] and len(report["scratch_vhosts"]) == 1
    assert vhosts(broker) == before
    # and the gauge says the drill failed
    metrics = documented(statsd.received())
    assert metrics[("rbak.drill.passed", location_tag(location))] == (0, "g")

