"""A location holding snapshots and a journal's archives: the archives are listed as what they are, and never taken
for a snapshot (``latest``, freshness, retention's rules); retention removes only the archives no recovery can use."""

from __future__ import annotations

import time

from airflow_rbak.codec import BackupRecord
from airflow_rbak.codec.journal_layout import JOURNAL_QUEUE, archive_id
from airflow_rbak.freshness import measure_freshness
from airflow_rbak.repository.catalog import list_backups, resolve_backup_id
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter

HOUR = 3_600_000


def _write(storage, backup_id: str, created: int, completed: int, vhost: str = "prod", journal: bool = False) -> str:
    writer = BackupWriter(storage, backup_id)
    sink = writer.queue(vhost, JOURNAL_QUEUE if journal else "orders", queue_type="quorum")
    sink.add(BackupRecord(b"m", routing_key="orders", backed_up_at=created, source_queue="orders", source_vhost=vhost))
    sink.close()
    if journal:
        writer.manifest.extensions["journal"] = {"vhost": vhost, "previous": None, "from": created, "to": completed,
                                                 "messages": 1, "redelivered": 0, "gaps": [], "uncovered": []}
    manifest = writer.finish()
    manifest.created_at, manifest.completed_at = created, completed
    ManifestStore(storage).save(manifest)
    return backup_id


def _a_snapshot_then_two_archives(tmp_path):
    """A location holding a snapshot 10 hours old, then two archives of vhost prod an hour apart."""
    storage = open_storage((tmp_path / "loc").as_uri())
    now = int(time.time() * 1000)
    t = now - 10 * HOUR
    old = _write(storage, "nightly-1", t, t + 100)
    a1 = _write(storage, archive_id("prod", t + HOUR), t + HOUR, t + HOUR + 10, journal=True)
    a2 = _write(storage, archive_id("prod", t + 2 * HOUR), t + 2 * HOUR, t + 2 * HOUR + 10, journal=True)
    return storage, now, t, old, a1, a2


def test_archives_are_never_a_snapshot_and_retention_removes_only_those_no_recovery_can_use(tmp_path):
    storage, now, t, old, a1, a2 = _a_snapshot_then_two_archives(tmp_path)
    other = _write(storage, archive_id("test", t + HOUR), t + HOUR, t + HOUR + 10, vhost="test", journal=True)
    new = _write(storage, "nightly-2", t + 3 * HOUR, t + 3 * HOUR + 100)
    a3 = _write(storage, archive_id("prod", t + 4 * HOUR), t + 4 * HOUR, t + 4 * HOUR + 10, journal=True)
    a4 = _write(storage, archive_id("prod", t + 5 * HOUR), t + 5 * HOUR, t + 5 * HOUR + 10, journal=True)

    listed = {s.backup_id: s.to_json()["journal_archive"] for s in list_backups(storage)}
    assert listed == {old: False, new: False, a1: True, a2: True, a3: True, a4: True, other: True}
    assert resolve_backup_id(storage, "latest") == new  # a4 is newer, and an archive
    assert measure_freshness(storage, 24, now).backup_id == new

    result = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=now, protect=None)

    # the rules counted snapshots only: the newest stays, the older goes; of the archives that completed before the
    # snapshot that stays, the newest of each vhost stays (a recovery from it may start in it), the rest go
    assert set(result.removed_because) == {old, a1}
    assert "no recovery to a point in time can use it" in result.removed_because[a1]
    assert {s.backup_id for s in list_backups(storage)} == {new, a2, a3, a4, other}


def test_a_backup_is_an_archive_by_its_whole_id_and_its_journal_addition_never_by_the_prefix_alone(tmp_path):
    storage, now, t, old, a1, a2 = _a_snapshot_then_two_archives(tmp_path)
    # another tool's complete backups: one named journal-..., one with an archive's whole id but no journal addition
    foreign = _write(storage, "journal-weekly-2025-48", t + 3 * HOUR, t + 3 * HOUR + 100)
    lookalike = _write(storage, archive_id("prod", t + 4 * HOUR), t + 4 * HOUR, t + 4 * HOUR + 100)

    listed = {s.backup_id: s.to_json()["journal_archive"] for s in list_backups(storage)}
    assert listed == {old: False, a1: True, a2: True, foreign: False, lookalike: False}
    assert resolve_backup_id(storage, "latest") == lookalike
    assert measure_freshness(storage, 24, now).backup_id == lookalike

    result = apply_retention(storage, RetentionPolicy(keep_last=2), now_ms=now, protect=None)

    # the snapshot rules keep the two newest snapshots (both another tool's); of the archives before the oldest kept,
    # the newest stays
    assert set(result.removed_because) == {old, a1}
    assert "no recovery to a point in time can use it" in result.removed_because[a1]
    assert {s.backup_id for s in list_backups(storage)} == {a2, foreign, lookalike}
