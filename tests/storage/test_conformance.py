"""One conformance suite that every storage backend must pass, as restic runs one for all.

Each backend is opened through ``open_storage`` (so the retry wrapper is in
the path, as in production), once plain and once encrypted (``storage/encrypted.py``, every object sealed): a local directory, a private memory store, and
a fresh bucket on the loopback moto S3 server, reached over HTTP by boto3, a fresh container on Azurite
and a fresh bucket on fake-gcs-server (``tests/emulators.py``), reached by their clouds' own client libraries, and
a fresh shelf of ``memtest://``, the backend the test suite registers itself (``tests/storage/registered_backend.py``).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.storage import (
    InvalidKeyError,
    MissingLocationError,
    ObjectInfo,
    ObjectNotFoundError,
    Storage,
    open_storage,
)
from airflow_rbak.storage.encrypted import MAGIC
from airflow_rbak.storage.keyring import Keyring, new_key_text, parse_keyring
from tests.storage import registered_backend  # noqa: F401  (registers memtest://)

MIB = 1024 * 1024
BACKENDS = ["file", "memory", "memtest", pytest.param("s3", marks=pytest.mark.s3), pytest.param("azure", marks=pytest.mark.azure),
            pytest.param("gcs", marks=pytest.mark.gcs)]
UNUSUAL_KEYS = [
    "with space/file name.bin",
    "unicodé/日本語/ключ-🙂",
    "percent%20and%2F/100%",
    "query?and#hash/a+b=c&d;e,f~!'()*",
]
INVALID_KEYS = [
    *["", "../x", "a/../../x", "/abs", "a//b", "a/./b", "./a", "a/", "a\\b"],
    *["nul\x00", "line\nbreak", "tab\there", "del\x7f"],
]


def _random_bytes(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


#: Each backend plain, and through the encrypting decorator (storage/encrypted.py), which must keep every promise.
SEALING = ["plain", "encrypted"]


@pytest.fixture(params=SEALING)
def keyring(request: pytest.FixtureRequest) -> Keyring | None:
    """No key, or a keyring whose writing key is not its only one (as after a rotation)."""
    return parse_keyring(f"{new_key_text('new')},{new_key_text('old')}") if request.param == "encrypted" else None


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path, keyring: Keyring | None) -> Storage:
    """Open an empty backend of each kind, plain or encrypted."""
    if request.param == "file":
        return open_storage(f"file://{tmp_path / 'root'}", keyring=keyring)
    if request.param == "memory":
        return open_storage("memory://", keyring=keyring)
    if request.param == "memtest":
        return open_storage(f"memtest://{uuid.uuid4().hex}/backups", keyring=keyring)
    return open_storage(request.getfixturevalue(f"{request.param}_storage_url"), keyring=keyring)


def _keys(storage: Storage, prefix: str = "") -> list[str]:
    return [info.key for info in storage.list(prefix)]


# --- put / get ---------------------------------------------------------------------


def test_given_an_empty_object_when_put_then_get_returns_no_bytes_and_stat_size_zero(storage: Storage) -> None:
    storage.put("empty", b"")

    assert storage.get("empty") == b""
    assert storage.stat("empty") == ObjectInfo("empty", 0)
    assert storage.exists("empty")


def test_given_every_byte_value_when_put_then_get_returns_the_exact_bytes(storage: Storage) -> None:
    data = bytes(range(256)) * 3 + b"\r\n\x00\xff"

    storage.put("segments/bin", data)

    assert storage.get("segments/bin") == data


def test_given_five_mebibytes_when_put_then_get_and_stat_agree_byte_for_byte(storage: Storage) -> None:
    data = _random_bytes(5 * MIB)

    storage.put("big/object", data)

    assert storage.stat("big/object").size == 5 * MIB
    assert storage.get("big/object") == data


@pytest.mark.parametrize("key", UNUSUAL_KEYS)
def test_given_a_key_with_spaces_unicode_or_percent_when_put_then_get_and_list_use_the_same_key(
    storage: Storage, key: str
) -> None:
    storage.put(key, key.encode())

    assert storage.get(key) == key.encode()
    assert _keys(storage) == [key]
    assert storage.stat(key) == ObjectInfo(key, len(key.encode()))


def test_given_an_object_when_put_again_then_the_new_bytes_replace_the_old(storage: Storage) -> None:
    storage.put("manifest.json", b"first version, longer")

    storage.put("manifest.json", b"second")

    assert storage.get("manifest.json") == b"second"
    assert storage.stat("manifest.json").size == 6
    assert _keys(storage) == ["manifest.json"]


def test_given_a_bytearray_when_put_and_then_mutated_then_the_stored_object_is_unchanged(storage: Storage) -> None:
    buffer = bytearray(b"original")

    storage.put("k", buffer)  # type: ignore[arg-type]
    buffer[:] = b"mutated!"

    assert storage.get("k") == b"original"


_FORBIDDEN = "/\\\x7f" + "".join(map(chr, range(32)))
_SEGMENT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=_FORBIDDEN), min_size=1, max_size=12
).filter(lambda part: part not in (".", "..") and not part.startswith(".rbak-tmp-"))
VALID_KEYS = st.lists(_SEGMENT, min_size=1, max_size=4).map("/".join)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Plain bytes that start as an envelope does are refused by an unkeyed opener on purpose (storage/unkeyed.py, tested in
# test_encrypted.py): that is the unkeyed wrapper's promise, not the backend's, so the bytes here never start so.
@given(key=VALID_KEYS, data=st.binary(max_size=64).filter(lambda d: not d.startswith(MAGIC)))
def test_given_any_valid_key_when_put_then_get_list_and_delete_agree_on_it(
    storage: Storage, key: str, data: bytes
) -> None:
    storage.put(key, data)
    try:
        assert storage.get(key) == data
        assert list(storage.list()) == [ObjectInfo(key, len(data))]
    finally:
        storage.delete(key)
    assert _keys(storage) == []


# --- stat / exists / missing -------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 1000, 65537])
def test_given_objects_of_several_sizes_when_stat_then_size_is_exact(storage: Storage, size: int) -> None:
    storage.put(f"sized/{size}", _random_bytes(size))

    assert storage.stat(f"sized/{size}") == ObjectInfo(f"sized/{size}", size)


@pytest.mark.parametrize(
    "operation",
    [
        lambda s, k: s.get(k),
        lambda s, k: s.stat(k),
        lambda s, k: s.get_range(k, 0, 10),
    ],
    ids=["get", "stat", "get_range"],
)
def test_given_no_object_when_read_then_object_not_found_names_the_key(
    storage: Storage, operation: Callable[[Storage, str], object]
) -> None:
    storage.put("other/key", b"x")

    with pytest.raises(ObjectNotFoundError) as raised:
        operation(storage, "missing/key")

    assert raised.value.key == "missing/key"
    assert "missing/key" in str(raised.value)


def test_given_no_object_when_exists_then_false_and_after_put_true(storage: Storage) -> None:
    assert not storage.exists("a/b")

    storage.put("a/b", b"1")

    assert storage.exists("a/b")
    assert not storage.exists("a")  # a key prefix is not an object


# --- list ---------------------------------------------------------------------------

TREE = {
    "a/b/1": b"1",
    "a/b/2": b"22",
    "a/b/deep/3": b"333",
    "a/bc": b"4444",
    "a/c": b"",
    "a-b/x": b"5",
    "a.txt": b"6",
    "a0": b"7",
    "z": b"8",
}


@pytest.fixture
def tree(storage: Storage) -> Storage:
    """Store TREE, inserted in a shuffled order so sorting cannot come from insertion."""
    items = list(TREE.items())
    random.Random(3).shuffle(items)
    for key, data in items:
        storage.put(key, data)
    return storage


def test_given_a_tree_when_list_everything_then_all_keys_come_sorted_with_sizes(tree: Storage) -> None:
    # Code-point order: '-' < '.' < '/' < '0', so a naive per-directory walk gets this wrong.
    assert list(tree.list()) == [ObjectInfo(k, len(v)) for k, v in sorted(TREE.items())]
    assert _keys(tree)[:4] == ["a-b/x", "a.txt", "a/b/1", "a/b/2"]


def test_given_a_directory_prefix_when_list_then_only_its_objects_recursively(tree: Storage) -> None:
    assert _keys(tree, "a/b/") == ["a/b/1", "a/b/2", "a/b/deep/3"]


def test_given_a_prefix_ending_mid_segment_when_list_then_it_matches_as_a_string_prefix(tree: Storage) -> None:
    assert _keys(tree, "a/b") == ["a/b/1", "a/b/2", "a/b/deep/3", "a/bc"]
    assert _keys(tree, "a") == ["a-b/x", "a.txt", "a/b/1", "a/b/2", "a/b/deep/3", "a/bc", "a/c", "a0"]
    assert _keys(tree, "a/b/d") == ["a/b/deep/3"]


def test_given_a_prefix_matching_nothing_when_list_then_nothing(tree: Storage) -> None:
    assert _keys(tree, "nothing/") == []
    assert _keys(tree, "a/b/1/") == []
    assert _keys(tree, "zz") == []


def test_given_an_empty_store_when_list_then_nothing(storage: Storage) -> None:
    assert _keys(storage) == []


@pytest.mark.parametrize("prefix", ["../", "/a", "a//", "a/./", "a\\b"])
def test_given_an_invalid_prefix_when_list_then_invalid_key_error(storage: Storage, prefix: str) -> None:
    with pytest.raises(InvalidKeyError):
        list(storage.list(prefix))


# --- delete -------------------------------------------------------------------------


def test_given_an_object_when_deleted_then_it_is_gone_and_siblings_remain(tree: Storage) -> None:
    tree.delete("a/b/deep/3")

    with pytest.raises(ObjectNotFoundError):
        tree.get("a/b/deep/3")
    assert _keys(tree, "a/b/") == ["a/b/1", "a/b/2"]
    assert tree.get("a/b/2") == b"22"


def test_given_a_missing_object_when_deleted_twice_then_no_error(storage: Storage) -> None:
    storage.put("k", b"v")

    storage.delete("k")
    storage.delete("k")
    storage.delete("never/existed")

    assert _keys(storage) == []


def test_given_a_deleted_object_when_put_again_then_it_is_back(storage: Storage) -> None:
    storage.put("a/b/c", b"one")
    storage.delete("a/b/c")

    storage.put("a/b/c", b"two")

    assert storage.get("a/b/c") == b"two"



# --- put_if_absent ---------------------------------------------------------------


def test_given_no_object_when_put_if_absent_twice_then_only_the_first_creates_and_its_bytes_stay(storage: Storage) -> None:
    assert storage.put_if_absent("locks/a.json", b"first") is True
    assert storage.put_if_absent("locks/a.json", b"second") is False
    assert storage.get("locks/a.json") == b"first"
    storage.delete("locks/a.json")
    assert storage.put_if_absent("locks/a.json", b"third") is True and storage.get("locks/a.json") == b"third"


def test_given_a_tagged_read_when_the_object_changes_then_conditional_replace_and_delete_refuse(storage: Storage) -> None:
    storage.put("locks/b.json", b"mine")
    data, tag = storage.read_tagged("locks/b.json")
    assert data == b"mine"
    assert storage.replace_if_unchanged("locks/b.json", b"renewed", tag) is True
    assert storage.get("locks/b.json") == b"renewed"
    if storage.url.startswith("gcs:"):
        # fake-gcs-server ignores ifGenerationMatch on DELETE (it deletes whatever is there), so the refusal cannot be
        # shown on it; tests/storage/test_gcs.py checks that the precondition is sent, which GCS enforces.
        pass
    else:
        assert storage.delete_if_unchanged("locks/b.json", tag) is False  # the tag is of the old bytes
    assert storage.replace_if_unchanged("locks/b.json", b"stale", tag) is False
    _, fresh = storage.read_tagged("locks/b.json")
    assert storage.delete_if_unchanged("locks/b.json", fresh) is True and not storage.exists("locks/b.json")
    assert storage.delete_if_unchanged("locks/b.json", fresh) is False  # gone: nothing to delete
    assert storage.replace_if_unchanged("locks/b.json", b"x", fresh) is False and not storage.exists("locks/b.json")


def test_given_threads_racing_when_put_if_absent_then_exactly_one_wins(storage: Storage) -> None:
    if storage.url.startswith("s3:"):
        # moto checks If-None-Match and then writes, not atomically (measured: 1 of 200 eight-way races had two
        # winners), so this primitive cannot be raced on it; BackupLock's read-back is raced on S3 in
        # tests/reliability/test_lock.py.
        pytest.skip("moto's conditional put is not atomic")
    barrier, wins = threading.Barrier(6), []

    def race(i: int) -> None:
        barrier.wait()
        if storage.put_if_absent("locks/race.json", f"{i}".encode()):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(wins) == 1 and storage.get("locks/race.json") == f"{wins[0]}".encode()

# --- the location itself ----------------------------------------------------------


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3), pytest.param("azure", marks=pytest.mark.azure),
                        pytest.param("gcs", marks=pytest.mark.gcs)])
def missing_location(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """A backend whose location does not exist: a folder nobody made, a bucket nobody created (memory always exists)."""
    if request.param == "file":
        return open_storage(f"file://{tmp_path / 'no-such-folder'}", retries=0)
    if request.param == "azure":
        return open_storage(f"azure://rbak-never-created/backups?endpoint={request.getfixturevalue('azurite_server')}",
                            retries=0)
    if request.param == "gcs":
        return open_storage(f"gcs://rbak-never-created/backups?endpoint={request.getfixturevalue('gcs_server')}", retries=0)
    endpoint = request.getfixturevalue("s3_server")
    return open_storage(f"s3://rbak-never-created/backups?region=us-east-1&endpoint={endpoint}&path_style=true", retries=0)


def test_given_an_existing_empty_location_when_checked_then_it_passes_and_lists_nothing(storage: Storage) -> None:
    storage.put("made/then-removed", b"x")
    storage.delete("made/then-removed")

    storage.check_location()

    assert _keys(storage) == []


def test_given_a_location_that_does_not_exist_when_checked_then_missing_location_error_naming_it(
    missing_location: Storage,
) -> None:
    with pytest.raises(MissingLocationError) as raised:
        missing_location.check_location()

    assert ("no-such-folder" in str(raised.value)) or ("rbak-never-created" in str(raised.value))
    assert "\n" not in str(raised.value)


# --- invalid keys -------------------------------------------------------------------


@pytest.mark.parametrize("key", INVALID_KEYS)
@pytest.mark.parametrize(
    "operation",
    [
        lambda s, k: s.put(k, b"x"),
        lambda s, k: s.get(k),
        lambda s, k: s.stat(k),
        lambda s, k: s.delete(k),
        lambda s, k: s.get_range(k, 0, 1),
    ],
    ids=["put", "get", "stat", "delete", "get_range"],
)
def test_given_a_key_that_could_escape_the_root_when_used_then_invalid_key_error(
    storage: Storage, key: str, operation: Callable[[Storage, str], object]
) -> None:
    with pytest.raises(InvalidKeyError) as raised:
        operation(storage, key)

    assert raised.value.key == key
    assert _keys(storage) == []


# --- ranges and local files ---------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "length", "expected"),
    [(0, 4, b"0123"), (6, 100, b"6789"), (9, 1, b"9"), (10, 5, b""), (50, 5, b""), (3, 0, b"")],
)
def test_given_an_object_when_get_range_then_exactly_the_bytes_in_range(
    storage: Storage, offset: int, length: int, expected: bytes
) -> None:
    storage.put("r", b"0123456789")

    assert storage.get_range("r", offset, length) == expected


def test_given_an_empty_object_when_get_range_then_no_bytes(storage: Storage) -> None:
    storage.put("e", b"")

    assert storage.get_range("e", 0, 10) == b""


def test_given_a_local_file_when_put_file_and_get_file_then_the_copy_is_identical(
    storage: Storage, tmp_path: Path
) -> None:
    source = tmp_path / "index.sqlite"
    source.write_bytes(_random_bytes(3 * MIB + 17))
    target = tmp_path / "restored" / "index.sqlite"

    storage.put_file("index/index.sqlite", source)
    storage.get_file("index/index.sqlite", target)

    assert target.read_bytes() == source.read_bytes()
    assert storage.stat("index/index.sqlite").size == 3 * MIB + 17


def test_given_no_object_when_get_file_then_not_found_and_the_local_file_is_untouched(
    storage: Storage, tmp_path: Path
) -> None:
    target = tmp_path / "keep.bin"
    target.write_bytes(b"precious")

    with pytest.raises(ObjectNotFoundError):
        storage.get_file("missing", target)

    assert target.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir() if p.name != "root"] == ["keep.bin"]


# --- atomicity ----------------------------------------------------------------------


def test_given_a_writer_replacing_a_large_object_when_a_reader_loops_then_it_never_sees_a_partial_object(
    storage: Storage,
) -> None:
    """Given two versions of equal length, every read must be exactly one of them."""
    size = 4 * MIB
    versions = (b"A" * size, b"B" * size)
    storage.put("hot/object", versions[0])
    stop = threading.Event()
    seen: list[bytes] = []

    def read_until_stopped() -> None:
        while not stop.is_set():
            seen.append(storage.get("hot/object"))

    reader = threading.Thread(target=read_until_stopped)
    reader.start()
    try:
        deadline = time.monotonic() + 1.5
        writes = 0
        while writes < 6 or time.monotonic() < deadline and writes < 40:
            storage.put("hot/object", versions[writes % 2])
            writes += 1
    finally:
        stop.set()
        reader.join()

    bad = [(len(data), data[:1], data[-1:]) for data in seen if data not in versions]
    assert seen, "the reader never completed a read"
    assert not bad, f"{len(bad)} partial reads of {len(seen)} (length, first, last byte): {bad[:3]}"
    assert _keys(storage) == ["hot/object"]  # no temporary object ever lingers in the listing
