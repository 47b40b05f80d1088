"""Two runs of one backup_id at once: the second is refused by a lock in storage, never interleaved.

Racing processes and threads on a folder, loopback S3, Azurite and fake-gcs-server; a real BackupRun held mid-capture while a
second starts; a lock left by a killed process, and the ways out of it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.cli.main import main as rbak
from airflow_rbak.repository.lock import BackupLock, BackupLockedError
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.codec.independent_reader import read_segment
from tests.reliability.faulty_storage import FaultyStorage
from tests.restore.helpers import body_of, declare, publish

REPO = Path(__file__).resolve().parents[2]
RACERS = 4
ROUNDS = 2


def take(url: str, backup_id: str, owner: str, start_at: float) -> str:
    """One racer: wait for the common start, try to take the lock; the owner it found holding it."""
    lock = BackupLock(open_storage(url), backup_id, owner)
    time.sleep(max(0.0, start_at - time.time()))
    try:
        return lock.acquire().owner
    except BackupLockedError as exc:
        return f"refused: {exc}"


def race(pool, url: str) -> list[list[str]]:
    """``ROUNDS`` races of ``RACERS`` for a fresh backup id each; what every racer got, per round."""
    rounds = []
    for r in range(ROUNDS):
        start_at = time.time() + 0.3
        futures = [pool.submit(take, url, f"race-{r}", f"racer-{i}", start_at) for i in range(RACERS)]
        rounds.append([f.result(timeout=60) for f in futures])
    return rounds


@pytest.fixture(params=["file", "s3", pytest.param("azure", marks=pytest.mark.azure),
                        pytest.param("gcs", marks=pytest.mark.gcs)])
def race_location(request, tmp_path) -> str:
    """A fresh, empty location on every backend with conditional writes."""
    if request.param == "file":
        return (tmp_path / "backups").as_uri()
    return request.getfixturevalue(f"{request.param}_storage_url")


@pytest.mark.parametrize("racers", ["processes", "threads"])
def test_of_runs_racing_for_one_backup_id_exactly_one_holds_the_lock_and_the_rest_are_told_who(race_location, racers):
    location = race_location
    # Given several processes (or threads) starting a backup of the same id at the same moment
    if racers == "processes":
        pool = ProcessPoolExecutor(RACERS, mp_context=multiprocessing.get_context("fork"))
    else:
        pool = ThreadPoolExecutor(RACERS)

    # When each tries to take the backup's lock
    with pool:
        rounds = race(pool, location)

    # Then in every round exactly one holds it, and every other is refused naming the holder
    storage = open_storage(location)
    for r, outcome in enumerate(rounds):
        winners = [o for o in outcome if not o.startswith("refused")]
        assert len(winners) == 1, outcome
        assert all(f"held by '{winners[0]}'" in o for o in outcome if o.startswith("refused")), outcome
        assert BackupLock(storage, f"race-{r}").read().owner == winners[0]


@pytest.mark.broker
def test_a_second_backup_run_of_the_same_id_is_refused_while_the_first_captures(broker, vhost, tmp_path):
    # Given a backup run paused in the middle of its capture
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 300)
    location = (tmp_path / "b").as_uri()
    paused, resume = threading.Event(), threading.Event()
    first_storage = FaultyStorage(open_storage(location))
    first_storage.on_put = lambda key: (paused.set(), resume.wait(60)) if "/staging/" in key else None
    settings = BackupSettings("same-1", location, selector=QueueSelector(vhosts=(vhost,)))
    first = ThreadPoolExecutor(1).submit(BackupRun(broker.connection, settings, first_storage).run)
    assert paused.wait(60)

    # When a second run of the same backup id starts
    second_storage = FaultyStorage(open_storage(location))
    second = BackupRun(broker.connection, BackupSettings("same-1", location, selector=QueueSelector(vhosts=(vhost,))), second_storage)
    with pytest.raises(BackupLockedError) as refused:
        second.run()
    resume.set()
    manifest = first.result(timeout=120)

    # Then it was refused before writing anything, and the first run completed with every message
    assert "same-1" in str(refused.value) and "rbak unlock" in str(refused.value)
    assert second_storage.calls["put"] == 0 and second_storage.calls["delete"] == 0
    (queue,) = manifest.queues
    storage = open_storage(location)
    bodies = [bytes(r["body"] or []) for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
    assert bodies == [body_of(i, 300) for i in range(300)]
    assert validate_backup(storage, "same-1", deep=True).valid
    assert BackupLock(storage, "same-1").read() is None  # given back at the end


_HOLD = """
import sys, time
from airflow_rbak.repository.lock import BackupLock
from airflow_rbak.storage import open_storage
BackupLock(open_storage(sys.argv[1]), "crashed-1", "nightly run").acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_a_lock_left_by_a_killed_run_blocks_until_broken_or_removed(tmp_path, capsys):
    # Given a process that took the lock of a backup and was killed (SIGKILL: no clean-up)
    location = (tmp_path / "b").as_uri()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, location], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    storage = open_storage(location)

    # When another run tries, then takes it over with break_lock
    with pytest.raises(BackupLockedError) as refused:
        BackupLock(storage, "crashed-1", "next run").acquire()
    taken = BackupLock(storage, "crashed-1", "next run").acquire(break_lock=True)

    # Then the refusal said who held it, where, since when and the ways out; the takeover holds it
    message = str(refused.value)
    assert f"'nightly run' on host {os.uname().nodename} (pid {holder.pid}) since 0." in message
    assert "break_lock" in message and "rbak unlock --path URL --backup-id crashed-1" in message
    assert taken.owner == "next run"
    with pytest.raises(BackupLockedError, match="no longer holds its lock"):
        BackupLock(storage, "crashed-1", "nightly run").check()
    # and `rbak unlock` removes a lock, saying whose it was
    assert rbak(["unlock", "--path", location, "--backup-id", "crashed-1"]) == 0
    assert "held by 'next run'" in capsys.readouterr().out
    assert BackupLock(storage, "crashed-1", "third run").acquire().owner == "third run"


def test_tasks_of_one_dag_run_share_the_lock_and_another_dag_run_is_refused(tmp_path):
    storage = open_storage((tmp_path / "b").as_uri())
    BackupLock(storage, "dag-1", "rbak_backup/manual__1").acquire()

    again = BackupLock(storage, "dag-1", "rbak_backup/manual__1").acquire()  # a later task, or a retry, of that run

    assert again.owner == "rbak_backup/manual__1"
    with pytest.raises(BackupLockedError, match="held by 'rbak_backup/manual__1'"):
        BackupLock(storage, "dag-1", "rbak_backup/manual__2").acquire()
    assert not BackupLock(storage, "dag-1", "rbak_backup/manual__2").release()
    assert BackupLock(storage, "dag-1", "rbak_backup/manual__1").release()
