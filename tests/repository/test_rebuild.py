"""A lost manifest is rebuilt from the segments alone, and the result validates deeply."""

from __future__ import annotations

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.codec.independent_writer import QueueSpec, SegmentSpec, record, write_backup
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


#: Names another writer stores as they are: a ``/`` makes deeper folders, ``%`` and long names are not escaped.
FOREIGN_QUEUES = (("/", "team/orders"), ("a/b", "q%v2"), ("prod", "q" * 250), ("prod", "a b"), ("prod", "plain"))


def test_a_foreign_backup_with_names_stored_as_they_are_is_rebuilt_whole(tmp_path):
    root = tmp_path / "foreign"
    specs = [QueueSpec(vhost, name, segments=[
        SegmentSpec([record(bytes([q, i]) * 50, 1_767_225_600_000 + 10 * s + i, vhost, name, i + 1) for i in range(3)],
                    compression=1 + (s % 2), frames=2)
        for s in range(2)]) for q, (vhost, name) in enumerate(FOREIGN_QUEUES)]
    written = write_backup(root, "foreign-1", specs, created_at=1_767_225_000_000)
    storage = open_storage(root.as_uri())
    storage.delete(manifest_key("foreign-1"))

    result = rebuild_manifest(storage, "foreign-1")

    # Then every queue comes back under its own names, with the writer's segments exactly, and nothing is left out
    # but the definitions export the writer never made
    assert [u.split(":")[0] for u in result.unrecovered] == ["definitions"]
    assert {(q.vhost, q.name): [s.to_json() for s in q.segments] for q in result.manifest.queues} == {
        (q["vhost"], q["name"]): q["segments"] for q in written["queues"]}
    assert result.manifest.total_messages == written["total_messages"] == 30
    assert validate_backup(storage, "foreign-1", deep=True).valid


def test_a_segment_whose_records_name_another_queue_than_its_folder_is_left_out(tmp_path):
    root = tmp_path / "foreign"
    specs = [QueueSpec("prod", "team/orders", segments=[SegmentSpec([record(b"x", 1_767_225_600_000, "prod", "team/other", 1)])]),
             QueueSpec("prod", "kept", segments=[SegmentSpec([record(b"y", 1_767_225_600_000, "prod", "kept", 1)])])]
    write_backup(root, "foreign-2", specs, created_at=1_767_225_000_000)
    storage = open_storage(root.as_uri())
    storage.delete(manifest_key("foreign-2"))

    result = rebuild_manifest(storage, "foreign-2")

    assert [(q.vhost, q.name, q.message_count) for q in result.manifest.queues] == [("prod", "kept", 1)]
    assert any(u.startswith("foreign-2/queues/prod/team/orders/segment-0001.zst: 1 records name another queue")
               for u in result.unrecovered), result.unrecovered
