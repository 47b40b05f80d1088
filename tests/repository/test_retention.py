"""Retention removes only complete, superseded backups, and never the one just written."""

from __future__ import annotations

import pytest

from airflow_rbak.backup.finalize import finish_backup
from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import BackupSummary
from airflow_rbak.repository.lock import BackupLock
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import (
    RetentionPolicy,
    _needed_keys,
    apply_retention,
    delete_backup,
    retention_decisions,
    select_expired,
)
from airflow_rbak.storage import MemoryStorage, open_storage

DAY = 86_400_000
NOW = 100 * DAY


def complete(backup_id: str, day: int) -> BackupSummary:
    return BackupSummary(backup_id, "complete", created_at=day * DAY, completed_at=day * DAY + 1000)


BACKUPS = [complete("d90", 90), complete("d95", 95), BackupSummary("d96-broken", "incomplete", created_at=96 * DAY),
           BackupSummary("stray", "no-manifest"), complete("d98", 98), complete("d99", 99)]


@pytest.mark.parametrize(
    ("policy", "expired"),
    [
        (RetentionPolicy(), []),
        (RetentionPolicy(keep_last=2), ["d90", "d95"]),
        (RetentionPolicy(keep_last=10), []),
        (RetentionPolicy(max_age_days=3), ["d90", "d95"]),
        (RetentionPolicy(max_age_days=7), ["d90"]),
        (RetentionPolicy(keep_last=1, max_age_days=6), ["d90"]),  # kept when any rule keeps it
    ],
)
def test_only_complete_superseded_backups_expire(policy, expired):
    assert select_expired(BACKUPS, policy, now_ms=NOW, protect="d99") == expired


def test_the_backup_just_written_is_never_removed_even_when_it_is_not_the_newest():
    assert "d95" not in select_expired(BACKUPS, RetentionPolicy(keep_last=1), now_ms=NOW, protect="d95")


def test_the_newest_complete_backup_survives_an_age_limit_it_exceeds():
    assert select_expired(BACKUPS, RetentionPolicy(max_age_days=0.5), now_ms=200 * DAY, protect="other") == ["d90", "d95", "d98"]


@pytest.mark.parametrize("value", [{"keep_last": 0}, {"max_age_days": -1}, {"keep": 3}])
def test_bad_settings_are_refused_with_the_setting_named(value):
    with pytest.raises(ConfigurationError, match="keep_last|max_age_days"):
        RetentionPolicy.from_json(value)


def test_apply_removes_every_object_of_an_expired_backup_and_nothing_else(tmp_path):
    storage = open_storage((tmp_path / "b").as_uri())
    store = ManifestStore(storage)
    for day, done in ((1, True), (2, False), (3, True)):
        store.save(BackupManifest(f"b{day}", day * DAY, "0", completed_at=day * DAY + 1 if done else None))
        storage.put(f"b{day}/queues/x/segment-1.rbak.zst", b"data")

    removed = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b3").deleted

    assert removed == ["b1"]
    assert store.backup_ids() == ["b2", "b3"]
    assert delete_backup(storage, "b2") == 2 and store.backup_ids() == ["b3"]


def test_every_backup_retention_keeps_has_a_reason_and_the_removed_have_none():
    reasons = retention_decisions(BACKUPS, RetentionPolicy(keep_last=2), now_ms=NOW, protect="d99")

    assert reasons == {"d90": None, "d95": None, "d96-broken": "incomplete: left to a human",
                       "stray": "no-manifest: left to a human", "d98": "among the newest 2 complete backups (keep_last)",
                       "d99": "the backup just written"}


def test_a_retired_folder_loses_only_what_no_backup_lists_and_nothing_without_a_rule(tmp_path):
    # Given a retired folder (no manifest, only segments) of which a complete backup lists one segment
    storage = open_storage((tmp_path / "b").as_uri())
    listed, unlisted = "old/queues/v/s/segment-0001.zst", "old/queues/v/s/segment-0002.zst"
    for key in (listed, unlisted):
        storage.put(key, b"data")
    segment = SegmentMetadata(listed, 1, 0, 4, 0, None, None, "0" * 64)
    ManifestStore(storage).save(BackupManifest("b3", 3 * DAY, "0", completed_at=3 * DAY + 1, extensions={"depends_on": ["old"]},
                                               queues=[QueueBackup("v", "s", "stream", [segment])]))

    # When retention runs without a rule, then with one
    apply_retention(storage, RetentionPolicy(), now_ms=NOW, protect="b3")
    untouched = sorted(i.key for i in storage.list("old/"))
    apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b3")

    # Then nothing is deleted without a rule; with one, only the segment no backup lists
    assert untouched == [listed, unlisted]
    assert [i.key for i in storage.list("old/")] == [listed]


