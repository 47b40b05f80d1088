"""Must show 1: the DAGs as deployed. Airflow's scheduler (LocalExecutor), dag-processor and api-server as separate
processes; a Spark standalone cluster whose executors' Python has none of the project's dependencies; S3 on the
loopback moto server reached only through an Airflow connection; the provider installed from the checkout's wheel
(first on the stack's ``PYTHONPATH``, the checkout itself not on it). ``rbak_backup`` and then ``rbak_restore`` are
triggered through Airflow's REST API, as a user's automation triggers them, on one stack."""

from __future__ import annotations

import json
import re
import tarfile
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.airflow_stack import AirflowStack, airflow_stack
from tests.dags.airflow_env import capture_results, run_facts
from tests.reliability.secrets import CommandLines, log_files, stored_objects
from tests.restore.helpers import body_of, declare, publish, read_queue, ready_count
from tests.spark_cluster import spark_logs
from tests.spark_jobs.staging import read_queue_independently

QUEUES, COUNT, SIZE = ("orders", "payments", "audit"), 5000, 512
RUN_DEADLINE_S = 900.0  # two Spark submits to a cluster on a shared 2-core machine

# CaptureBarrier holds each capture task, once running, until every capture task of the run is running: that the
# captures overlap then depends on the executor running them side by side, not on how long each one takes.
# ImportOrigin records, in every task's process, where the provider's package, its compiled accelerator and its
# metadata (entry points) were imported from.
LISTENERS = '''
import importlib.metadata, json, os, pathlib, time
from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


class CaptureBarrier:
    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        if task_instance.task_id != "capture":
            return
        folder = pathlib.Path(os.environ["RBAK_TEST_BARRIER"])
        (folder / f"{task_instance.run_id}-{task_instance.map_index}").touch()
        deadline = time.monotonic() + 300
        while len(list(folder.glob(f"{task_instance.run_id}-*"))) < int(os.environ["RBAK_TEST_BARRIER_COUNT"]):
            if time.monotonic() > deadline:
                return  # the executor never ran them side by side: the test's overlap check says so
            time.sleep(0.2)


class ImportOrigin:
    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        import airflow_rbak
        from airflow_rbak.codec import _speedups
        origin = {"package": airflow_rbak.__file__, "accelerator": _speedups.__file__,
                  "metadata": str(importlib.metadata.distribution("airflow-rbak").locate_file(""))}
        name = f"{task_instance.dag_id}.{task_instance.task_id}[{task_instance.map_index}].json"
        (pathlib.Path(os.environ["RBAK_TEST_ORIGINS"]) / name).write_text(json.dumps(origin))


class RbakTestPlugin(AirflowPlugin):
    name = "rbak_test_listeners"
    listeners = [CaptureBarrier(), ImportOrigin()]
'''


