"""FileStorage behaviour that only a filesystem has: temp files, directories, symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_rbak.storage import (
    FileStorage,
    InvalidKeyError,
    MissingLocationError,
    ObjectNotFoundError,
    StorageError,
)
from airflow_rbak.storage.atomic import TEMP_PREFIX


def _files_on_disk(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _dirs_on_disk(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "backups"


@pytest.fixture
def storage(root: Path) -> FileStorage:
    return FileStorage(root)


def test_given_a_new_storage_when_opened_then_nothing_is_created_until_the_first_put(
    storage: FileStorage, root: Path
) -> None:
    assert not root.exists()
    assert list(storage.list()) == []

    storage.put("a/b", b"x")

    assert (root / "a" / "b").read_bytes() == b"x"


def test_given_a_missing_root_when_checked_then_missing_until_the_first_put_creates_it(
    storage: FileStorage, root: Path
) -> None:
    with pytest.raises(MissingLocationError, match="does not exist"):
        storage.check_location()

    storage.put("a", b"x")

    storage.check_location()


def test_given_a_root_that_is_a_file_when_checked_then_missing_location_error(storage: FileStorage, root: Path) -> None:
    root.write_bytes(b"not a folder")

    with pytest.raises(MissingLocationError, match="is not a folder"):
        storage.check_location()


def test_given_many_puts_when_done_then_only_object_files_are_on_disk(storage: FileStorage, root: Path) -> None:
    for i in range(20):
        storage.put(f"seg/{i % 3}", bytes([i]) * 1000)

    assert _files_on_disk(root) == ["seg/0", "seg/1", "seg/2"]


def test_given_a_write_that_fails_before_rename_then_the_old_object_and_no_temp_file_remain(
    storage: FileStorage, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage.put("manifest", b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError) as raised:
        storage.put("manifest", b"new")

    assert raised.value.key == "manifest"
    assert "manifest" in str(raised.value)
    monkeypatch.undo()
    assert storage.get("manifest") == b"old"
    assert _files_on_disk(root) == ["manifest"]


def test_given_a_leftover_temp_file_when_listing_then_it_is_not_an_object(storage: FileStorage, root: Path) -> None:
    """Given a crash left a temp file behind, it must not appear as a backup object."""
    storage.put("dir/real", b"1")
    (root / "dir" / f"{TEMP_PREFIX}real.abc123").write_bytes(b"partial")

    assert [info.key for info in storage.list()] == ["dir/real"]


def test_given_a_key_named_like_a_temp_file_when_used_then_invalid_key_error(storage: FileStorage) -> None:
    with pytest.raises(InvalidKeyError):
        storage.put(f"dir/{TEMP_PREFIX}x", b"1")


def test_given_nested_objects_when_the_last_in_a_directory_is_deleted_then_empty_parents_go_but_the_root_stays(
    storage: FileStorage, root: Path
) -> None:
    storage.put("a/b/c/one", b"1")
    storage.put("a/keep", b"2")

    storage.delete("a/b/c/one")

    assert _dirs_on_disk(root) == ["a"]
    assert _files_on_disk(root) == ["a/keep"]

    storage.delete("a/keep")

    assert root.is_dir()
    assert list(root.iterdir()) == []


def test_given_a_symlink_inside_the_root_pointing_outside_when_used_then_invalid_key_error(
    storage: FileStorage, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"do not touch")
    storage.put("placeholder", b"")
    (root / "escape").symlink_to(outside, target_is_directory=True)

    for operation in (lambda: storage.put("escape/victim", b"evil"), lambda: storage.delete("escape/victim"),
                      lambda: storage.get("escape/victim")):
        with pytest.raises(InvalidKeyError):
            operation()

    assert (outside / "victim").read_bytes() == b"do not touch"
    assert [info.key for info in storage.list()] == ["placeholder"]  # symlinks are not followed


def test_given_a_root_that_is_itself_a_symlink_when_used_then_it_works(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    storage = FileStorage(tmp_path / "link")

    storage.put("a/b", b"ok")

    assert (real / "a" / "b").read_bytes() == b"ok"


def test_given_a_key_that_is_a_directory_when_read_then_not_found(storage: FileStorage) -> None:
    storage.put("a/b", b"1")

    with pytest.raises(ObjectNotFoundError):
        storage.get("a")
    with pytest.raises(ObjectNotFoundError):
        storage.stat("a")
    storage.delete("a")  # not an object, so nothing to delete
    assert storage.get("a/b") == b"1"


def test_given_a_key_that_is_a_directory_when_put_then_storage_error_names_the_key(storage: FileStorage) -> None:
    """A filesystem cannot hold both ``a`` and ``a/b``; the error must say which key collided."""
    storage.put("a/b", b"1")

    with pytest.raises(StorageError) as raised:
        storage.put("a", b"2")

    assert not isinstance(raised.value, ObjectNotFoundError)
    assert raised.value.key == "a"


def test_given_a_relative_root_when_opened_then_url_is_an_absolute_file_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    storage = FileStorage("rel/dir")

    assert storage.url == f"file://{tmp_path}/rel/dir"
    storage.put("k", b"v")
    assert (tmp_path / "rel" / "dir" / "k").read_bytes() == b"v"


def test_given_a_stored_object_when_put_then_the_file_is_private_to_its_owner(storage: FileStorage, root: Path) -> None:
    storage.put("secret", b"message bodies")

    assert (root / "secret").stat().st_mode & 0o077 == 0
