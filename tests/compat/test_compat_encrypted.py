"""An encrypted location written before locations had an identity stays readable and writable as it was.

``backups/encrypted-v1`` was sealed once by ``scripts/make_compat_encrypted.py`` with the first encrypted version
(envelope 1, a marker without ``location_id``), from ``backups/v1``, under the public test key ``COMPAT_KEYS``. It
is never regenerated.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.encrypted import MAGIC, MARKER_KEY
from airflow_rbak.storage.keyring import parse_keyring
from tests.compat.messages import FULL, INCREMENTAL

STORED = Path(__file__).parent / "backups" / "encrypted-v1" / "location"
#: The public test key it was sealed with (scripts/make_compat_encrypted.py's).
COMPAT_KEYS = "compat-1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


@pytest.fixture
def location(tmp_path: Path) -> str:
    shutil.copytree(STORED, tmp_path / "location")
    return (tmp_path / "location").as_uri()


def test_the_stored_location_is_as_that_version_wrote_it():
    marker = json.loads((STORED / MARKER_KEY).read_text())
    manifest = (STORED / FULL / "manifest.json").read_bytes()

    assert "location_id" not in marker and manifest.startswith(MAGIC) and manifest[len(MAGIC)] == 1


def test_it_lists_validates_deep_and_takes_new_objects_as_before(location, monkeypatch, capsys):
    monkeypatch.setenv("RBAK_ENCRYPTION_KEYS", COMPAT_KEYS)
    keys = parse_keyring(COMPAT_KEYS)
    storage = open_storage(location, keyring=keys)

    assert {b.backup_id: b.status for b in list_backups(storage)} == {FULL: "complete", INCREMENTAL: "complete"}
    for backup_id in (FULL, INCREMENTAL):
        assert main(["validate", "--deep", "--path", location, "--backup-id", backup_id]) == 0
    storage.put("later-1/manifest.json", b"{}")
    raw = open_storage(location, keyring=None).inner
    assert raw.get("later-1/manifest.json")[len(MAGIC)] == 1  # still envelope 1: the location has no identity
    assert raw.get(MARKER_KEY) == (STORED / MARKER_KEY).read_bytes()
    assert "valid (deep" in capsys.readouterr().out


def test_rbak_copy_moves_it_to_a_new_location_that_is_bound_to_its_own_identity(location, tmp_path, monkeypatch):
    # the documented way to bind an old location: copy its backups to a new one, which re-seals every object
    monkeypatch.setenv("RBAK_ENCRYPTION_KEYS", COMPAT_KEYS)
    target = (tmp_path / "bound").as_uri()

    assert main(["copy", location, target]) == 0

    bound = open_storage(target, keyring=parse_keyring(COMPAT_KEYS))
    assert bound.location_id is not None
    assert open_storage(target, keyring=None).inner.get(f"{FULL}/manifest.json")[len(MAGIC)] == 2
    for backup_id in (FULL, INCREMENTAL):
        assert validate_backup(bound, backup_id, deep=True).defects == []
