"""An archive's id says it is one, and no snapshot may take such an id: a recovery tells them apart by it."""

from __future__ import annotations

import pytest

from airflow_rbak.backup.run import BackupSettings
from airflow_rbak.codec.journal_layout import archive_id, is_archive_id, vhost_tag
from airflow_rbak.exceptions import ConfigurationError


def test_an_archive_id_names_its_time_and_its_vhost_and_sorts_by_time():
    first, later = archive_id("prod", 1_764_400_000_000), archive_id("prod", 1_764_400_000_001)
    assert first == f"journal-20251129T070640000000Z-{vhost_tag('prod')}" and first < later
    assert is_archive_id(first) and not is_archive_id("nightly-2025-11-29")
    # the whole shape, not the prefix: another tool's backup may be named journal-...
    for other in ("journal-weekly", "journal-20251129T070640000000Z", f"{first}-x", first.upper(), f" {first}",
                  f"journal-20251129T07064000000Z-{vhost_tag('prod')}", f"{first}\n"):
        assert not is_archive_id(other), other
    assert vhost_tag("prod") != vhost_tag("prod2") and len(vhost_tag("/")) == 12


def test_a_backup_refuses_an_id_that_names_a_journal_archive(tmp_path):
    with pytest.raises(ConfigurationError, match="names the journal's archives"):
        BackupSettings("journal-20251129T070640000000Z-abc", (tmp_path / "b").as_uri())
    with pytest.raises(ConfigurationError, match="names the journal's archives"):
        BackupSettings("journal-weekly", (tmp_path / "b").as_uri())
    assert BackupSettings("journal", (tmp_path / "b").as_uri()).backup_id == "journal"
