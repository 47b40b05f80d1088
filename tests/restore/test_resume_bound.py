"""Must show (issue 50, 4): a resumed publish never skips a backup record because someone else published to the
target meanwhile. A stopped attempt leaves its checkpoint exact (what landed of its unconfirmed publishes is counted,
nothing more is allowed), so one foreign message refuses the retry; the sent bound, written ahead of the sends it
covers, caps what a re-run after a kill counts as its own; a stream re-run reads back what it would count and
compares it with the records it would skip."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace

import pytest

from airflow_rbak.broker.pika_connection import ConfirmChannel, blocking_connection
from airflow_rbak.codec.properties import PIKA_NAMES
from airflow_rbak.restore import PublishError, RestoreRequest, RestoreRun, UnexpectedMessagesError
from airflow_rbak.restore import publisher as publisher_module
from airflow_rbak.restore import run as run_module
from airflow_rbak.restore.checkpoints import PROGRESS, QueueCheckpoint, RestoreCheckpoints, StoredRestoreCheckpoints
from airflow_rbak.restore.plan import queue_checkpoint
from airflow_rbak.restore.publisher import reconcile, sent_allowance
from airflow_rbak.restore.records import Positioned
from airflow_rbak.restore.stream_resume import check_gap
from airflow_rbak.restore.wire import WireRecord
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import default_seal
from tests.restore.helpers import (
    backup,
    body_of,
    declare,
    expected_partial,
    expected_views,
    props_of,
    publish,
    read_queue,
    ready_count,
)
from tests.restore.test_fresh_start import fail_after_commit

COUNT = 1500
BLANK = QueueCheckpoint("b-1", "/", "orders", "dr", "orders", "None..None", target_cluster="cluster-a", location="file:///b")


def _planned(broker, vhost, tmp_path, queue_type: str, backup_id: str):
    """A backup of ``COUNT`` messages in ``orders`` and the plan of restoring it into ``restored``, 300 in flight."""
    declare(broker.connection, vhost, {"orders": queue_type})
    publish(broker.connection, vhost, "orders", 0, COUNT, decimal=queue_type != "stream")
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, backup_id, vhost)
    request = RestoreRequest(location, backup_id=backup_id, queue_map={"orders": "restored"},
                             checkpoint_state=str(tmp_path / "restore.db"), max_in_flight=300)
    run = RestoreRun(broker.connection, request)
    return run, run.plan(), request


def _failed_attempt(broker, vhost, tmp_path, monkeypatch, queue_type: str, backup_id: str, killed: bool = False):
    """A backup of ``orders`` and a restore of it into ``restored`` that failed part-way (its checkpoint kept);
    returns the run, its plan and the queue's checkpoint as the failed attempt left it. ``killed``: the attempt ends
    as if killed outright, without its stop (its last commit's bound stands)."""
    run, plan, request = _planned(broker, vhost, tmp_path, queue_type, backup_id)
    fail_after_commit(monkeypatch, 500)
    if killed:
        monkeypatch.setattr(publisher_module.ConfirmPipeline, "stop", lambda self, measure: None)
    with pytest.raises(PublishError, match="injected"):
        run.publish(plan, plan.queues[0])
    monkeypatch.undo()
    with RestoreCheckpoints(tmp_path / "restore.db") as store:
        cp = store.load(queue_checkpoint(plan, plan.queues[0], request))
    assert 500 <= cp.published < COUNT and cp.sent_bound is not None
    return run, plan, cp


def _publish_foreign(broker, vhost: str, queue: str, count: int) -> None:
    """Another publisher's ``count`` messages, bodies no backup record has."""
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish("", queue, f"foreign {i}".encode())


@pytest.mark.broker
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_retry_after_another_publisher_added_one_message_refuses(broker, behaviour, vhost, tmp_path, monkeypatch,
                                                                   queue_type):
    # Given a restore that failed part-way with 300 messages in flight: its stop waited for their confirms, so its
    # checkpoint allows nothing beyond what it confirmed
    run, plan, cp = _failed_attempt(broker, vhost, tmp_path, monkeypatch, queue_type, "bound-1")
    allowance = cp.sent_bound - cp.published
    assert allowance == 0 and ready_count(broker.connection, vhost, "restored") == cp.published

    # And another publisher that then added one message to the target
    _publish_foreign(broker, vhost, "restored", 1)
    held = ready_count(broker.connection, vhost, "restored")

    # When the publish runs again
    with pytest.raises(UnexpectedMessagesError) as refused:
        run.publish(plan, plan.queues[0])

    # Then it refuses, naming the growth and the bound, and how to go on; no record was skipped or published
    message = str(refused.value)
    grew = re.search(r"holds (\d+) more messages than the checkpoint accounts for", message)
    assert grew and int(grew.group(1)) == 1, message
    assert f"at most {allowance} in flight" in message and "something else publishes" in message
    assert "Nothing was published by this run" in message and "fresh checkpoint_state" in message
    assert ready_count(broker.connection, vhost, "restored") == held
    with RestoreCheckpoints(tmp_path / "restore.db") as store:
        assert store.load(replace(cp, stored=False)) == cp  # the checkpoint is unchanged
    found = read_queue(broker.connection, vhost, "restored", queue_type, held)
    ours = [m[0] for m in found if not m[0].startswith(b"foreign")]
    assert ours == [v[0] for v in expected_partial(COUNT, len(ours), queue_type, behaviour)] and len(ours) >= cp.published


def _attempt_cut_by_the_broker(broker, vhost, tmp_path, monkeypatch, queue_type: str, backup_id: str):
    """A restore of ``orders`` into ``restored`` whose connection the broker closes after its 700th send, 300 in
    flight; returns the run, its plan and the checkpoint the stopped attempt left."""
    run, plan, request = _planned(broker, vhost, tmp_path, queue_type, backup_id)
    sent = {"n": 0}

    class CutAt700(ConfirmChannel):
        def publish_encoded(self, *args, **kwargs) -> None:
            super().publish_encoded(*args, **kwargs)
            sent["n"] += 1
            if sent["n"] == 700:
                self.flush()  # all 700 handed to pika, as its own publish would have
                broker.ctl("close_all_connections", "-p", vhost, "test: the broker closes the restore's connection")

    monkeypatch.setattr(publisher_module, "ConfirmChannel", CutAt700)
    with pytest.raises(PublishError, match="re-run"):
        run.publish(plan, plan.queues[0])
    monkeypatch.undo()
    with RestoreCheckpoints(tmp_path / "restore.db") as store:
        cp = store.load(queue_checkpoint(plan, plan.queues[0], request))
    return run, plan, cp


@pytest.mark.broker
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_an_attempt_whose_connection_was_closed_counts_what_landed_and_its_retry_publishes_each_record_once(
        broker, behaviour, vhost, tmp_path, monkeypatch, queue_type):
    # Given a restore whose connection the broker closed with up to 300 publishes unconfirmed
    run, plan, cp = _attempt_cut_by_the_broker(broker, vhost, tmp_path, monkeypatch, queue_type, "cut-1")

    # Then its stop counted those that reached the target as published and allows nothing more
    assert cp.sent_bound == cp.published and 400 <= cp.published <= 700, cp
    assert ready_count(broker.connection, vhost, "restored") == cp.depth_base == cp.published

    # When it runs again, it publishes the rest, and the target holds every record once, in order, byte-exact
    result = run.publish(plan, plan.queues[0])
    assert (result.resumed_from, result.already_delivered, result.published) == (cp.published, 0, COUNT - cp.published)
    restored = read_queue(broker.connection, vhost, "restored", queue_type, COUNT)
    assert _as_held(restored, behaviour, queue_type) == _as_held(expected_views(COUNT, queue_type, behaviour), behaviour,
                                                                 queue_type)


@pytest.mark.broker
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_retry_after_a_closed_connection_and_one_foreign_message_refuses(broker, behaviour, vhost, tmp_path,
                                                                          monkeypatch, queue_type):
    # Given a restore whose connection the broker closed mid-queue, and one message another publisher then added
    run, plan, cp = _attempt_cut_by_the_broker(broker, vhost, tmp_path, monkeypatch, queue_type, "cut-2")
    _publish_foreign(broker, vhost, "restored", 1)

    # When it runs again, it refuses with nothing published and its checkpoint unchanged
    with pytest.raises(UnexpectedMessagesError, match="holds 1 more messages than the checkpoint accounts for"):
        run.publish(plan, plan.queues[0])
    assert ready_count(broker.connection, vhost, "restored") == cp.published + 1
    with RestoreCheckpoints(tmp_path / "restore.db") as store:
        assert store.load(replace(cp, stored=False)) == cp
    found = read_queue(broker.connection, vhost, "restored", queue_type, cp.published + 1)
    ours = [m for m in found if not m[0].startswith(b"foreign")]
    assert _as_held(ours, behaviour, queue_type) == _as_held(expected_partial(COUNT, cp.published, queue_type, behaviour),
                                                             behaviour, queue_type)


def _as_held(messages: list[tuple], behaviour, queue_type: str) -> list[tuple]:
    """Messages in delivery order, except on a 4.0 quorum queue, whose two priority levels order messages enqueued
    close together by when each arrived (not modelled): there the same messages, each once, in body order."""
    return sorted(messages, key=lambda m: m[0]) if queue_type == "quorum" and (4, 0) <= behaviour.series < (4, 3) \
        else messages


@pytest.mark.broker
def test_a_stream_retry_with_a_foreign_message_in_the_gap_refuses(broker, vhost, tmp_path, monkeypatch):
    # Given a stream restore killed part-way, its last commit's bound leaving room for what it had in flight
    run, plan, cp = _failed_attempt(broker, vhost, tmp_path, monkeypatch, "stream", "bound-s", killed=True)
    assert cp.sent_bound > cp.published

    # And one message of another publisher appended to the target stream (well within the sent bound)
    _publish_foreign(broker, vhost, "restored", 1)

    # When the publish runs again
    with pytest.raises(UnexpectedMessagesError) as refused:
        run.publish(plan, plan.queues[0])

    # Then the message it would have counted as its own was read back, found foreign, and the re-run refused
    message = str(refused.value)
    assert f"stream {vhost}/restored grew by" in message and "its body differs" in message, message
    assert "Nothing was published by this run" in message
    with RestoreCheckpoints(tmp_path / "restore.db") as store:
        assert store.load(replace(cp, stored=False)) == cp  # the checkpoint is unchanged


def _positioned(i: int, body: bytes | None = None) -> Positioned:
    props = props_of(i, decimal=False)
    values = tuple(getattr(props, name) for name in PIKA_NAMES)  # (the read-back compares no header)
    record = WireRecord(body if body is not None else body_of(i, 300), values, None, "", "orders", i, 0)
    return Positioned(i, "seg", i, record)


@pytest.mark.broker
def test_the_stream_read_back_accepts_the_records_and_names_a_difference(broker, vhost):
    # Given a stream holding messages 0..9 as the restore publishes them
    declare(broker.connection, vhost, {"s": "stream"})
    publish(broker.connection, vhost, "s", 0, 10, decimal=False)
    c = broker.connection
    # Then offsets 4..9 read back as records 4..9 (and 4..5 too, the stream going on after them)
    check_gap(c, vhost, "s", 4, [_positioned(i) for i in range(4, 10)])
    check_gap(c, vhost, "s", 4, [_positioned(4), _positioned(5)])
    # And a record whose body or message_id differs from the message at its offset is refused, naming it
    with pytest.raises(UnexpectedMessagesError, match="offset 5 is not record 5 of seg: its body differs"):
        check_gap(c, vhost, "s", 4, [_positioned(4), _positioned(5, b"other")])
    other = _positioned(6)
    other.record.properties.message_id = "m-other"
    with pytest.raises(UnexpectedMessagesError, match="offset 6 is not record 6 of seg: its message_id differs"):
        check_gap(c, vhost, "s", 6, [other])


@pytest.mark.broker
def test_the_publisher_never_sends_past_the_bound_it_has_written(broker, behaviour, vhost, tmp_path, monkeypatch):
    # Given a restore whose checkpoint writes are recorded, and whose every send is checked against them
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 3000)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "bound-w", vhost)
    written = {"bound": 0, "saves": 0, "sent": 0}
    opener = run_module.open_checkpoint_store

    class Recorded:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.inner.close()

        def save(self, cp) -> None:
            self.inner.save(cp)
            written["bound"], written["saves"] = max(written["bound"], cp.sent_bound or 0), written["saves"] + 1

    class Checked(ConfirmChannel):
        def publish_encoded(self, *args, **kwargs) -> None:
            written["sent"] += 1
            assert written["sent"] <= written["bound"], "a record was sent past the stored bound"
            super().publish_encoded(*args, **kwargs)

    monkeypatch.setattr(run_module, "open_checkpoint_store", lambda *a: Recorded(opener(*a)))
    monkeypatch.setattr(publisher_module, "ConfirmChannel", Checked)

    # When it publishes 3,000 records with 1,000 in flight
    RestoreRun(broker.connection, RestoreRequest(location, backup_id="bound-w", queue_map={"orders": "restored"},
                                                 checkpoint_state=str(tmp_path / "restore.db"))).run()

    # Then every send was covered by a bound written before it, in no more writes than before the bound (one at the
    # start, one per 500 confirms, one when drained, one to complete)
    assert written["sent"] == 3000 and written["saves"] <= 1 + 3000 // 500 + 2, written
    restored = read_queue(broker.connection, vhost, "restored", "classic", 3000)
    assert [m[0] for m in restored] == [v[0] for v in expected_views(3000, "classic", behaviour)]