@pytest.mark.broker
@pytest.mark.spark
def test_backup_and_restore_run_as_deployed_byte_exact(broker, vhost, spark_cluster, s3_server, s3_bucket, tmp_path,
                                                      rbak_wheel_site):
    # Given three queues, and a stack that runs the provider from its wheel and whose only S3 credentials are an
    # Airflow connection's
    declare(broker.connection, vhost, {q: "classic" for q in QUEUES})
    for queue in QUEUES:
        publish(broker.connection, vhost, queue, 0, COUNT, size=SIZE)
    secret = f"rbak-secret-{uuid.uuid4().hex}"
    s3 = json.dumps({"conn_type": "aws", "login": "rbak-key", "password": secret,
                     "extra": {"endpoint_url": s3_server, "region_name": "us-east-1"}})
    plugins, barrier, origins = tmp_path / "plugins", tmp_path / "barrier", tmp_path / "origins"
    for folder in (plugins, barrier, origins):
        folder.mkdir()
    (plugins / "test_listeners.py").write_text(LISTENERS)
    (tmp_path / "airflow").mkdir()
    stack = airflow_stack(tmp_path / "airflow", AIRFLOW__CORE__PARALLELISM="8", AIRFLOW_CONN_RBAK_S3=s3, AIRFLOW__RBAK__STORAGE_CONN_ID="rbak_s3",
                         AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins), RBAK_TEST_BARRIER=str(barrier),
                         RBAK_TEST_BARRIER_COUNT=str(len(QUEUES)), RBAK_TEST_ORIGINS=str(origins),
                         PYTHONPATH=str(rbak_wheel_site),
                         AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": spark_cluster}),
                         AIRFLOW__RBAK__PROGRESS_INTERVAL="1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        stack.env.pop(name, None)
    url = f"s3://{s3_bucket}/backups?region=us-east-1&path_style=true"  # the endpoint comes from the connection
    target = f"{vhost}-r"
    stack.start()
    state = None
    watch = CommandLines().__enter__()
    try:
        stack.wait_for_dag("rbak_backup")
        stack.wait_for_dag("rbak_restore")

        # When the backup DAG is triggered
        backup_run = stack.trigger("rbak_backup", {"storage_url": url, "backup_id": "stack-1", "vhosts": [vhost],
                                                   "verify": "deep", "segment_work": "spark"})
        state = stack.wait_for_run("rbak_backup", backup_run, RUN_DEADLINE_S)

        # Then it succeeds, its capture tasks overlapped in time, the segments on S3 hold every message byte-exact
        # (read by the independent reader), and the queues are as they were
        assert state == "success", _logs(stack)
        xcom = run_facts(stack.env)["xcom"]
        captured = {queue: r["messages"] for queue, r in capture_results(xcom).items()}
        assert captured == {q: COUNT for q in QUEUES}, captured
        times = stack.task_times("rbak_backup", backup_run)
        captures = [v for k, v in times.items() if k.startswith("capture[")]
        assert max(start for start, _ in captures) < min(end for _, end in captures), times
        # (Must show 3 on real task log files: each capture's log shows its progress, and no pika lines)
        logs = sorted((stack.home / "logs" / "dag_id=rbak_backup").rglob("task_id=capture/*/attempt=1.log"))
        assert len(logs) == len(captures)
        for log in logs:
            text = log.read_text()
            assert re.search(rf"{re.escape(vhost)}/\w+: 5,000/5,000 messages, [\d.]+ MB, [\d,]+ msg/s", text), text[-2000:]
            assert "pika" not in text
        storage = open_storage(f"{url}&endpoint={s3_server}")
        assert ManifestStore(storage).load("stack-1").total_messages == COUNT * len(QUEUES)
        for queue in QUEUES:
            _, records = read_queue_independently(storage, "stack-1", vhost, queue)
            assert [bytes(r["body"] or b"") for r in records] == [body_of(i, SIZE) for i in range(COUNT)], queue
            assert ready_count(broker.connection, vhost, queue) == COUNT

        # When the restore DAG is triggered into another vhost
        restore_run = stack.trigger("rbak_restore", {"storage_url": url, "backup_id": "stack-1", "vhosts": [vhost],
                                                     "vhost_map": {vhost: target}, "restore_definitions": True,
                                                     "skip_approval": True})
        state = stack.wait_for_run("rbak_restore", restore_run, RUN_DEADLINE_S)

        # Then every queue there holds every message, byte-exact, in order
        assert state == "success", _logs(stack)
        for queue in QUEUES:
            restored = read_queue(broker.connection, target, queue, "classic", COUNT)
            assert [m[0] for m in restored] == [body_of(i, SIZE) for i in range(COUNT)], queue

        # And (Must show 4) the S3 secret is in no task log or daemon output, XCom, report, stored object, Spark
        # cluster log, or command line of any process seen during both runs
        watch.__exit__(None, None, None)
        places = {**log_files(stack.home), **stored_objects(storage), **{str(p): p.read_bytes() for p in spark_logs(spark_cluster)},
                  "xcom": json.dumps([run_facts(stack.env, d) for d in ("rbak_backup", "rbak_restore")]).encode(),
                  **{f"cmdline {i}": line for i, line in enumerate(watch.seen)}}
        assert any(b"spark-submit" in v or b"SparkSubmit" in v for k, v in places.items() if k.startswith("cmdline"))
        assert any("/reports/" in k for k in places) and any("task_id=encode" in k for k in places)
        assert [k for k, v in places.items() if secret.encode() in v] == []

        # And every task of both runs imported the provider from its wheel (package, compiled accelerator, metadata
        # with the entry points), the Spark jobs were submitted from it, and the archive of the executors'
        # environment carries its accelerator
        ran = {f"{dag_id}.{task}" for dag_id, run_id in (("rbak_backup", backup_run), ("rbak_restore", restore_run))
               for task, task_state in stack.task_states(dag_id, run_id).items()
               if task_state == "success" or task == "copy[-1]"}  # (copy runs, and skips itself without copy_to)
        accelerator = next((rbak_wheel_site / "airflow_rbak" / "codec").glob("_speedups*.so"))
        wheel_origin = {"package": str(rbak_wheel_site / "airflow_rbak" / "__init__.py"), "accelerator": str(accelerator),
                        "metadata": str(rbak_wheel_site)}
        assert {p.stem: json.loads(p.read_text()) for p in origins.glob("*.json")} == dict.fromkeys(ran, wheel_origin)
        encode_job = str(rbak_wheel_site / "airflow_rbak" / "segments" / "jobs" / "backup_segments.py").encode()
        assert any(b"SparkSubmit" in line and encode_job in line for line in watch.seen)
        assert _archived(stack.home / "spark-package", accelerator.name) == accelerator.read_bytes()
    finally:
        watch.__exit__(None, None, None)
        stack.stop()
        if state == "success":  # the restore ran and made the target vhost
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")


def _logs(stack: AirflowStack) -> str:
    """The tail of every task log and daemon output, to say why a run failed."""
    files = sorted(p for p in stack.home.rglob("*") if p.is_file() and p.suffix in (".log", ".out"))
    return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-1500:]}" for p in files)[-12000:]


def _archived(cache: Path, name: str) -> bytes:
    """The bytes of the package's file ``codec/<name>`` in the executors' environment archive built under ``cache``."""
    (archive,) = cache.glob("rbak-executor-env-*.tar.gz")
    with tarfile.open(archive) as env:
        (member,) = [m for m in env.getmembers() if m.name.endswith(f"/site-packages/airflow_rbak/codec/{name}")]
        handle = env.extractfile(member)
        assert handle is not None
        return handle.read()
