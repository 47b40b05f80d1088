"""CaptureCheckpoints: the bookkeeping a re-run resumes from, one object per queue in the backup's storage."""

from __future__ import annotations

import json
import sqlite3

from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress, accounted_chunk_keys, write_offsets_summary
from airflow_rbak.codec.layout import checkpoint_key, state_key
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import StateSeal


def progress(**changes: object) -> QueueProgress:
    base = QueueProgress("b1", "/", "orders", "classic", target_count=100)
    return QueueProgress(**{**base.__dict__, **changes})


def test_a_saved_checkpoint_reads_back_field_for_field():
    store = CaptureCheckpoints(open_storage("memory://"), "b1")
    saved = progress(staged_records=40, staged_bytes=4096, last_chunk=2, last_fingerprint="ab" * 16, completed=True,
                     stream_start_offset=5, stream_end_offset=99, stream_next_offset=45)

    store.save(saved)

    assert store.get("b1", "/", "orders") == saved
    assert store.get("b1", "/", "other") is None and store.get("b2", "/", "orders") is None


def test_later_saves_replace_earlier_ones():
    store = CaptureCheckpoints(open_storage("memory://"), "b1")
    store.save(progress(staged_records=10, last_chunk=1))

    store.save(progress(staged_records=20, last_chunk=2))

    assert (store.get("b1", "/", "orders").staged_records, store.get("b1", "/", "orders").last_chunk) == (20, 2)
    assert len(store.all("b1")) == 1


def test_a_rerun_on_another_worker_resumes_from_the_stored_checkpoint():
    # Given a capture that checkpointed into storage and then lost its worker
    storage = open_storage("memory://")
    CaptureCheckpoints(storage, "b1").save(progress(staged_records=30, last_chunk=3, last_fingerprint="f" * 32))

    # When the re-run, in another process with nothing local, opens the same backup's checkpoints
    second = CaptureCheckpoints(storage, "b1")

    # Then it sees where the first run stopped
    assert second.get("b1", "/", "orders") == progress(staged_records=30, last_chunk=3, last_fingerprint="f" * 32)


def test_concurrent_captures_of_two_queues_never_touch_each_others_checkpoint():
    # Given two workers' stores of one backup, each capturing its own queue
    storage = open_storage("memory://")
    worker_a, worker_b = CaptureCheckpoints(storage, "b1"), CaptureCheckpoints(storage, "b1")

    # When they save in interleaved order
    worker_a.save(progress(queue="a", last_chunk=1))
    worker_b.save(progress(queue="b", last_chunk=1))
    worker_a.save(progress(queue="a", last_chunk=2))

    # Then each queue has its own object, and the last write of one never replaces the other
    assert storage.exists(checkpoint_key("b1", "/", "a")) and storage.exists(checkpoint_key("b1", "/", "b"))
    assert [(p.queue, p.last_chunk) for p in CaptureCheckpoints(storage, "b1").all("b1")] == [("a", 2), ("b", 1)]


def test_a_first_checkpoint_kept_in_process_is_not_stored():
    storage = open_storage("memory://")
    store = CaptureCheckpoints(storage, "b1")

    store.save(progress(), sync=False)

    assert store.get("b1", "/", "orders") == progress()
    assert CaptureCheckpoints(storage, "b1").get("b1", "/", "orders") is None


def test_a_new_backup_starts_empty_even_when_storage_holds_another():
    storage = open_storage("memory://")
    CaptureCheckpoints(storage, "b1").save(progress())

    assert CaptureCheckpoints(storage, "b2").all("b2") == []


def test_all_lists_every_queue_of_one_backup_sorted():
    storage = open_storage("memory://")
    store = CaptureCheckpoints(storage, "b1")
    for vhost, queue in [("v2", "a"), ("/", "z"), ("/", "b")]:
        store.save(progress(vhost=vhost, queue=queue))
    store.save(progress(backup_id="other"))

    assert [(p.vhost, p.queue) for p in CaptureCheckpoints(storage, "b1").all("b1")] == [("/", "b"), ("/", "z"), ("v2", "a")]


