"""Must show 3: the DAGs on Airflow's CeleryExecutor. RabbitMQ is Celery's broker (a vhost of its own, which the
backup does not select), a private PostgreSQL the metadata database; the scheduler, dag-processor and api-server run
as in the LocalExecutor test, beside two Celery workers, each a process with its own ``AIRFLOW_HOME``, scratch
folder (``TMPDIR``, Spark package cache) and host name. Storage is the loopback S3 both workers reach.

What happens mid-capture is decided by the test, not by timing: a test plugin holds each capture task's first try
right after its first checkpoint is stored, until the test releases it or kills its worker. Both captures held at
once, with one task slot per worker, puts them on the two workers; one worker is then SIGKILLed with its capture
holding messages, and Airflow (the task's heartbeat timing out) retries the task on the other worker, which resumes
from the checkpoint. The restore's two publish tasks wait for each other the same way, so they too run on both."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
import requests

from airflow_rbak.capture.checkpoints import read_progress
from airflow_rbak.codec.layout import checkpoint_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.airflow_stack import AirflowStack, airflow_stack, poll
from tests.dags.airflow_env import REPO, VENV_BIN, capture_results, run_facts
from tests.postgres import private_postgres
from tests.restore.helpers import body_of, declare, publish, read_queue, ready_count
from tests.spark_jobs.staging import read_queue_independently

QUEUES, COUNT, SIZE = ("a", "b"), 6000, 256  # a capture stores its first chunk (5,000 records) with 1,000 to go
WORKERS = ("worker-1", "worker-2")
RUN_DEADLINE_S = 600.0

# In every process of the stack (PYTHONPATH): the workers' host names, the quick retry, and the holds.
HOSTNAME = '''
import os, socket


def hostname():
    """The task instance's host name: the worker's own (both run on this machine)."""
    return os.environ.get("RBAK_TEST_WORKER") or socket.getfqdn()
'''
# A deployment's retry policy, through Airflow's cluster policy: retry at once (the DAGs wait a minute).
LOCAL_SETTINGS = '''
import datetime


def task_policy(task):
    task.retry_delay = datetime.timedelta(seconds=1)
    task.retry_exponential_backoff = 0
'''
LISTENERS = '''
import json, os, pathlib, time
from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin
from rbak_test_worker import hostname

FOLDER = pathlib.Path(os.environ["RBAK_TEST_HOLDS"])
DEADLINE_S = 600


def wait_for(done):
    deadline = time.monotonic() + DEADLINE_S
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


class HoldCaptures:
    """A capture's first try, once its first chunk and checkpoint are stored: say so, and wait for the test."""

    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        if task_instance.task_id != "capture" or task_instance.try_number != 1:
            return
        from airflow_rbak.capture.checkpoints import CaptureCheckpoints
        index, save = task_instance.map_index, CaptureCheckpoints.save

        def held_save(store, progress, *, sync=True):
            save(store, progress, sync=sync)
            if sync and progress.last_chunk >= 1 and not (FOLDER / f"held-{index}").exists():
                facts = {"worker": hostname(), "pid": os.getpid(), "queue": progress.queue,
                         "staged_records": progress.staged_records}
                (FOLDER / f".held-{index}").write_text(json.dumps(facts))
                os.replace(FOLDER / f".held-{index}", FOLDER / f"held-{index}")
                wait_for(lambda: (FOLDER / f"release-{index}").exists())

        CaptureCheckpoints.save = held_save


class PublishTogether:
    """Each publish task, once running, waits until every publish task of the restore runs."""

    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        if task_instance.task_id != "publish":
            return
        (FOLDER / f"publish-{task_instance.map_index}").touch()
        wait_for(lambda: len(list(FOLDER.glob("publish-*"))) >= int(os.environ["RBAK_TEST_PUBLISHERS"]))


class RbakCeleryTestPlugin(AirflowPlugin):
    name = "rbak_celery_test"
    listeners = [HoldCaptures(), PublishTogether()]
