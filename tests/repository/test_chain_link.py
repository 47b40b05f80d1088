"""Retention and the runs that link stream chains take the location's chain lock in turn, never together."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_rbak.backup.finalize import finish_backup
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.layout import CHAIN_LOCK_KEY
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.lock import BackupLockedError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.storage import MemoryStorage
from tests.repository.test_retention import DAY, NOW, stream_entry


def two_backups(storage: MemoryStorage) -> None:
    """b1 and b2, complete: retention keep_last 1 removes b1."""
    store = ManifestStore(storage)
    for day in (1, 2):
        store.save(BackupManifest(f"b{day}", day * DAY, "0", completed_at=day * DAY + 1))


def test_the_chain_lock_is_never_listed_as_a_backup():
    storage = MemoryStorage()
    two_backups(storage)

    with ChainLock(storage, "holder", confirm_after=0).held():
        listed = [b.backup_id for b in list_backups(storage)]
        present = storage.exists(CHAIN_LOCK_KEY)

    assert listed == ["b1", "b2"] and present and not storage.exists(CHAIN_LOCK_KEY)


def test_retention_waits_for_the_holder_of_the_chain_lock_then_runs():
    # Given a live holder of the chain lock
    storage = MemoryStorage()
    two_backups(storage)
    seen_held = threading.Event()

    def clock() -> float:  # asked each time retention finds the lock held (is its holder stale?)
        seen_held.set()
        return time.time()

    waiting = ChainLock(storage, "retention", confirm_after=0, poll=0.01, clock=clock)
    with ThreadPoolExecutor(1) as pool, ChainLock(storage, "holder", confirm_after=0).held():
        # When retention starts meanwhile
        pending = pool.submit(apply_retention, storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2",
                              chain_lock=waiting)
        assert seen_held.wait(30)

        # Then it has deleted nothing while the lock is held
        assert storage.exists("b1/manifest.json") and not pending.done()
    # and it runs once the holder gives the lock back
    assert pending.result(timeout=30).deleted == ["b1"]


def test_retention_gives_up_after_its_wait_naming_the_holder_and_deletes_nothing():
    storage = MemoryStorage()
    two_backups(storage)

    with ChainLock(storage, "nightly retention", confirm_after=0).held(), pytest.raises(BackupLockedError) as refused:
        apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2",
                        chain_lock=ChainLock(storage, "retention", confirm_after=0, wait=0))

    assert "held by 'nightly retention'" in str(refused.value) and CHAIN_LOCK_KEY in str(refused.value)
    assert storage.exists("b1/manifest.json")


def test_a_chain_lock_left_by_a_crashed_holder_is_taken_over_once_its_lease_is_stale():
    # Given a chain lock whose holder crashed (never renewed, never given back)
    storage = MemoryStorage()
    two_backups(storage)
    ChainLock(storage, "crashed", confirm_after=0).lock.acquire()

    # When retention runs once the lease is older than stale_after
    later = ChainLock(storage, "retention", confirm_after=0, wait=0, stale_after=60, clock=lambda: time.time() + 61)
    done = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2", chain_lock=later)

    # Then it took the lock over, ran, and gave it back
    assert done.deleted == ["b1"] and not storage.exists(CHAIN_LOCK_KEY)


def test_a_stream_backup_links_its_chain_and_completes_only_under_the_chain_lock():
    # Given a stream backup ready to complete, and the chain lock held by a retention pass
    storage = MemoryStorage()
    ManifestStore(storage).save(BackupManifest("r1", DAY, "0"))

    # When it completes while the lock is held
    with ChainLock(storage, "retention pass", confirm_after=0).held(), pytest.raises(BackupLockedError):
        finish_backup(storage, "r1", [stream_entry("r1", 0, 9)], chain_lock=ChainLock(storage, "r1", wait=0))

    # Then its manifest stays incomplete; once the lock is free it completes
    assert ManifestStore(storage).load("r1").completed_at is None
    assert finish_backup(storage, "r1", [stream_entry("r1", 0, 9)]).completed_at is not None
