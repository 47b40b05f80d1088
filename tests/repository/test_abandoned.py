"""Abandoned backups: listed only on evidence that their run is gone, removed with their staging, never a running
backup, a segment another backup lists, or a folder that merely looks abandoned (issue 51, B)."""

from __future__ import annotations

import orjson
import pytest

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.repository.abandoned import CLEANUP_OWNER, remove_abandoned
from airflow_rbak.repository.catalog import latest_complete, list_backups
from airflow_rbak.repository.lock import BackupLock, LockInfo
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention, running_backups
from airflow_rbak.storage import open_storage

HOUR = 3_600_000
T0 = 1_800_000_000_000  # when the runs began
GRACE = 24 * HOUR
LATER = T0 + 30 * HOUR  # past the grace of a lock last renewed at T0


def stored_lock(storage, backup_id: str, renewed_at: int, owner: str = "rbak_backup/scheduled__1") -> None:
    storage.put(f"{backup_id}/lock.json", LockInfo(backup_id, owner, "t0k3n", "worker-1", 42, renewed_at, renewed_at).to_bytes())


def begun(storage, backup_id: str, *, at: int = T0, lock_at: int | None = T0, staging: bool = True) -> None:
    """A run's folder as a crash leaves it: an incomplete manifest, staging, a checkpoint, a segment, its lock."""
    ManifestStore(storage).save(BackupManifest(backup_id, at, "0"))
    if staging:
        storage.put(f"{backup_id}/staging/v/q/chunk-000001", b"staged")
        storage.put(f"{backup_id}/checkpoints/v/q.json", b"{}")
        storage.put(f"{backup_id}/queues/v/q/segment-0001.zst", b"seg")
    if lock_at is not None:
        stored_lock(storage, backup_id, lock_at)


def complete(storage, backup_id: str, at: int, listed: list[str] = (), depends_on: list[str] = ()) -> None:
    segments = [SegmentMetadata(key, i + 1, 0, len(storage.get(key)), 0, None, None, "0" * 64) for i, key in enumerate(listed)]
    ManifestStore(storage).save(BackupManifest(backup_id, at, "0", completed_at=at + 1000,
                                               extensions={"depends_on": list(depends_on)} if depends_on else {},
                                               queues=[QueueBackup("v", "s", "stream", segments)] if segments else []))


def statuses(storage, now: int = LATER) -> dict[str, str]:
    return {b.backup_id: b.status for b in list_backups(storage, now_ms=now, abandoned_after_ms=GRACE)}


@pytest.fixture
def storage(tmp_path):
    return open_storage((tmp_path / "loc").as_uri())


def test_only_evidence_that_the_run_is_gone_makes_a_backup_abandoned(storage):
    # Given a complete backup and incomplete folders of every kind
    complete(storage, "done", T0 - HOUR)
    begun(storage, "crashed")  # lock last renewed at T0
    begun(storage, "running", lock_at=LATER - HOUR)  # renewed an hour ago
    begun(storage, "unreadable-lock")
    storage.put("unreadable-lock/lock.json", b"not json")
    begun(storage, "unlocked", lock_at=None)  # only its manifest speaks for it: one object anyone may plant
    begun(storage, "unlocked-recent", at=LATER - HOUR, lock_at=None)
    storage.put("stray/whatever.bin", b"x")  # no manifest, no lock
    storage.put("lost-manifest/queues/v/q/segment-0001.zst", b"seg")  # segments a rebuild may make a backup of
    stored_lock(storage, "lost-manifest", T0)
    stored_lock(storage, "before-manifest", T0)  # crashed between its lock and its manifest

    # When the location is listed 30 hours after T0 with a grace of 24
    found = statuses(storage)

    # Then only the runs shown gone are abandoned; the rest keep their status, and `latest` is still the complete one
    assert found == {"done": "complete", "crashed": "abandoned", "running": "incomplete",
                     "unreadable-lock": "incomplete", "unlocked": "incomplete", "unlocked-recent": "incomplete",
                     "stray": "no-manifest", "lost-manifest": "no-manifest", "before-manifest": "abandoned"}
    assert statuses(storage, now=T0 + HOUR)["crashed"] == "incomplete"  # within the grace
    assert latest_complete(storage, now_ms=LATER).backup_id == "done"
    problem = next(b.problem for b in list_backups(storage, now_ms=LATER) if b.backup_id == "crashed")
    assert "'rbak_backup/scheduled__1'" in problem and "30 hours ago" in problem and "rbak forget --abandoned" in problem