def stream_entry(backup_id: str, first: int, last: int) -> QueueBackup:
    """Stream v/s as a backup captured it: one segment of its own holding offsets ``first..last``."""
    segment = SegmentMetadata(f"{backup_id}/queues/v/s/segment-0001.zst", 1, last - first + 1, 4, 0, None, None, "0" * 64)
    return QueueBackup("v", "s", "stream", [segment], message_count=last - first + 1,
                       extensions={"stream_offsets": {"first": first, "last": last}})


def test_a_running_backup_keeps_the_base_it_may_continue_until_it_lists_it_then_retention_keeps_what_it_lists():
    # Given a complete stream backup b1, a run r3 in progress (its lock held, its manifest incomplete)
    # that will continue b1's stream, and a newer complete backup b2 of other queues
    storage = MemoryStorage()
    store = ManifestStore(storage)
    store.save(BackupManifest("b1", 1 * DAY, "0", completed_at=1 * DAY + 1, queues=[stream_entry("b1", 0, 9)]))
    storage.put("b1/queues/v/s/segment-0001.zst", b"data")
    store.save(BackupManifest("r3", 2 * DAY, "0"))
    BackupLock(storage, "r3", "run r3").acquire()
    store.save(BackupManifest("b2", 3 * DAY, "0", completed_at=3 * DAY + 1, queues=[QueueBackup("v", "orders", "classic")]))

    # When b2's finalize applies retention keep_last 1 while r3 runs
    during = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2")

    # Then b1 stays whole, kept for the running backup
    assert during.deleted == [] and during.kept["b1"] == "holds streams that running backups (r3) may continue from"
    assert storage.exists("b1/manifest.json") and storage.exists("b1/queues/v/s/segment-0001.zst")

    # When r3 then completes (its chain linked to b1) and gives its lock back, and retention runs again
    storage.put("r3/queues/v/s/segment-0001.zst", b"data")
    finished = finish_backup(storage, "r3", [stream_entry("r3", 10, 19)])
    BackupLock(storage, "r3", "run r3").release()
    after = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="r3")

    # Then b1 goes, but the segment r3's chain lists stays, and every key r3 lists is there
    assert finished.extensions["depends_on"] == ["b1"] and after.deleted == ["b1"]
    assert after.segments_kept_for_chains == {"b1": 1}
    assert all(storage.exists(s.key) for q in finished.queues for s in q.segments)


def test_a_running_backup_does_not_hold_back_backups_without_streams():
    storage = MemoryStorage()
    store = ManifestStore(storage)
    store.save(BackupManifest("b1", 1 * DAY, "0", completed_at=1 * DAY + 1, queues=[QueueBackup("v", "orders", "classic")]))
    store.save(BackupManifest("r3", 2 * DAY, "0"))
    BackupLock(storage, "r3", "run r3").acquire()
    store.save(BackupManifest("b2", 3 * DAY, "0", completed_at=3 * DAY + 1))

    assert apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2").deleted == ["b1"]


def test_a_manifest_of_another_status_still_counts_as_staying_when_it_can_be_read():
    # Given a base whose segment only a backup of a status retention does not know lists
    storage = MemoryStorage()
    store = ManifestStore(storage)
    store.save(BackupManifest("b1", 1 * DAY, "0", completed_at=1 * DAY + 1, queues=[stream_entry("b1", 0, 9)]))
    storage.put("b1/queues/v/s/segment-0001.zst", b"data")
    store.save(BackupManifest("b2", 2 * DAY, "0", completed_at=2 * DAY + 1, extensions={"depends_on": ["b1"]},
                              queues=[stream_entry("b1", 0, 9)]))
    store.save(BackupManifest("b3", 3 * DAY, "0", completed_at=3 * DAY + 1))
    odd = [BackupSummary("b1", "complete", created_at=DAY, completed_at=DAY + 1),
           BackupSummary("b2", "from-the-future", created_at=2 * DAY), BackupSummary("b3", "complete", created_at=3 * DAY)]

    needed, all_readable = _needed_keys(storage, odd, {"b1"})

    assert needed == {"b1/queues/v/s/segment-0001.zst": {"b2"}} and all_readable


def test_a_stray_folder_whose_name_is_no_backup_id_is_not_taken_for_a_running_backup():
    storage = MemoryStorage()
    two = ManifestStore(storage)
    for day in (1, 2):
        two.save(BackupManifest(f"b{day}", day * DAY, "0", completed_at=day * DAY + 1))
    storage.put("not an id/notes.txt", b"left by hand")

    assert apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=NOW, protect="b2").deleted == ["b1"]
    assert storage.exists("not an id/notes.txt")