def _items(start: int, count: int) -> list[Positioned]:
    return [Positioned(i, "seg", i, None) for i in range(start, start + count)]


def test_a_resume_counts_no_more_than_the_sent_bound_explains():
    cp = QueueCheckpoint(**{**BLANK.__dict__, "next_ordinal": 100, "published": 90, "depth_base": 90, "sent_bound": 95})

    assert sent_allowance(cp) == 5
    resumed = reconcile(cp, 95, _items(100, 5), sent_allowance(cp))
    assert (resumed.published, resumed.next_ordinal, resumed.depth_base) == (95, 105, 95)
    with pytest.raises(UnexpectedMessagesError, match=r"holds 6 more .* at most 5 in flight: something else publishes"):
        reconcile(cp, 96, _items(100, 5), sent_allowance(cp))


def test_a_checkpoint_without_a_bound_allows_a_window_and_a_commit_interval():
    # A checkpoint written before the bound existed: at most max_in_flight + 500 are taken as the earlier attempt's
    old = QueueCheckpoint(**{**BLANK.__dict__, "published": 90, "depth_base": 90})
    assert sent_allowance(old, max_in_flight=300) == 800 and sent_allowance(old) == 1500
    with pytest.raises(UnexpectedMessagesError, match="at most 800 in flight"):
        reconcile(old, 90 + 801, _items(0, 900), sent_allowance(old, max_in_flight=300))


