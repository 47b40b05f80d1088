"""Issue 14, Must show 4 (storage side): validate names objects a manifest borrows from another backup and leftover
interim compaction copies; rebuild reads each sequence once, so every message is in the rebuilt manifest once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_rbak.codec import iter_records
from airflow_rbak.codec.layout import interim_segment_key, manifest_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.ownership import foreign_objects, is_interim_copy
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.repository.sample import build_sample_backup


def borrow(storage, thief: str, owner: str, what: str) -> str:
    """Point ``thief``'s manifest at ``owner``'s first orders segment or its definitions; returns the borrowed key."""
    store = ManifestStore(storage)
    manifest, theirs = store.load(thief), store.load(owner)
    if what == "segment":
        mine = manifest.queue("/", "orders")
        mine.segments[0] = replace(theirs.queue("/", "orders").segments[0])
        key = mine.segments[0].key
    else:
        manifest.definitions = replace(theirs.definitions)
        key = manifest.definitions.key
    store.save(manifest)
    return key


@pytest.mark.parametrize("what", ["segment", "definitions"])
def test_validate_names_an_object_borrowed_from_another_backup(location, what):
    # Given two backups, and the second's manifest pointing at the first's segment (or definitions), checksums and all
    storage = open_storage(location)
    build_sample_backup(storage, "a-1")
    build_sample_backup(storage, "b-1")
    key = borrow(storage, "b-1", "a-1", what)
    assert key.startswith("a-1/")

    # When it is validated, quick and deep
    reports = [validate_backup(storage, "b-1", deep=deep) for deep in (False, True)]

    # Then each names the borrowed key as not an object of b-1 (and reads nothing from it)
    for report in reports:
        assert [d.key for d in report.defects] == [key], report.defects
        assert "not an object of backup 'b-1'" in report.defects[0].reason
    assert foreign_objects(ManifestStore(storage).load("b-1"))[0][0] == key


def test_a_leftover_interim_copy_is_named_by_validate_and_rebuild_counts_each_message_once(location):
    # Given a backup with a leftover interim compaction copy of a segment (a compaction stopped after writing it)
    storage = open_storage(location)
    original = build_sample_backup(storage, "c-1")
    first = original.queue("/", "orders").segments[0].key
    interim = interim_segment_key(first)
    storage.put(interim, storage.get(first))
    assert is_interim_copy(interim) and not is_interim_copy(first)

    # When it is validated, and its manifest is lost and rebuilt
    report = validate_backup(storage, "c-1", deep=True)
    storage.delete(manifest_key("c-1"))
    result = rebuild_manifest(storage, "c-1")

    # Then validate names the copy; the rebuilt manifest lists the canonical segments only, each message once
    assert [(d.key, "leftover interim compaction copy" in d.reason) for d in report.defects] == [(interim, True)]
    rebuilt = result.manifest
    assert {(q.vhost, q.name): [s.key for s in q.segments] for q in rebuilt.queues} == {
        (q.vhost, q.name): [s.key for s in q.segments] for q in original.queues}
    assert rebuilt.total_messages == original.total_messages
    ids = [r.properties.message_id for s in rebuilt.queue("/", "orders").segments for r in iter_records(storage.get(s.key), s.key)]
    assert ids == [f"orders-{i}" for i in range(240)]
    assert any(interim in line for line in result.unrecovered)


def test_an_interim_copy_whose_canonical_segment_is_gone_is_read_in_its_place(location):
    # Given a compaction stopped between its rounds: segment 1 exists only as its interim copy
    storage = open_storage(location)
    original = build_sample_backup(storage, "d-1")
    first = original.queue("/", "orders").segments[0].key
    storage.put(interim_segment_key(first), storage.get(first))
    storage.delete(first)
    storage.delete(manifest_key("d-1"))

    # When the manifest is rebuilt
    rebuilt = rebuild_manifest(storage, "d-1").manifest

    # Then sequence 1 is the interim copy, and the queue holds every message once
    orders = rebuilt.queue("/", "orders")
    assert orders.segments[0].key == interim_segment_key(first) and orders.message_count == 240
