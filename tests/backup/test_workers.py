"""Must show 2 (capture): two workers capture queues of one backup at once; one is killed, the other re-runs its task.

Each "worker" is a process of its own with its own empty TMPDIR and working directory: everything a task resumes
from is in the backup's storage (issue 16).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.codec.layout import checkpoint_key
from airflow_rbak.storage import open_storage
from tests.restore.helpers import body_of, declare, publish, ready_count
from tests.spark_jobs.staging import read_queue_independently

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]
COUNT, SIZE = 12_000, 64  # three staged chunks of 5,000 records per queue
OWNER = "rbak_backup/manual__1"


def run_worker(tmp_path: Path, worker: str, args: dict) -> subprocess.Popen:
    """Start a capture task in worker ``worker``'s own process and scratch folder."""
    scratch = tmp_path / worker
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.backup.capture_task", orjson.dumps(args).decode()],
                            cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(proc: subprocess.Popen) -> tuple[int, dict | None]:
    out, err = proc.communicate(timeout=300)
    lines = out.decode().splitlines()
    return proc.returncode, (orjson.loads(lines[-1]) if proc.returncode == 0 and lines else {"stderr": err.decode()[-3000:]})


def test_a_capture_killed_on_one_worker_completes_on_another_with_every_message_once_in_order(broker, vhost, tmp_path):
    # Given two queues of 12,000 messages and one backup begun in shared storage
    declare(broker.connection, vhost, {"a": "classic", "b": "classic"})
    for queue in ("a", "b"):
        publish(broker.connection, vhost, queue, 0, COUNT, size=SIZE)
    location = (tmp_path / "shared").as_uri()
    run = BackupRun(broker.connection, BackupSettings("w-1", location, selector=QueueSelector(vhosts=(vhost,)),
                                                      lock_owner=OWNER))
    run.lock.acquire()
    with ManagementClient(broker.connection) as client:
        run.begin(client)
    c = broker.connection
    common = {"amqp_url": f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}",
              "storage_url": location, "backup_id": "w-1", "lock_owner": OWNER, "vhost": vhost}
    key_a, key_b = checkpoint_key("w-1", vhost, "a"), checkpoint_key("w-1", vhost, "b")

    # When worker 1 captures "a" and worker 2 captures "b" at the same time (each waits for the other's first
    # checkpoint), and worker 1 is killed with chunk 2 of "a" stored but not yet checkpointed
    one = run_worker(tmp_path, "worker-1", {**common, "queue": "a", "kill_at_checkpoint": 2, "kill_wait_for": key_b})
    two = run_worker(tmp_path, "worker-2", {**common, "queue": "b", "wait_for": key_a})
    code_one, _ = finished(one)
    code_two, result_b = finished(two)
    assert code_one == -9, "worker 1 was to be killed mid-capture"
    assert code_two == 0 and result_b["messages"] == COUNT, result_b
    stopped = CaptureCheckpoints(open_storage(location), "w-1").get("w-1", vhost, "a")
    assert (stopped.last_chunk, stopped.staged_records, stopped.completed) == (1, 5000, False)

    # And worker 2 runs the killed task again
    code, result_a = finished(run_worker(tmp_path, "worker-2", {**common, "queue": "a"}))
    assert code == 0, result_a

    # Then the completed backup holds every message of both queues exactly once, in order, and the queues are unchanged
    assert result_a["messages"] == COUNT and not result_a["skipped_completed"]
    entries = [run.encode(QueueInfo(vhost=vhost, name=q, queue_type=t)) for q, t in (("a", "classic"), ("b", "classic"))]
    run.finish(entries)
    for queue in ("a", "b"):
        _, records = read_queue_independently(open_storage(location), "w-1", vhost, queue)
        assert [bytes(r["body"] or b"") for r in records] == [body_of(i, SIZE) for i in range(COUNT)]
        assert ready_count(broker.connection, vhost, queue) == COUNT
