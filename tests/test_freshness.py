"""The freshness check: a location's newest complete backup must have finished within ``max_age_hours``."""

from __future__ import annotations

import pytest

from airflow_rbak.codec import BackupManifest
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.freshness import HOUR_MS, StaleBackupError, check_freshness
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage

NOW = 1_800_000_000_000


def storage_with(*backups: tuple[str, float, bool]):
    """A location holding backups as (id, hours ago they finished, complete)."""
    storage = open_storage("memory://")
    for backup_id, hours_ago, complete in backups:
        finished = NOW - int(hours_ago * HOUR_MS)
        ManifestStore(storage).save(BackupManifest(backup_id, finished - 1000, "0", completed_at=finished if complete else None))
    return storage


def test_a_backup_that_finished_within_the_threshold_passes():
    found = check_freshness(storage_with(("old", 50, True), ("new", 2, True)), 26, NOW)

    assert (found.backup_id, found.age_hours, found.fresh) == ("new", 2.0, True)


def test_the_newest_complete_backup_older_than_the_threshold_fails_naming_it_and_its_age():
    # an incomplete newer backup does not count
    storage = storage_with(("done", 30, True), ("running", 1, False))

    with pytest.raises(StaleBackupError, match=r"newest complete backup done finished 30.0 h ago \(allowed: 26 h\)"):
        check_freshness(storage, 26, NOW)


def test_a_location_without_any_complete_backup_fails():
    with pytest.raises(StaleBackupError, match="holds no complete backup"):
        check_freshness(storage_with(("running", 1, False)), 26, NOW)


def test_a_threshold_of_zero_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        check_freshness(storage_with(), 0, NOW)