def test_removing_keeps_what_complete_backups_list_and_leaves_running_and_doubtful_ones(storage):
    # Given an abandoned run whose folder holds a segment a complete backup's chain lists, a running one, and a folder
    # whose lock cannot be read
    begun(storage, "crashed")
    shared = "crashed/queues/v/q/segment-0001.zst"
    storage.put("later/queues/v/s/segment-0001.zst", b"own")
    complete(storage, "later", T0 + HOUR, listed=[shared, "later/queues/v/s/segment-0001.zst"], depends_on=["crashed"])
    begun(storage, "running", lock_at=LATER - 60_000)
    begun(storage, "odd")
    storage.put("odd/lock.json", b"[]")
    before = sorted(i.key for i in storage.list(""))

    # When a dry run, then a real pass, removes abandoned backups
    dry = remove_abandoned(storage, now_ms=LATER, after_ms=GRACE, dry_run=True)
    after_dry = sorted(i.key for i in storage.list(""))
    done = remove_abandoned(storage, now_ms=LATER, after_ms=GRACE)

    # Then the dry run changed nothing and said what the pass did; the pass removed the abandoned folder's manifest,
    # staging, checkpoints and lock, kept the segment the complete backup lists, and left the others whole
    assert after_dry == before and dry.removed == done.removed == ["crashed"]
    assert dry.objects_deleted == done.objects_deleted == 4  # staging, checkpoint, manifest, lock
    assert done.objects_kept == {"crashed": 1} and not done.errors
    assert [i.key for i in storage.list("crashed/")] == [shared]
    left = {b.backup_id: b.status for b in list_backups(storage, now_ms=LATER)}
    assert left == {"crashed": "retired", "later": "complete", "running": "incomplete", "odd": "incomplete"}
    assert sorted(i.key for i in storage.list("running/")) == [k for k in before if k.startswith("running/")]
    assert sorted(i.key for i in storage.list("odd/")) == [k for k in before if k.startswith("odd/")]


def test_a_lock_renewed_just_before_the_take_over_keeps_its_backup(storage, monkeypatch):
    # Given an abandoned backup whose run renews its lock after the pass decided, just before it takes the lock over
    begun(storage, "slow")
    real_take_over = BackupLock.take_over

    def renewed_first(self, expected):
        stored_lock(storage, "slow", LATER - 1000)
        return real_take_over(self, expected)

    monkeypatch.setattr(BackupLock, "take_over", renewed_first)

    # When the pass removes abandoned backups
    done = remove_abandoned(storage, now_ms=LATER, after_ms=GRACE)

    # Then it leaves that backup whole, saying why
    assert done.removed == [] and "its run may be back" in done.skipped["slow"]
    assert storage.exists("slow/staging/v/q/chunk-000001") and storage.exists("slow/manifest.json")
    assert orjson.loads(storage.get("slow/lock.json"))["renewed_at"] == LATER - 1000


def test_one_folder_that_cannot_be_removed_does_not_stop_the_others(storage, monkeypatch):
    # Given two abandoned backups, the first of which storage refuses to delete
    begun(storage, "a-stuck")
    begun(storage, "b-gone")
    from airflow_rbak.storage.base import StorageError

    inner_delete = type(storage).delete

    def delete(self, key):
        if key.startswith("a-stuck/staging/"):
            raise StorageError("access denied", key)
        inner_delete(self, key)

    monkeypatch.setattr(type(storage), "delete", delete)

    # When the pass runs
    done = remove_abandoned(storage, now_ms=LATER, after_ms=GRACE)

    # Then the other is removed, the error names the first, and the first keeps its manifest under the pass's lock,
    # abandoned again once that lock's grace has passed (the next pass finishes it)
    assert done.removed == ["b-gone"] and "access denied" in done.errors["a-stuck"]
    assert not list(storage.list("b-gone/")) and storage.exists("a-stuck/manifest.json")
    left = BackupLock(storage, "a-stuck").read()
    assert left.owner == CLEANUP_OWNER
    assert statuses(storage, now=left.renewed_at + 1)["a-stuck"] == "incomplete"
    assert statuses(storage, now=left.renewed_at + GRACE)["a-stuck"] == "abandoned"


def test_an_abandoned_lock_no_longer_holds_back_the_expiry_of_stream_backups(storage):
    # Given complete backups and a crashed run's lock
    for day in (1, 2, 3):
        complete(storage, f"c{day}", T0 - (10 - day) * HOUR)
    begun(storage, "crashed")
    backups = list_backups(storage, now_ms=LATER)

    # Then a crashed run counts as running within the grace and no longer once its lease has lapsed
    assert running_backups(storage, list_backups(storage, now_ms=T0 + HOUR)) == ("crashed",)
    assert running_backups(storage, backups) == ()
    assert apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=LATER, protect=None, dry_run=True).deleted == \
        ["c1", "c2"]
    assert orjson.loads(storage.get("crashed/lock.json"))["owner"] == "rbak_backup/scheduled__1"