'''


@pytest.fixture
def celery_vhost(broker):
    """Celery's own vhost on the suite's broker: its queues stay out of the backups' vhost."""
    name = f"celery-{uuid.uuid4().hex[:8]}"
    broker.api("PUT", f"vhosts/{name}")
    broker.api("PUT", f"permissions/{name}/{broker.connection.username}", json={"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    broker.api("DELETE", f"vhosts/{name}")


def start_worker(stack: AirflowStack, name: str) -> None:
    """``airflow celery worker`` with one task slot, its own home, scratch folder and host name; its output goes to
    ``<stack home>/<name>.log`` (appended on a restart)."""
    home = stack.home.parent / name
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = {**stack.env, "AIRFLOW_HOME": str(home), "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
           "TMPDIR": str(home / "tmp"), "RBAK_SPARK_PACKAGE_DIR": str(home / "spark-package"), "RBAK_TEST_WORKER": name}
    command = [str(VENV_BIN / "airflow"), "celery", "worker", "--celery-hostname", f"{name}@%h", "--concurrency", "1",
               "--skip-serve-logs", "--without-gossip", "--without-mingle"]
    with open(stack.home / f"{name}.log", "ab") as out:
        stack.processes[name] = subprocess.Popen(command, env=env, cwd=stack.home.parent, stdout=out, stderr=out,
                                             start_new_session=True)


def kill_worker(stack: AirflowStack, name: str) -> None:
    """SIGKILL the worker and every process under it (its pool, the task supervisor, the task), as a lost machine."""
    worker = psutil.Process(stack.processes.pop(name).pid)
    tree = [worker, *worker.children(recursive=True)]
    for process in tree:
        process.kill()
    psutil.wait_procs(tree, timeout=60)


def task_instance(stack: AirflowStack, dag_id: str, run_id: str, task: str, index: int, tries: bool = False) -> dict:
    path = f"{stack.run_path(dag_id, run_id)}/taskInstances/{task}/{index}{'/tries' if tries else ''}"
    return stack.api("GET", path).json()


@pytest.mark.broker
def test_celery_workers_share_a_backup_survive_a_killed_worker_and_restore_byte_exact(
        broker, vhost, celery_vhost, s3_server, s3_bucket, tmp_path):
    # Given two queues, a Celery stack on PostgreSQL, and two workers
    declare(broker.connection, vhost, dict.fromkeys(QUEUES, "classic"))
    for queue in QUEUES:
        publish(broker.connection, vhost, queue, 0, COUNT, size=SIZE)
    shared, holds = tmp_path / "shared", tmp_path / "holds"
    for folder in (shared, holds, tmp_path / "airflow"):
        folder.mkdir()
    (shared / "rbak_test_worker.py").write_text(HOSTNAME)
    (shared / "airflow_local_settings.py").write_text(LOCAL_SETTINGS)
    (shared / "rbak_celery_test.py").write_text(LISTENERS)
    c = broker.connection
    url = f"s3://{s3_bucket}/celery?region=us-east-1&endpoint={s3_server}&path_style=true"
    target = f"{vhost}-r"
    with private_postgres() as database:
        stack = airflow_stack(
            tmp_path / "airflow", AIRFLOW__CORE__EXECUTOR="CeleryExecutor", AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=database,
            AIRFLOW__CELERY__BROKER_URL=f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/{celery_vhost}",
            AIRFLOW__CELERY__RESULT_BACKEND=f"db+{database}",
            AIRFLOW__CELERY__WORKER_CONCURRENCY="1", AIRFLOW__CORE__HOSTNAME_CALLABLE="rbak_test_worker.hostname",
            # a live task heartbeats every 5 s; only a minute without one (a dead worker) makes it a retry
            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="60",
            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL="5",
            AIRFLOW__CORE__PLUGINS_FOLDER=str(shared), PYTHONPATH=os.pathsep.join([str(shared), str(REPO)]),
            AIRFLOW__RBAK__TASK_RETRIES="1", RBAK_TEST_HOLDS=str(holds),
            RBAK_TEST_PUBLISHERS=str(len(QUEUES)))
        stack.start()
        state = None
        try:
            for name in WORKERS:
                start_worker(stack, name)
            stack.wait_for_dag("rbak_backup")
            stack.wait_for_dag("rbak_restore")

            # When a backup runs, and both captures are held after their first checkpoint
            run_id = stack.trigger("rbak_backup", {"storage_url": url, "backup_id": "celery-1", "vhosts": [vhost],
                                                   "segment_work": "process", "verify": "deep"})
            held = {i: json.loads(poll(f"capture[{i}] to hold", lambda i=i: _held(stack, holds / f"held-{i}"))) for i in (0, 1)}

            # Then they are held on the two workers, each recorded running there, each with a stored checkpoint
            assert {h["worker"] for h in held.values()} == set(WORKERS), held
            storage = open_storage(url)
            for index, facts in held.items():
                ti = task_instance(stack, "rbak_backup", run_id, "capture", index)
                assert (ti["state"], ti["hostname"], ti["try_number"]) == ("running", facts["worker"], 1)
                progress = read_progress(storage, checkpoint_key("celery-1", vhost, facts["queue"]))
                assert progress is not None and progress.last_chunk == 1 and progress.staged_records == 5000

            # When capture[0]'s worker is killed mid-capture, and capture[1] is let go
            victim, survivor = held[0]["worker"], held[1]["worker"]
            kill_worker(stack, victim)
            assert not psutil.pid_exists(held[0]["pid"])
            (holds / "release-1").touch()
            state = stack.wait_for_run("rbak_backup", run_id, RUN_DEADLINE_S)

            # Then Airflow retried capture[0] on the other worker, which finished the backup: every message of both
            # queues stored once, byte-exact, in order; the queues as they were
            assert state == "success", stack.logs_tail()
            tries = task_instance(stack, "rbak_backup", run_id, "capture", 0, tries=True)["task_instances"]
            assert [(t["try_number"], t["hostname"]) for t in tries] == [(1, victim), (2, survivor)], tries
            assert tries[-1]["state"] == "success"
            assert task_instance(stack, "rbak_backup", run_id, "capture", 1)["hostname"] == survivor
            assert ManifestStore(storage).load("celery-1").total_messages == COUNT * len(QUEUES)
            for queue in QUEUES:
                _, records = read_queue_independently(storage, "celery-1", vhost, queue)
                assert [bytes(r["body"] or b"") for r in records] == [body_of(i, SIZE) for i in range(COUNT)], queue
                assert ready_count(broker.connection, vhost, queue) == COUNT
            captured = capture_results(run_facts(stack.env)["xcom"])
            assert {q: (r["messages"], r["resumed_from"]) for q, r in captured.items()} == {
                held[0]["queue"]: (COUNT, 5000), held[1]["queue"]: (COUNT, 0)}  # the retry went on from the checkpoint
            print("capture tries:", [(t["try_number"], t["hostname"], t["state"], t["start_date"], t["end_date"])
                                     for t in tries])

            # When the killed worker is back and the backup is restored into another vhost
            start_worker(stack, victim)
            restore_id = stack.trigger("rbak_restore", {"storage_url": url, "backup_id": "celery-1", "vhosts": [vhost],
                                                        "vhost_map": {vhost: target}, "restore_definitions": True,
                                                        "skip_approval": True})
            state = stack.wait_for_run("rbak_restore", restore_id, RUN_DEADLINE_S)

            # Then its publish tasks ran on both workers, and every message is back, byte-exact, in order
            assert state == "success", stack.logs_tail()
            publishers = {task_instance(stack, "rbak_restore", restore_id, "publish", i)["hostname"] for i in (0, 1)}
            assert publishers == set(WORKERS)
            for queue in QUEUES:
                restored = read_queue(broker.connection, target, queue, "classic", COUNT)
                assert [m[0] for m in restored] == [body_of(i, SIZE) for i in range(COUNT)], queue
        finally:
            for index in (0, 1):
                (holds / f"release-{index}").touch()
            stack.stop()
            if state is not None:  # the restore may have made the target vhost
                requests.delete(f"{c.management_base_url}/api/vhosts/{quote(target, safe='')}", auth=(c.username, c.password),
                                timeout=30)


def _held(stack: AirflowStack, marker: Path) -> str | None:
    """The hold's facts once its marker exists; fails at once when a process of the stack has exited."""
    for name, process in stack.processes.items():
        assert process.poll() is None, f"{name} exited {process.returncode}\n{stack.logs_tail()}"
    return marker.read_text() if marker.exists() else None
