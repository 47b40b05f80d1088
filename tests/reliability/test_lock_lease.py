"""The backup lock as a lease: a run that loses its lock mid-capture stops writing at its next write.

Two runs of one ``backup_id`` on one folder: the first is capturing (its first
staging chunk just landed) when a second run takes the lock over with
``break_lock``, as it would from a run it believes crashed. Every write either
run lands is recorded in order. The first must not land a single write after
the takeover, must fail with :class:`BackupLockedError`, and the completed
backup must be the second's alone: every object the manifest names last
written by the second, every message once, in order, byte-exact, deep-valid.
"""

from __future__ import annotations

import os
import time

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.lock import BackupLock, BackupLockedError
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.reliability import faults
from tests.reliability.expect import backed_up, published
from tests.restore.helpers import declare, publish, read_queue

COUNT, SIZE = 3_000, 6_144  # three staging chunks (5,000 deliveries or 8 MiB staged each: ~6.2 KiB a message here)


class Witness(faults.TriggerStorage):
    """Records, in order, every write and delete that landed, under the name of the run that made it."""

    def __init__(self, inner: Storage, run: str, landed: list[tuple[str, str, str]]) -> None:
        super().__init__(inner)
        self.run, self.landed = run, landed

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self.landed.append((self.run, "put", key))
        self._maybe_fire("put", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        stored = self.inner.put_if_absent(key, data)
        if stored:
            self.landed.append((self.run, "put", key))
        return stored

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        self.inner.put_file(key, path)
        self.landed.append((self.run, "put", key))

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        self.landed.append((self.run, "delete", key))


@pytest.mark.broker
def test_a_run_that_loses_its_lock_mid_capture_stops_writing_and_the_backup_is_the_second_runs_whole(
        broker, vhost, tmp_path):
    # Given a queue of 3,000 messages and two runs of one backup_id, each on its own machine (state folder)
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT, SIZE)
    plain = open_storage((tmp_path / "b").as_uri())
    landed: list[tuple[str, str, str]] = []
    first_storage, second_storage = Witness(plain, "first", landed), Witness(plain, "second", landed)

    def settings(state: str, **more) -> BackupSettings:
        return BackupSettings("lease-1", plain.url, selector=QueueSelector(vhosts=(vhost,)), **more)

    first = BackupRun(broker.connection, settings("state-1"), first_storage)
    second = BackupRun(broker.connection, settings("state-2", break_lock=True), second_storage)

    def take_over() -> None:
        second.lock.acquire(break_lock=True)
        landed.append(("second", "took the lock", second.lock.key))

    # When the second run takes the lock over as soon as the first's first staging chunk has landed
    first_storage.arm(lambda op, key: op == "put" and key.endswith("chunk-00000001.zst"), take_over)
    with pytest.raises(RbakError) as failed:
        first.run()
    # Then the first run stopped with a clear error naming the lock
    assert first_storage.fired_at is not None
    assert isinstance(failed.value, BackupLockedError) or isinstance(failed.value.__cause__, BackupLockedError), failed.value
    assert "no longer holds its lock" in str(failed.value) and "lease-1/lock.json" in str(failed.value)
    print(f"first run stopped: {type(failed.value).__name__}: {failed.value}")
    # and did not land one write after the takeover
    takeover = landed.index(("second", "took the lock", second.lock.key))
    assert [w for w in landed[takeover:] if w[0] == "first"] == []

    # When the second run goes on to complete the backup
    manifest = second.run()

    # Then the first's last write came before the second's first, and the backup is the second's, whole
    firsts = [i for i, w in enumerate(landed) if w[0] == "first"]
    seconds = [i for i, w in enumerate(landed) if w[0] == "second" and w[1] != "took the lock"]
    assert max(firsts) < min(seconds)
    last_writer = {key: run for run, op, key in landed if op == "put"}
    named = [s.key for q in manifest.queues for s in q.segments] + [manifest.definitions.key, manifest_key("lease-1")]
    assert {key: last_writer[key] for key in named} == {key: "second" for key in named}
    assert manifest.queue(vhost, "orders").message_count == COUNT
    assert backed_up(plain, "lease-1", vhost, "orders") == published(COUNT, SIZE)
    assert validate_backup(plain, "lease-1", deep=True).valid
    assert plain.exists(second.lock.key) is False  # given back
    # and the source queue is untouched
    assert read_queue(broker.connection, vhost, "orders", "classic", COUNT) == published(COUNT, SIZE)


class TakenOverDuringRelease(faults.TriggerStorage):
    """Passes every call through; inside the first conditional delete, another run takes the lock first."""

    def __init__(self, inner: Storage, take_over) -> None:
        super().__init__(inner)
        self.take_over = take_over

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        return self.inner.read_tagged(key)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        return self.inner.replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        take_over, self.take_over = self.take_over, None
        if take_over is not None:
            take_over()
        return self.inner.delete_if_unchanged(key, tag)


@pytest.mark.parametrize("location", ["file", "s3"], indirect=True)
def test_a_working_run_renews_its_lease_and_a_lost_lock_is_neither_renewed_nor_released(location):
    # Given a run holding the lock of a backup (on a folder, then on S3)
    first = BackupLock(open_storage(location), "lease-2", "first", confirm_after=0)
    taken = first.acquire()
    # When it renews its lease while it works, then the lease shows it
    with first.renewing(every=0.01):
        renewed = wait_for(lambda: (lock := first.read()) is not None and lock.renewed_at > taken.renewed_at)
    assert renewed and "last renewed" in first.read().describe()
    # When another run takes the lock over, then the first can neither renew nor give back the second's lock
    second = BackupLock(open_storage(location), "lease-2", "second", confirm_after=0)
    second.acquire(break_lock=True)
    assert first.renew() is False and first.release() is False
    assert first.read().owner == "second"
    with pytest.raises(BackupLockedError, match="no longer holds its lock .* not writing lease-2/x"):
        first.check("writing lease-2/x")
    assert second.release() is True and first.read() is None


@pytest.mark.parametrize("location", ["file", "s3"], indirect=True)
def test_giving_the_lock_back_never_removes_a_lock_another_run_took_in_between(location):
    # Given a run that has read its own lock and is about to delete it, when a second run breaks it and
    # takes the lock at that instant
    plain = open_storage(location)
    second = BackupLock(plain, "lease-3", "second", confirm_after=0)
    first = BackupLock(TakenOverDuringRelease(plain, lambda: second.acquire(break_lock=True)), "lease-3", "first",
                       confirm_after=0)
    first.acquire()
    # Then the first's release removes nothing: the delete is conditional on the lock it read
    assert first.release() is False
    assert plain.exists("lease-3/lock.json") and second.read().owner == "second"


def wait_for(condition, timeout: float = 30.0) -> bool:
    """Poll ``condition`` until true (a renewal thread runs on its own schedule); False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False