def test_stream_consumer_offsets_are_replaced_as_a_set_and_stored_with_the_checkpoint():
    storage = open_storage("memory://")
    store = CaptureCheckpoints(storage, "b1")
    store.save(progress(queue="events", queue_type="stream"))
    store.save_consumer_offsets("b1", "/", "events", {"billing": 10, "audit": 3})

    store.save_consumer_offsets("b1", "/", "events", {"billing": 12})

    assert CaptureCheckpoints(storage, "b1").consumer_offsets("b1", "/", "events") == {"billing": 12}
    assert store.consumer_offsets("b1", "/", "other") == {}


def test_encode_takes_only_the_chunks_the_checkpoint_accounts_for():
    # Given a checkpoint at chunk 2, and chunks 3 and 4 a killed attempt stored before its checkpoint
    storage = open_storage("memory://")
    CaptureCheckpoints(storage, "b1").save(progress(last_chunk=2))
    keys = [f"b1/staging/_default/orders/chunk-{n:08d}.zst" for n in (4, 1, 3, 2)]

    # Then only chunks 1 and 2 are encoded, in capture order; a queue without a checkpoint has none
    assert accounted_chunk_keys(storage, "b1", "_default", "orders", keys) == keys[1:2] + keys[3:]
    assert accounted_chunk_keys(storage, "b1", "_default", "other", keys) == []


def test_the_offsets_summary_is_seed_001s_sqlite_layout_for_foreign_readers(tmp_path):
    storage = open_storage("memory://")
    store = CaptureCheckpoints(storage, "b1")
    store.save(progress(staged_records=100, last_chunk=3, completed=True))
    store.save(progress(queue="events", queue_type="stream", stream_end_offset=9))
    store.save_consumer_offsets("b1", "/", "events", {"billing": 4})

    write_offsets_summary(storage, "b1")

    (tmp_path / "offsets.db").write_bytes(storage.get(state_key("b1")))
    with sqlite3.connect(tmp_path / "offsets.db") as db:
        rows = db.execute("SELECT queue, last_chunk, staged_records, completed, stream_end_offset FROM queue_progress "
                          "WHERE backup_id='b1' ORDER BY queue").fetchall()
        consumers = db.execute("SELECT stream, reference, stored_offset FROM stream_consumer_offsets").fetchall()
    assert rows == [("events", 0, 0, 0, 9), ("orders", 3, 100, 1, None)]
    assert consumers == [("events", "billing", 4)]


def test_a_checkpoint_that_fails_its_seal_is_not_resumed_from_but_encode_still_sees_its_chunks(location, caplog):
    # Given checkpoints planted for two queues: one unsealed saying complete, one sealed with another deployment's key
    storage = open_storage(location)
    storage.put(checkpoint_key("b1", "/", "orders"),
                json.dumps({**progress(last_chunk=1, completed=True).__dict__, "consumer_offsets": {"x": 1}}).encode())
    CaptureCheckpoints(storage, "b1", StateSeal(b"another deployment's state key")).save(progress(queue="events", completed=True))

    # Then a capture finds no checkpoint to resume from (it starts again), and says why
    store = CaptureCheckpoints(storage, "b1")
    assert store.get("b1", "/", "orders") is None and store.get("b1", "/", "events") is None
    assert store.consumer_offsets("b1", "/", "orders") == {} and store.all("b1") == []
    assert f"{checkpoint_key('b1', '/', 'orders')} is not trusted state: no seal" in caplog.text
    assert f"{checkpoint_key('b1', '/', 'events')} is not trusted state: bad MAC" in caplog.text
    # and encode, reading them as evidence of which chunks of the same location count, still does
    keys = ["b1/staging/_default/orders/chunk-00000001.zst"]
    assert accounted_chunk_keys(storage, "b1", "_default", "orders", keys) == keys
