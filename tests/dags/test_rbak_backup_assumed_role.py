"""``airflow dags test rbak_backup`` on S3 through an ``aws`` connection that holds only a role: every task and the
Spark encode do their S3 work as the assumed role (moto refuses any other identity meanwhile), and no task changes
its process's environment."""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("airflow.providers.amazon")

from airflow_rbak.repository.manifest_store import ManifestStore  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.aws_role import iam_enforced, role_identity, worker_environment  # noqa: E402
from tests.backup.test_run import expected_json, seed_queues  # noqa: E402
from tests.codec.independent_reader import read_segment  # noqa: E402
from tests.dags.airflow_env import airflow_env, dags_test, run_facts  # noqa: E402

QUEUES = {"orders": ("classic", 60), "events": ("stream", 40)}

#: A cluster policy (test-only, found on PYTHONPATH) that records every rbak task's environment when it starts and
#: when it succeeds, in the same process, as digests (no value is written).
_POLICY = r'''
import hashlib, json, os

def _digest(environ):
    return hashlib.sha256(json.dumps(sorted(environ.items())).encode()).hexdigest()

def _record(moment):
    def callback(context):
        ti = context["ti"]
        aws = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in os.environ.items() if k.startswith("AWS_")}
        with open(os.environ["RBAK_TEST_ENV_RECORD"], "a") as out:
            out.write(json.dumps({"task": f"{ti.task_id}[{ti.map_index}]", "moment": moment, "pid": os.getpid(),
                                  "digest": _digest(os.environ), "aws": aws}) + "\n")
    return callback

def task_policy(task):
    task.on_execute_callback = [_record("start")]
    task.on_success_callback = [_record("success")]
'''


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.s3
def test_a_backup_through_a_role_only_connection_runs_as_the_role_and_leaves_every_task_environment_alone(
        broker, vhost, airflow_home, s3_server, s3_storage_url, tmp_path):
    # Given two queues, a worker whose own keys may only assume a role, and a storage connection holding only the role
    seed_queues(broker, vhost, QUEUES)
    identity = role_identity(s3_server)
    policy, record = tmp_path / "policy", tmp_path / "environments.jsonl"
    policy.mkdir()
    (policy / "airflow_local_settings.py").write_text(_POLICY)
    base = airflow_env(airflow_home)
    env = worker_environment(base, identity)
    env.update({"AIRFLOW_CONN_RBAK_ROLE": identity.connection(s3_server), "AIRFLOW__RBAK__STORAGE_CONN_ID": "rbak_role",
                "RBAK_TEST_ENV_RECORD": str(record), "PYTHONPATH": f"{policy}:{base['PYTHONPATH']}"})
    conf = {"storage_url": s3_storage_url, "backup_id": "role-1", "vhosts": [vhost], "segment_work": "spark",
            "verify": "deep"}

    # When the DAG runs while moto checks every request's identity
    with iam_enforced(s3_server):
        done = dags_test(env, conf)

    # Then it succeeds, its segments (encoded on Spark) hold every message byte-exact
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    storage = open_storage(s3_storage_url)
    manifest = ManifestStore(storage).load("role-1")
    assert {q.name: q.message_count for q in manifest.queues} == {n: c for n, (_, c) in QUEUES.items()}
    for queue in manifest.queues:
        records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
        assert [(r["body"], r["properties"], sorted(map(repr, r["headers"]))) for r in records] == [
            expected_json(queue.name, i) for i in range(queue.message_count)], queue.name
    assert run_facts(env)["xcom"]["encode[-1].return_value"]["ran"] == ["spark"]
    # and every task's process environment was at its success what it was at its start, with the AWS variables the
    # worker was started with (the role's credentials never entered it)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    started = {line["task"]: line for line in lines if line["moment"] == "start"}
    succeeded = {line["task"]: line for line in lines if line["moment"] == "success"}
    # (copy starts and skips itself: this backup has no copy_to)
    assert set(succeeded) == set(started) - {"copy[-1]"} >= {"discover[-1]", "export_definitions[-1]", "capture[0]",
                                                             "encode[-1]", "finalize[-1]"}
    launched = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in env.items() if k.startswith("AWS_")}
    for task, line in succeeded.items():
        assert (line["pid"], line["digest"]) == (started[task]["pid"], started[task]["digest"]), task
        assert line["aws"] == launched, task

