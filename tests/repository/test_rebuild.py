"""A lost manifest is rebuilt from the segments alone, and the result validates deeply."""

from __future__ import annotations

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.repository.sample import build_sample_backup


def _segments(manifest):
    return [(q.vhost, q.name, [s.to_json() for s in q.segments]) for q in manifest.queues]


def test_a_deleted_manifest_is_rebuilt_with_the_same_queues_segments_and_totals(location):
    storage = open_storage(location)
    original = build_sample_backup(storage)
    storage.delete(manifest_key("sample-1"))

    result = rebuild_manifest(storage, "sample-1")

    rebuilt = ManifestStore(storage).load("sample-1")
    assert result.key == manifest_key("sample-1") and result.unrecovered == []
    assert sorted(_segments(rebuilt)) == sorted(_segments(original))
    assert {(q.vhost, q.name, q.queue_type, q.message_count) for q in rebuilt.queues} == {
        (q.vhost, q.name, q.queue_type, q.message_count) for q in original.queues
    }
    assert (rebuilt.total_messages, rebuilt.total_segments, rebuilt.total_bytes) == (
        original.total_messages, original.total_segments, original.total_bytes,
    )
    assert rebuilt.definitions.to_json() == original.definitions.to_json()
    assert "created_at" in rebuilt.extensions["rebuilt"]["unknown_fields"]
    assert validate_backup(storage, "sample-1", deep=True).valid


def test_an_existing_manifest_is_kept_and_the_rebuild_is_written_beside_it(location):
    storage = open_storage(location)
    build_sample_backup(storage)
    before = storage.get(manifest_key("sample-1"))

    result = rebuild_manifest(storage, "sample-1")

    assert result.key == "sample-1/manifest.rebuilt.json"
    assert storage.get(manifest_key("sample-1")) == before


def test_a_damaged_segment_is_left_out_and_named(location):
    storage = open_storage(location)
    original = build_sample_backup(storage)
    victim = original.queues[0].segments[-1].key
    storage.put(victim, storage.get(victim)[:-1])
    storage.delete(manifest_key("sample-1"))

    result = rebuild_manifest(storage, "sample-1")

    assert len(result.unrecovered) == 1 and result.unrecovered[0].startswith(f"{victim}: ")
    assert result.manifest.total_segments == original.total_segments - 1
    assert result.manifest.extensions["rebuilt"]["unrecovered"] == result.unrecovered
