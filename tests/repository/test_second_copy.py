"""A second copy: complete backups copied whole, chains and all, verified at the destination, manifest last.

Each scenario runs from a folder to loopback S3 (moto) and from S3 to Azure Blob Storage (Azurite). The
source holds ``sample-1`` and ``sample-2`` (whose stream continues ``sample-1``'s) and ``bad-1``, complete by
its listing but with one segment's bytes changed (same size: only reading it shows the damage).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator

import pytest

from airflow_rbak.cli.main import main as rbak
from airflow_rbak.codec import BackupManifest
from airflow_rbak.freshness import measure_freshness
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy
from airflow_rbak.repository.second_copy import copy_backups
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectInfo, Storage, TransientStorageError
from tests.repository.sample import STREAM, build_sample_backup, chained


@pytest.fixture(params=["file-to-s3", "s3-to-azure"])
def places(request: pytest.FixtureRequest, tmp_path) -> tuple[str, str]:
    """(source URL, destination URL): a folder and a loopback S3 bucket, or that bucket and an Azurite container."""
    if request.param == "file-to-s3":
        return (tmp_path / "source").as_uri(), request.getfixturevalue("s3_storage_url")
    return request.getfixturevalue("s3_storage_url"), request.getfixturevalue("azure_storage_url")


def small_chain(url: str) -> Storage:
    """sample-1 (three queues, definitions) and sample-2, whose stream continues sample-1's: a few dozen objects."""
    storage = open_storage(url)
    base = build_sample_backup(storage, "sample-1", segment_max_bytes=16384)
    base.queue(*STREAM).extensions["stream_offsets"] = {"first": 0, "last": 11, "last_fingerprint": None}
    ManifestStore(storage).save(base)
    chained(storage, "sample-1", "sample-2", base.created_at + 1000)
    return storage


def damaged_source(url: str) -> Storage:
    """sample-1, sample-2 (a chain) and bad-1, whose first segment has one byte changed at its stored size."""
    storage = small_chain(url)
    bad = build_sample_backup(storage, "bad-1")
    key = bad.queues[0].segments[0].key
    data = bytearray(storage.get(key))
    data[-3] ^= 0xFF
    storage.put(key, bytes(data))
    return storage


def statuses(storage: Storage) -> dict[str, str]:
    return {b.backup_id: b.status for b in list_backups(storage)}


def test_complete_backups_are_copied_verified_once_and_a_damaged_one_is_named_and_not_copied(places):
    # Given a source with a chain and a damaged backup, and an empty destination
    source, destination = damaged_source(places[0]), open_storage(places[1])
    now = ManifestStore(source).load("sample-2").completed_at + 1000
    fresh_before = measure_freshness(destination, 26, now_ms=now)

    # When they are copied, then copied again
    first = copy_backups(source, destination)
    second = copy_backups(source, destination)

    # Then the chain is at the destination, complete and valid there; bad-1 is refused by name and absent
    assert first.ids("copied") == ["sample-1", "sample-2"] and first.ids("refused") == ["bad-1"]
    (refusal,) = [b.reason for b in first.backups if b.backup_id == "bad-1"]
    assert "bad-1/queues/" in refusal and "damaged at the source" in refusal
    assert statuses(destination) == {"sample-1": "complete", "sample-2": "complete"}
    assert not list(destination.list("bad-1/"))
    for backup_id in ("sample-1", "sample-2"):
        assert validate_backup(destination, backup_id, deep=True).defects == []
        assert destination.get(f"{backup_id}/manifest.json") == source.get(f"{backup_id}/manifest.json")
    # and the second run copies nothing and says so
    assert second.ids("already there") == ["sample-1", "sample-2"]
    assert sum(b.objects_copied for b in second.backups) == 0
    assert "(nothing to copy)" in second.describe() and "refused 1: bad-1" in second.describe()
    # and the copy location is checked for freshness on its own: stale (empty) before, as fresh as its source after
    fresh = measure_freshness(destination, 26, now_ms=now)
    assert not fresh_before.fresh and fresh_before.backup_id is None
    newest = max(("sample-1", "sample-2"), key=lambda b: ManifestStore(source).load(b).completed_at or 0)
    assert fresh.fresh and fresh.backup_id == newest


