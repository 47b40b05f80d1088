"""Must show 4: the publishing process killed mid-queue; the re-run completes with no duplicate and no gap."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]
COUNT = 2000


def _published(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute("SELECT published FROM queue_progress").fetchone()
    except sqlite3.OperationalError:
        return 0
    return row[0] if row else 0


def _kill_mid_queue(args: dict, db: Path, after: int) -> int:
    """Start the worker, SIGKILL it once ``after`` records are checkpointed (it stops there and waits, so the kill
    lands mid-queue however busy the machine is); returns the checkpointed count."""
    args = {**args, "hold_after_commit": after}
    proc = subprocess.Popen([sys.executable, "-m", "tests.restore.publish_worker", orjson.dumps(args).decode()], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # only a worker that stopped making progress meets it
    try:
        while _published(db) < after:
            if proc.poll() is not None:
                raise AssertionError(f"worker ended before it was killed: {proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "worker made no progress"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    return _published(db)


@pytest.mark.parametrize("queue_type", ["classic", "quorum", "stream"])
def test_a_killed_publish_resumes_without_duplicates_or_gaps(broker, behaviour, vhost, tmp_path, queue_type):
    declare(broker.connection, vhost, {"orders": queue_type})
    publish(broker.connection, vhost, "orders", 0, COUNT, decimal=queue_type != "stream")
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "crash-1", vhost, segment_max_bytes=64 * 1024)
    db = tmp_path / "restore.db"
    fields = {"storage_url": location, "backup_id": "crash-1", "queue_map": {"orders": "restored"},
              "checkpoint_state": str(db), "max_in_flight": 300}
    c = broker.connection
    amqp_url = f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?stream_port={c.stream_port}&management_port={c.management_port}"
    args = {"amqp_url": amqp_url, "source_vhost": vhost, "source_queue": "orders",
            "settings": fields}

    checkpointed = _kill_mid_queue(args, db, after=600)

    assert 600 <= checkpointed < COUNT
    report = RestoreRun(broker.connection, RestoreRequest(**fields)).run()
    (row,) = report.queues
    assert row["completed"] and row["published_total"] == COUNT
    assert row["resumed_from"] == checkpointed
    assert checkpointed + row["already_delivered"] + row["published"] == COUNT
    restored = read_queue(broker.connection, vhost, "restored", queue_type, COUNT)
    # in the source's delivery order (a 4.x quorum queue's by priority), which the restored queue delivers again
    assert [m[0] for m in restored] == [v[0] for v in expected_views(COUNT, queue_type, behaviour)]


def test_records_confirmed_after_the_last_commit_are_not_published_again(broker, behaviour, vhost, tmp_path):
    # Given a finished restore whose checkpoint is set back as if the last 70 confirms had never been committed
    declare(broker.connection, vhost, {"orders": "quorum"})
    publish(broker.connection, vhost, "orders", 0, 200)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "lost-1", vhost)
    db = tmp_path / "restore.db"
    settings = RestoreRequest(location, backup_id="lost-1", queue_map={"orders": "restored"}, checkpoint_state=str(db))
    RestoreRun(broker.connection, settings).run()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE queue_progress SET next_ordinal=130, published=130, depth_base=depth_base-70, completed=0")

    # When it runs again
    report = RestoreRun(broker.connection, settings).run()

    # Then the depth says those 70 are there: none is published twice, and the queue holds each message once
    (row,) = report.queues
    assert (row["resumed_from"], row["already_delivered"], row["published"], row["published_total"]) == (130, 70, 0, 200)
    restored = read_queue(broker.connection, vhost, "restored", "quorum", 200)
    assert [m[0] for m in restored] == [v[0] for v in expected_views(200, "quorum", behaviour)]
