"""Must show (issue 51, B): a backup run killed mid-capture is listed as abandoned once its lease lapses, and the
cleanup removes its folder and staging, keeps every segment a complete backup lists, and leaves a running backup be.

The kill is the capture worker's own (``tests.backup.capture_task``: SIGKILL as it stores its second checkpoint), so
it lands mid-capture on any machine; the lease is tiny, and the one wait is a poll with a deadline for it to lapse.
"""

from __future__ import annotations

import time

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec import BackupManifest
from airflow_rbak.repository.abandoned import remove_abandoned
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.lock import BackupLock
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.backup.test_workers import COUNT, SIZE, finished, run_worker
from tests.repository.test_abandoned import complete
from tests.restore.helpers import declare, publish

pytestmark = pytest.mark.broker
OWNER = "rbak_backup/manual__killed"
#: The lease: a lock unrenewed this long (ms) belongs to a run that is gone.
LEASE_MS = 500
DEADLINE_S = 60.0


def keys(storage, prefix: str = "") -> list[str]:
    return sorted(info.key for info in storage.list(prefix))


def test_a_run_killed_mid_capture_is_abandoned_then_removed_beside_a_running_one_and_complete_chains(
        broker, vhost, tmp_path):
    # Given complete backups of which the newer lists a segment in the older's folder (a stream chain)
    location = (tmp_path / "loc").as_uri()
    storage = open_storage(location)
    storage.put("base-1/queues/v/s/segment-0001.zst", b"base segment")
    storage.put("chain-2/queues/v/s/segment-0001.zst", b"its own")
    now = int(time.time() * 1000)
    complete(storage, "base-1", now - 7_200_000, listed=["base-1/queues/v/s/segment-0001.zst"])
    complete(storage, "chain-2", now - 3_600_000, listed=["base-1/queues/v/s/segment-0001.zst",
                                                           "chain-2/queues/v/s/segment-0001.zst"], depends_on=["base-1"])
    # and a backup run killed mid-capture: begun (its lock and manifest), its capture worker SIGKILLed at its 2nd checkpoint
    declare(broker.connection, vhost, {"a": "classic"})
    publish(broker.connection, vhost, "a", 0, COUNT, size=SIZE)
    run = BackupRun(broker.connection, BackupSettings("killed-1", location, selector=QueueSelector(vhosts=(vhost,)),
                                                      lock_owner=OWNER))
    run.lock.acquire()
    with ManagementClient(broker.connection) as client:
        run.begin(client)
    c = broker.connection
    worker = run_worker(tmp_path, "worker", {
        "amqp_url": f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}",
        "storage_url": location, "backup_id": "killed-1", "lock_owner": OWNER, "vhost": vhost, "queue": "a",
        "kill_at_checkpoint": 2})
    assert finished(worker)[0] == -9, "the worker was to be killed mid-capture"
    assert keys(storage, "killed-1/staging/"), "the killed capture left staging behind"
    # and a backup running beside it (its run holds a live lock)
    live = BackupLock(storage, "live-1", "rbak_backup/manual__live")
    live.acquire()
    ManifestStore(storage).save(BackupManifest("live-1", now, "0"))
    storage.put("live-1/staging/v/q/chunk-000001", b"staged")

    # When its lease lapses (polled with a deadline: the killed run can no longer renew it)
    deadline = time.monotonic() + DEADLINE_S
    while _status(storage, "killed-1", int(time.time() * 1000)) != "abandoned":
        assert time.monotonic() < deadline, "the killed run's lease never lapsed"
        time.sleep(0.1)
    # and the live run renews its lease; the cleanup then runs at the moment of that renewal
    assert live.renew()
    at = live.read().renewed_at
    before = keys(storage)
    listed = {b.backup_id: b.status for b in list_backups(storage, now_ms=at, abandoned_after_ms=LEASE_MS)}
    done = remove_abandoned(storage, now_ms=at, after_ms=LEASE_MS)

    # Then the killed run was listed as abandoned, the running one as incomplete, the complete ones as complete
    assert listed == {"base-1": "complete", "chain-2": "complete", "killed-1": "abandoned", "live-1": "incomplete"}
    # and the cleanup removed the killed run's whole folder (manifest, staging, checkpoints, lock) and nothing else
    assert done.removed == ["killed-1"] and not done.errors and not done.skipped
    assert keys(storage) == [k for k in before if not k.startswith("killed-1/")]
    assert done.objects_deleted == len([k for k in before if k.startswith("killed-1/")])
    after = {b.backup_id: b.status for b in list_backups(storage, now_ms=at, abandoned_after_ms=LEASE_MS)}
    assert after == {"base-1": "complete", "chain-2": "complete", "live-1": "incomplete"}
    assert live.read().owner == "rbak_backup/manual__live"


def _status(storage, backup_id: str, now_ms: int) -> str | None:
    found = {b.backup_id: b.status for b in list_backups(storage, now_ms=now_ms, abandoned_after_ms=LEASE_MS)}
    return found.get(backup_id)