class FailsAfterPuts(Storage):
    """A destination that breaks (a transient fault) after ``allowed`` writes of backup objects, as a lost network
    would."""

    def __init__(self, inner: Storage, allowed: int) -> None:
        self.inner, self.allowed, self.url = inner, allowed, inner.url

    def _spend(self, key: str) -> None:
        if "/" not in key:  # the destination's chain lock, at its root: not an object of a backup
            return
        if self.allowed <= 0:
            raise TransientStorageError(f"{key}: connection lost (test)", key)
        self.allowed -= 1

    def put(self, key: str, data: bytes) -> None:
        self._spend(key)
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.inner.get_range(key, offset, length)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._spend(key)
        return self.inner.put_if_absent(key, data)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        return self.inner.read_tagged(key)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        return self.inner.replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        return self.inner.delete_if_unchanged(key, tag)


def test_a_copy_interrupted_half_way_is_never_complete_and_the_next_run_resumes_it(places):
    # Given a source chain whose first backup has a few dozen objects
    source, destination = small_chain(places[0]), open_storage(places[1])
    objects = len(list(source.list("sample-1/"))) - 1  # its manifest is written last
    half = objects // 2

    # When the destination fails after half of them were written
    with pytest.raises(TransientStorageError, match="connection lost"):
        copy_backups(source, FailsAfterPuts(destination, half), workers=1)
    interrupted = statuses(destination)
    resumed = copy_backups(source, destination)

    # Then the half copy was no complete backup; the re-run wrote only the other half, and verified everything
    assert interrupted == {"sample-1": "no-manifest"}
    assert resumed.ids("copied") == ["sample-1", "sample-2"]
    assert (resumed.backups[0].objects_already_there, resumed.backups[0].objects_copied) == (half, objects - half)
    assert statuses(destination) == {"sample-1": "complete", "sample-2": "complete"}
    assert validate_backup(destination, "sample-2", deep=True).defects == []


def test_a_backup_brings_its_chain_base_and_the_destinations_retention_applies(tmp_path):
    source = small_chain((tmp_path / "source").as_uri())

    # When only sample-2 is asked for: its base comes with it
    brought = copy_backups(source, open_storage((tmp_path / "a").as_uri()), ["sample-2"])
    # When the destination keeps only the newest backup: sample-1 is not copied, its segments sample-2 lists are
    kept_one = open_storage((tmp_path / "b").as_uri())
    pruned = copy_backups(source, kept_one, retention=RetentionPolicy(keep_last=1))
    again = copy_backups(source, kept_one, retention=RetentionPolicy(keep_last=1))

    assert [(b.backup_id, b.outcome, b.brought_by) for b in brought.backups] == [
        ("sample-1", "copied", "sample-2"), ("sample-2", "copied", None)]
    assert [(b.backup_id, b.outcome) for b in pruned.backups] == [("sample-1", "left out"), ("sample-2", "copied")]
    assert "the destination's retention would remove it" in pruned.backups[0].reason
    assert statuses(kept_one) == {"sample-1": "retired", "sample-2": "complete"}
    # and the next run copies nothing: the retired base is not brought back only to be removed again
    assert [(b.backup_id, b.outcome) for b in again.backups] == [("sample-1", "left out"), ("sample-2", "already there")]
    assert sum(b.objects_copied for b in again.backups) == 0
    assert validate_backup(kept_one, "sample-2", deep=True).defects == []


def test_rbak_copy_reports_each_backup_and_fails_when_one_was_refused(tmp_path, capsys):
    source_url, destination_url = (tmp_path / "source").as_uri(), (tmp_path / "copy").as_uri()
    damaged_source(source_url)

    code = rbak(["copy", source_url, destination_url])
    again = rbak(["copy", source_url, destination_url, "--backup-id", "sample-2"])
    out = capsys.readouterr().out.splitlines()

    assert code == 1 and again == 0
    assert out[0] == f"copied 2 backup(s) to {destination_url}, 0 already there; refused 1: bad-1"
    lines = sorted(out[1:4])
    assert lines[0].startswith("  copied sample-1: ") and lines[1].startswith("  copied sample-2: ")
    assert lines[2].startswith("  refused bad-1: bad-1/queues/") and "damaged at the source" in lines[2]
    assert out[4:] == [f"copied 0 backup(s) to {destination_url}, 1 already there (nothing to copy)",
                       "  already there sample-2: its manifest is at the destination, byte for byte"]
    assert os.path.exists(tmp_path / "copy" / "sample-2" / "manifest.json")


