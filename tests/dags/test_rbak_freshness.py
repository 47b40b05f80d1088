"""``airflow dags test rbak_freshness``: one check per location; a stale one fails and calls the notifier."""

from __future__ import annotations

import json
import time

import pytest

from airflow_rbak.codec import BackupManifest
from airflow_rbak.freshness import HOUR_MS
from airflow_rbak.operators.metrics import location_tag
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.aws_role import AWS_KEY_VARIABLES, iam_enforced, keys_only_connection
from tests.dags.airflow_env import airflow_env, dags_test, run_facts
from tests.dags.conftest import documented


def location_finished(tmp_path, name: str, hours_ago: float) -> str:
    """A file location whose only backup completed ``hours_ago``."""
    url = (tmp_path / name).as_uri()
    finished = int(time.time() * 1000 - hours_ago * HOUR_MS)
    ManifestStore(open_storage(url)).save(BackupManifest(f"{name}-1", finished - 60_000, "0", completed_at=finished))
    return url


def test_the_freshness_dag_passes_a_recent_location_and_fails_a_stale_one_calling_the_notifier(airflow_home, tmp_path,
                                                                                              statsd):
    # Given one location backed up an hour ago and one 30 hours ago, and a failure notifier
    fresh, stale = location_finished(tmp_path, "fresh", 1), location_finished(tmp_path, "stale", 30)
    calls = tmp_path / "notifier.jsonl"
    env = airflow_env(airflow_home, AIRFLOW__RBAK__FAILURE_NOTIFIER="tests.dags.recording_notifier:RecordingNotifier",
                      RBAK_TEST_NOTIFIER_FILE=str(calls), **statsd.env())

    # When the freshness DAG checks both with its default threshold (26 hours)
    done = dags_test(env, {"storage_urls": [fresh, stale]}, dag_id="rbak_freshness")

    # Then the run fails: the recent location's check passed, the stale one's failed naming the backup and its age
    assert done.returncode != 0
    facts = run_facts(env, "rbak_freshness")
    assert facts["tasks"] == {"locations[-1]": "success", "check[0]": "success", "check[1]": "failed"}
    assert facts["xcom"]["check[0].return_value"]["backup_id"] == "fresh-1"
    assert facts["xcom"]["check[0].return_value"]["fresh"] is True
    assert "newest complete backup stale-1 finished 30.0 h ago (allowed: 26 h)" in done.stdout + done.stderr
    # and the notifier was called for the stale location's check
    (call,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert (call["dag_id"], call["task_id"]) == ("rbak_freshness", "check") and "stale-1" in call["exception"]
    # and each location's age went to StatsD, tagged with the location, the stale one's too
    metrics = documented(statsd.received())
    ages = {where: value / 3600 for (name, where), (value, _) in metrics.items() if name == "rbak.freshness.age"}
    assert sorted(ages) == sorted([location_tag(fresh), location_tag(stale)])
    assert 1 <= ages[location_tag(fresh)] < 2 and 30 <= ages[location_tag(stale)] < 31
    assert metrics[("rbak.freshness.fresh", location_tag(fresh))] == (1, "g")
    assert metrics[("rbak.freshness.fresh", location_tag(stale))] == (0, "g")


@pytest.mark.s3
def test_the_freshness_dag_reads_s3_with_keys_that_only_its_storage_connection_holds(airflow_home, s3_server,
                                                                                    s3_storage_url, statsd):
    # Given an S3 location backed up 3 hours ago, an aws connection holding the only keys moto accepts (as
    # [rbak] storage_conn_id), and a task environment without any AWS key
    finished = int(time.time() * 1000 - 3 * HOUR_MS)
    ManifestStore(open_storage(s3_storage_url)).save(BackupManifest("s3-1", finished - 60_000, "0", completed_at=finished))
    env = {k: v for k, v in airflow_env(airflow_home, **statsd.env()).items() if k not in AWS_KEY_VARIABLES}
    env.update({"AIRFLOW_CONN_RBAK_S3": keys_only_connection(s3_server), "AIRFLOW__RBAK__STORAGE_CONN_ID": "rbak_s3"})

    # When the freshness DAG checks it while moto checks every request's signature and policy
    with iam_enforced(s3_server):
        done = dags_test(env, {"storage_urls": [s3_storage_url]}, dag_id="rbak_freshness")

    # Then the check passed, found the backup 3 hours old, and sent the location's age and freshness
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    facts = run_facts(env, "rbak_freshness")
    assert facts["tasks"] == {"locations[-1]": "success", "check[0]": "success"}
    found = facts["xcom"]["check[0].return_value"]
    assert (found["backup_id"], found["fresh"]) == ("s3-1", True) and 3 <= found["age_hours"] < 4
    metrics = documented(statsd.received())
    age = metrics[("rbak.freshness.age", location_tag(s3_storage_url))]
    assert age[1] == "g" and 3 <= age[0] / 3600 < 4
    assert metrics[("rbak.freshness.fresh", location_tag(s3_storage_url))] == (1, "g")
