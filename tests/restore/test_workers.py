"""Must show 2 (restore): a restore killed on one worker resumes on another, from checkpoints in the backup's storage.

Each "worker" is a process of its own with its own empty TMPDIR and working directory, and the restore keeps its
checkpoints where ``checkpoint_state`` says by default: in the backup's storage (issue 16).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from airflow_rbak.restore.request import DEFAULT_CHECKPOINT_STATE
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]
COUNT = 3000


def publish_on(tmp_path: Path, worker: str, args: dict) -> subprocess.CompletedProcess:
    """Run one queue's publish task in worker ``worker``'s own process and scratch folder."""
    scratch = tmp_path / worker
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tests.restore.publish_worker", orjson.dumps(args).decode()],
                          cwd=scratch, env=env, capture_output=True, timeout=300)


def test_a_restore_killed_on_one_worker_resumes_on_another_without_duplicates_or_gaps(broker, behaviour, vhost, tmp_path):
    # Given a backup of two queues, restored with the default checkpoint_state (the backup's storage)
    assert DEFAULT_CHECKPOINT_STATE == "backup"
    declare(broker.connection, vhost, {"a": "classic", "b": "quorum"})
    for queue in ("a", "b"):
        publish(broker.connection, vhost, queue, 0, COUNT)
    location = (tmp_path / "shared").as_uri()
    backup(broker.connection, location, "rw-1", vhost, segment_max_bytes=64 * 1024)
    c = broker.connection
    settings = {"storage_url": location, "backup_id": "rw-1", "queue_map": {"a": "a-r", "b": "b-r"}, "max_in_flight": 300}
    common = {"amqp_url": f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}",
              "source_vhost": vhost, "settings": settings}

    # When worker 1 is killed right after sending the 1,200th message of "a", and worker 2 restores "b"
    killed = publish_on(tmp_path, "worker-1", {**common, "source_queue": "a", "kill_after": 1200})
    other = publish_on(tmp_path, "worker-2", {**common, "source_queue": "b"})
    assert killed.returncode == -9 and other.returncode == 0, other.stderr.decode()[-3000:]

    # And worker 2 runs the killed task again
    rerun = publish_on(tmp_path, "worker-2", {**common, "source_queue": "a"})
    assert rerun.returncode == 0, rerun.stderr.decode()[-3000:]

    # Then each target queue holds every message exactly once, in order (the source's: a 4.x quorum queue's by priority)
    for target, queue_type in (("a-r", "classic"), ("b-r", "quorum")):
        restored = read_queue(broker.connection, vhost, target, queue_type, COUNT)
        assert [m[0] for m in restored] == [v[0] for v in expected_views(COUNT, queue_type, behaviour)], target
    assert not list((tmp_path / "worker-1").iterdir()) and not list((tmp_path / "worker-2").iterdir())