def test_a_copy_of_an_encrypted_location_is_sealed_with_the_same_keys_and_a_plain_destination_is_refused(
        tmp_path, monkeypatch, capsys):
    from airflow_rbak.storage.encrypted import KeyRequiredError
    from airflow_rbak.storage.keyring import new_key_text, parse_keyring

    key_text = new_key_text("k1")
    keys = parse_keyring(key_text)
    source_url, sealed_url, plain_url = ((tmp_path / name).as_uri() for name in ("source", "sealed", "plain"))
    small_chain(source_url)  # written plain, then sealed into an encrypted source by a copy of its own
    assert copy_backups(open_storage(source_url), open_storage((tmp_path / "enc").as_uri(), keyring=keys),
                        ["sample-2"]).ids("copied") == ["sample-1", "sample-2"]
    encrypted = open_storage((tmp_path / "enc").as_uri(), keyring=keys)

    report = copy_backups(encrypted, open_storage(sealed_url, keyring=keys), ["sample-2"])

    sealed = open_storage(sealed_url, keyring=keys)
    assert report.ids("copied") == ["sample-1", "sample-2"] and statuses(sealed) == statuses(encrypted)
    assert validate_backup(sealed, "sample-2", deep=True).defects == []
    with pytest.raises(KeyRequiredError):  # without the key the copy is as closed as its source
        list_backups(open_storage(sealed_url, keyring=None))
    stored = open_storage(sealed_url, keyring=None).inner.get("sample-1/manifest.json")
    assert stored.startswith(b"RBAKENC") and b"sample-1" not in stored

    build_sample_backup(open_storage(plain_url), "plain-1")  # a plain location already in use
    before = sorted(i.key for i in open_storage(plain_url).list())
    monkeypatch.setenv("RBAK_ENCRYPTION_KEYS", key_text)
    code = rbak(["copy", (tmp_path / "enc").as_uri(), plain_url])
    err = capsys.readouterr().err
    assert code != 0 and "holds unencrypted objects" in err and "a location is encrypted from its first object" in err
    assert "Traceback" not in err and key_text.split(":")[-1] not in err
    assert sorted(i.key for i in open_storage(plain_url).list()) == before  # nothing written into it


# --- A copy never changes what it did not write (issue 51) ---


def everything(storage: Storage) -> dict[str, str]:
    """Every key of a location with the SHA-256 of its stored bytes: the whole destination, to compare."""
    return {info.key: hashlib.sha256(storage.get(info.key)).hexdigest() for info in storage.list()}


def planted(source: Storage, backup_id: str, base: str, extra: list[tuple[str, bytes]]) -> BackupManifest:
    """A backup of the source's own whose manifest also lists ``extra`` objects (stored at the source as given) in
    the base's folder, with their true sizes and digests, and declares the base in depends_on."""
    manifest = build_sample_backup(source, backup_id)
    queue = manifest.queues[0]
    template = queue.segments[-1]
    for number, (key, data) in enumerate(extra, start=len(queue.segments) + 1):
        source.put(key, data)
        queue.segments.append(dataclasses.replace(template, key=key, sequence=number, size_bytes=len(data),
                                                  checksum=hashlib.sha256(data).hexdigest(), extensions={}))
    manifest.extensions["depends_on"] = [base]
    manifest.refresh_totals()
    ManifestStore(source).save(manifest)
    return manifest


def test_a_planted_manifest_whose_depends_on_lists_a_replaced_base_segment_changes_no_destination_object(
        tmp_path, location):
    # Given good-1 copied to the destination (a folder, or loopback S3)
    source, destination = open_storage((tmp_path / "source").as_uri()), open_storage(location)
    good = build_sample_backup(source, "good-1")
    assert copy_backups(source, destination).ids("copied") == ["good-1"]
    # and a compromised source: good-1's segment replaced (new size, new SHA-256), listed by a planted evil-1
    segment = good.queues[0].segments[0].key
    replaced = source.get(good.queues[1].segments[0].key) + b"planted"
    old, new = hashlib.sha256(destination.get(segment)).hexdigest(), hashlib.sha256(replaced).hexdigest()
    planted(source, "evil-1", "good-1", [(segment, replaced)])
    before = everything(destination)

    # When every backup of the source is copied, and evil-1 by name
    report = copy_backups(source, destination)
    asked = copy_backups(source, destination, ["evil-1"])

    # Then evil-1 is refused naming the key and both digests, and every destination object is as it was
    for run in (report, asked):
        assert run.ids("refused") == ["evil-1"] and run.ids("copied") == []
        (reason,) = [b.reason for b in run.backups if b.backup_id == "evil-1"]
        assert segment in reason and new in reason and old in reason and "kept as it is" in reason
    assert everything(destination) == before
    assert validate_backup(destination, "good-1", deep=True).defects == []


