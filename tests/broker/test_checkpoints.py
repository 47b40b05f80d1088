"""CheckpointStore: the bookkeeping a re-run resumes from, kept in SQLite and mirrored to storage."""

from __future__ import annotations

from airflow_rbak.broker.checkpoints import CheckpointStore, QueueProgress
from airflow_rbak.codec.layout import state_key
from airflow_rbak.storage import open_storage


def progress(**changes: object) -> QueueProgress:
    base = QueueProgress("b1", "/", "orders", "classic", target_count=100)
    return QueueProgress(**{**base.__dict__, **changes})


def test_a_saved_checkpoint_reads_back_field_for_field(tmp_path):
    store = CheckpointStore(tmp_path / "offsets.db")
    saved = progress(staged_records=40, staged_bytes=4096, last_chunk=2, last_fingerprint="ab" * 16, completed=True,
                     stream_start_offset=5, stream_end_offset=99, stream_next_offset=45)

    store.save(saved)

    assert store.get("b1", "/", "orders") == saved
    assert store.get("b1", "/", "other") is None and store.get("b2", "/", "orders") is None


def test_later_saves_replace_earlier_ones(tmp_path):
    store = CheckpointStore(tmp_path / "offsets.db")
    store.save(progress(staged_records=10, last_chunk=1))

    store.save(progress(staged_records=20, last_chunk=2))

    assert (store.get("b1", "/", "orders").staged_records, store.get("b1", "/", "orders").last_chunk) == (20, 2)
    assert len(store.all("b1")) == 1


def test_a_rerun_on_another_machine_resumes_from_the_mirrored_database(tmp_path):
    # Given a capture that checkpointed into storage and then lost its machine
    storage = open_storage("memory://")
    first = CheckpointStore(tmp_path / "a" / "offsets.db", storage, "b1")
    first.save(progress(staged_records=30, last_chunk=3, last_fingerprint="f" * 32))
    first.close()
    assert storage.exists(state_key("b1"))

    # When the re-run opens a fresh local path for the same backup
    second = CheckpointStore(tmp_path / "b" / "offsets.db", storage, "b1")

    # Then it sees where the first run stopped
    assert second.get("b1", "/", "orders") == progress(staged_records=30, last_chunk=3, last_fingerprint="f" * 32)


def test_a_new_backup_starts_empty_even_when_storage_holds_another(tmp_path):
    storage = open_storage("memory://")
    CheckpointStore(tmp_path / "a.db", storage, "b1").save(progress())

    assert CheckpointStore(tmp_path / "b.db", storage, "b2").all("b2") == []


def test_all_lists_every_queue_of_one_backup_sorted(tmp_path):
    store = CheckpointStore(tmp_path / "offsets.db")
    for vhost, queue in [("v2", "a"), ("/", "z"), ("/", "b")]:
        store.save(progress(vhost=vhost, queue=queue))
    store.save(progress(backup_id="other"))

    assert [(p.vhost, p.queue) for p in store.all("b1")] == [("/", "b"), ("/", "z"), ("v2", "a")]


def test_stream_consumer_offsets_are_replaced_as_a_set(tmp_path):
    store = CheckpointStore(tmp_path / "offsets.db")
    store.save_consumer_offsets("b1", "/", "events", {"billing": 10, "audit": 3})

    store.save_consumer_offsets("b1", "/", "events", {"billing": 12})

    assert store.consumer_offsets("b1", "/", "events") == {"billing": 12}
    assert store.consumer_offsets("b1", "/", "other") == {}
