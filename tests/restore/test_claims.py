"""Must show (issue 50, 3): two runs of one restore never both publish a queue. The run publishing it holds the queue
restore's claim; the other refuses naming the holder, and once the first is done finds the queue completed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_rbak.repository.lock import LockInfo
from airflow_rbak.restore import RestoreClaimedError, RestoreRequest, RestoreRun
from airflow_rbak.restore.claims import FileClaim, StorageClaim
from airflow_rbak.restore.publisher import ConfirmPipeline
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

REPO = Path(__file__).resolve().parents[2]
COUNT = 1500


def hold_in_commit(monkeypatch: pytest.MonkeyPatch, thread: str, published: int) -> tuple[threading.Event, threading.Event]:
    """Stop the publisher running in thread ``thread`` inside its first checkpoint commit past ``published`` records
    until released; returns (held, release)."""
    held, release = threading.Event(), threading.Event()
    commit = ConfirmPipeline._commit

    def holding(self: ConfirmPipeline) -> None:
        commit(self)
        if threading.current_thread().name == thread and self.cp.published >= published and not held.is_set():
            held.set()
            release.wait()

    monkeypatch.setattr(ConfirmPipeline, "_commit", holding)
    return held, release


@pytest.mark.broker
@pytest.mark.parametrize("state", ["sqlite", "storage"])
def test_two_runs_of_one_restore_publish_each_message_once(broker, behaviour, vhost, tmp_path, monkeypatch, state):
    # Given a backup, and two runs of the same restore (a double click), both planned while the target was empty
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "twice-1", vhost)
    checkpoint_state = str(tmp_path / "restore.db") if state == "sqlite" else (tmp_path / "state").as_uri()
    request = RestoreRequest(location, backup_id="twice-1", queue_map={"orders": "restored"},
                             checkpoint_state=checkpoint_state, max_in_flight=300)
    first, second = RestoreRun(broker.connection, request), RestoreRun(broker.connection, request)
    plans = first.plan(), second.plan()
    assert all(p.queues[0].target_depth is None for p in plans)

    # When the first publishes and is held inside a checkpoint commit, part of the queue sent
    held, release = hold_in_commit(monkeypatch, "first-run", 500)
    outcome: dict[str, object] = {}

    def publish_first() -> None:
        try:
            outcome["result"] = first.publish(plans[0], plans[0].queues[0])
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    worker = threading.Thread(target=publish_first, name="first-run")
    worker.start()
    try:
        assert held.wait(300), f"the first run never reached its commit: {outcome}"

        # And the second publishes the same queue meanwhile
        with pytest.raises(RestoreClaimedError) as refused:
            second.publish(plans[1], plans[1].queues[0])
    finally:
        release.set()
        worker.join(300)

    # Then the second refused, naming the other holder, having sent nothing
    message = str(refused.value)
    assert f"the restore of {vhost}/orders into {vhost}/restored is being published by another run" in message
    assert str(os.getpid()) in message and "Nothing was published by this run" in message
    # And the first finished the queue
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].completed and outcome["result"].published == COUNT

    # When the second runs again after the first is done, it finds the queue completed and publishes nothing
    again = second.publish(plans[1], plans[1].queues[0])
    assert again.completed and again.published == 0 and again.published_total == COUNT

    # And the target holds each message once, in order
    restored = read_queue(broker.connection, vhost, "restored", "classic", COUNT)
    assert [m[0] for m in restored] == [v[0] for v in expected_views(COUNT, "classic", behaviour)]


def _planted(storage, key: str, host: str, pid: int, renewed_ms: int) -> None:
    storage.put(key, LockInfo("claim", "run of another worker", "t0ken", host, pid, renewed_ms, renewed_ms).to_bytes())


def _ended_pid() -> int:
    """The pid of a process of this host that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_claim_in_storage_of_a_live_holder_refuses_and_a_crashed_holders_is_taken_over(tmp_path):
    storage = open_storage(tmp_path.as_uri())
    key, now = "b-1/state/restore/x/claim.json", int(time.time() * 1000)

    # Given a claim renewed just now by a run on another host: it refuses, naming that run
    _planted(storage, key, "worker-7", 4242, now)
    with pytest.raises(RestoreClaimedError, match="held by 'run of another worker' on host worker-7 \\(pid 4242\\)"):
        with StorageClaim(storage, key, "the restore of /orders into dr/orders", confirm_after=0):
            pass

    # Given a claim of another host not renewed for longer than the lease: it is taken over, then given back
    _planted(storage, key, "worker-7", 4242, now - 301_000)
    with StorageClaim(storage, key, "the restore of /orders into dr/orders", confirm_after=0):
        assert b"worker-7" not in storage.get(key)
    assert not storage.exists(key)

    # Given a claim just renewed by a process of this host that has ended (a SIGKILLed worker): it is taken over
    _planted(storage, key, socket.gethostname(), _ended_pid(), now)
    with StorageClaim(storage, key, "the restore of /orders into dr/orders", confirm_after=0):
        pass

    # Given an unreadable claim (no run writes one): it is taken over
    storage.put(key, b"not json")
    with StorageClaim(storage, key, "the restore of /orders into dr/orders", confirm_after=0):
        pass


def test_a_claim_in_storage_taken_over_stops_its_holder_at_its_next_checkpoint(tmp_path):
    storage = open_storage(tmp_path.as_uri())
    key = "b-1/state/restore/x/claim.json"
    with StorageClaim(storage, key, "the restore of /orders into dr/orders", confirm_after=0) as claim:
        claim.check()
        _planted(storage, key, "worker-7", 4242, int(time.time() * 1000))  # another run took it over
        with pytest.raises(RestoreClaimedError, match="this run lost its claim"):
            claim.check()


def test_a_file_claim_is_released_by_the_os_when_its_process_is_killed(tmp_path):
    # Given a process holding the claim beside a SQLite checkpoint file
    path = tmp_path / "restore.db.claims" / "x.lock"
    code = ("import sys; from pathlib import Path; from airflow_rbak.restore.claims import FileClaim\n"
            f"with FileClaim(Path({str(path)!r}), 'the restore'):\n"
            "    print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"

        # Then another claim refuses, naming that process
        with pytest.raises(RestoreClaimedError, match=f"held by process {holder.pid} on host"):
            with FileClaim(path, "the restore"):
                pass
    finally:
        holder.kill()  # When it is killed
        holder.wait(30)

    # Then the claim is free at once
    with FileClaim(path, "the restore"):
        pass