def test_a_refused_copy_removes_exactly_the_objects_it_created_even_in_a_base_folder(tmp_path, location):
    # Given good-1 at the destination, and evil-2 at the source listing two of good-1's folder's objects: one the
    # destination holds with the same bytes, one new; and an own segment whose bytes match the manifest but are no
    # segment (so every object is created, and the validation at the destination refuses the backup)
    source, destination = open_storage((tmp_path / "source").as_uri()), open_storage(location)
    good = build_sample_backup(source, "good-1")
    copy_backups(source, destination)
    shared = good.queues[0].segments[1].key
    fresh = shared.rsplit("/", 1)[0] + "/segment-0099.zst"
    evil = planted(source, "evil-2", "good-1", [(shared, source.get(shared)), (fresh, source.get(shared))])
    own = evil.queues[1].segments[0]
    garbage = b"not a segment" * 10
    source.put(own.key, garbage)
    own.size_bytes, own.checksum = len(garbage), hashlib.sha256(garbage).hexdigest()
    evil.refresh_totals()
    ManifestStore(source).save(evil)
    before = everything(destination)

    # When it is copied
    report = copy_backups(source, destination, ["evil-2"])

    # Then it is refused by the validation at the destination; the new object in good-1's folder and evil-2's own
    # objects are gone again, and the object it found there is kept: the destination is as it was
    assert report.ids("refused") == ["evil-2"] and "at the destination" in report.backups[0].reason
    assert report.backups[0].objects_already_there >= 1 and report.backups[0].objects_copied == 0
    assert everything(destination) == before and fresh not in before and shared in before


class RacedDestination(FailsAfterPuts):
    """A destination where another writer stores ``their`` bytes at ``key`` just before the copy creates it."""

    def __init__(self, inner: Storage, key: str, their: bytes) -> None:
        super().__init__(inner, allowed=10**9)
        self.key, self.their = key, their

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key == self.key:
            self.inner.put(key, self.their)
        return super().put_if_absent(key, data)


def test_an_object_another_writer_creates_first_is_never_overwritten_and_the_copy_is_refused_naming_both(tmp_path):
    # Given a source backup, and a destination where another writer wins the race for one of its segments
    source, destination = open_storage((tmp_path / "source").as_uri()), open_storage((tmp_path / "copy").as_uri())
    manifest = build_sample_backup(source, "sample-1")
    key = manifest.queues[0].segments[0].key
    their = b"another writer's bytes"

    # When it is copied
    report = copy_backups(source, RacedDestination(destination, key, their), workers=1)

    # Then the other writer's object stays, the copy is refused naming the key and both digests, and removes only
    # the objects it created itself
    assert report.ids("refused") == ["sample-1"]
    assert hashlib.sha256(their).hexdigest() in report.backups[0].reason
    assert manifest.queues[0].segments[0].checksum in report.backups[0].reason
    assert [i.key for i in destination.list("sample-1/")] == [key] and destination.get(key) == their


def test_an_encrypted_object_copied_without_resealing_is_refused_but_rbak_copy_reseals_and_validates_deep(
        tmp_path, monkeypatch, capsys):
    from airflow_rbak.storage.encrypted import ForeignLocationError
    from airflow_rbak.storage.keyring import new_key_text, parse_keyring

    # Given two encrypted locations sharing their keys, the first holding a chain
    key_text = new_key_text("k1")
    keys = parse_keyring(key_text)
    first_url, second_url = (tmp_path / "first").as_uri(), (tmp_path / "second").as_uri()
    copy_backups(small_chain((tmp_path / "plain").as_uri()), open_storage(first_url, keyring=keys))
    first, second = open_storage(first_url, keyring=keys), open_storage(second_url, keyring=keys)
    second.put("other-1/notes", b"marks the second location with its own identity")
    key = "sample-1/manifest.json"

    # When an object's stored bytes are copied across as they are
    open_storage(second_url, keyring=None).inner.put(key, open_storage(first_url, keyring=None).inner.get(key))

    # Then the second location refuses it, naming itself and the object
    with pytest.raises(ForeignLocationError) as caught:
        second.get(key)
    assert key in str(caught.value) and second_url in str(caught.value)
    assert first.location_id != second.location_id
    open_storage(second_url, keyring=None).inner.delete(key)

    # and rbak copy between them re-seals every object for the second location, which validates it deep
    monkeypatch.setenv("RBAK_ENCRYPTION_KEYS", key_text)
    assert rbak(["copy", first_url, second_url]) == 0, capsys.readouterr().err
    assert statuses(second) == {"sample-1": "complete", "sample-2": "complete", "other-1": "no-manifest"}
    for backup_id in ("sample-1", "sample-2"):
        assert validate_backup(second, backup_id, deep=True).defects == []