def test_a_sqlite_file_of_the_previous_format_loads_without_a_bound(tmp_path):
    # Given a checkpoint file of the previous schema (no sent_bound column) holding a restore in progress
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE queue_progress (target_cluster TEXT NOT NULL, location TEXT NOT NULL, "
                     "backup_id TEXT NOT NULL, source_vhost TEXT NOT NULL, source_queue TEXT NOT NULL, target_vhost TEXT "
                     "NOT NULL, target_queue TEXT NOT NULL, window TEXT NOT NULL, next_ordinal INTEGER NOT NULL DEFAULT 0, "
                     "published INTEGER NOT NULL DEFAULT 0, depth_base INTEGER, completed INTEGER NOT NULL DEFAULT 0, "
                     "updated_at INTEGER NOT NULL, PRIMARY KEY (target_cluster, location, backup_id, source_vhost, "
                     "source_queue, target_vhost, target_queue))")
        conn.execute("INSERT INTO queue_progress VALUES ('cluster-a','file:///b','b-1','/','orders','dr','orders',"
                     "'None..None',40,35,35,0,1)")

    # When this version opens it, then saves a bound
    with RestoreCheckpoints(db) as store:
        loaded = store.load(BLANK)
        assert (loaded.published, loaded.depth_base, loaded.sent_bound, loaded.stored) == (35, 35, None, True)
        store.save(QueueCheckpoint(**{**loaded.__dict__, "sent_bound": 600}))
        # Then the row keeps its progress and now its bound
        assert store.load(BLANK).sent_bound == 600


def test_a_stored_progress_object_of_the_previous_format_loads_without_a_bound(tmp_path):
    # Given a sealed progress object as the previous version wrote it (no sent_bound key)
    storage = open_storage(tmp_path.as_uri())
    store = StoredRestoreCheckpoints(storage)
    key = store._folder(BLANK) + "progress.json"
    default_seal().write(storage, PROGRESS, key, {
        "key": ["cluster-a", "file:///b", "b-1", "/", "orders", "dr", "orders"], "window": "None..None",
        "next_ordinal": 40, "published": 35, "depth_base": 35, "completed": False})

    # Then it loads as that progress, with no bound
    loaded = StoredRestoreCheckpoints(storage).load(BLANK)
    assert (loaded.published, loaded.depth_base, loaded.sent_bound, loaded.stored) == (35, 35, None, True)
