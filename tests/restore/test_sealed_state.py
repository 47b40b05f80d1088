"""Issue 39: state in the location is evidence, not authority. A restore checkpoint or a capture checkpoint planted in
the location (unsealed, sealed with another deployment's key, or copied from another restore) is never resumed from:
the restore starts again, and its refusal to add to a queue that holds messages applies; the capture runs again."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress
from airflow_rbak.codec.layout import checkpoint_key
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.checkpoints import QueueCheckpoint, StoredRestoreCheckpoints, Unroutable
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import StateSeal
from tests.restore.helpers import backup, body_of, declare, publish, read_queue, ready_count

OTHER_DEPLOYMENT = StateSeal(b"another deployment's state key, not ours")
BLANK = QueueCheckpoint("b-1", "/", "orders", "dr", "orders", "None..None", target_cluster="cluster-a", location="s3://b")


def plant_progress(storage, blank: QueueCheckpoint, how: str, **fields) -> str:
    """A progress.json at ``blank``'s key saying what ``fields`` say: plain JSON, or sealed with another key."""
    store = StoredRestoreCheckpoints(storage, OTHER_DEPLOYMENT)
    key = store._folder(blank) + "progress.json"
    cp = QueueCheckpoint(**{**blank.__dict__, **fields})
    if how == "unsealed":  # as an older version wrote it, or as anyone can write it
        storage.put(key, json.dumps({"key": [cp.target_cluster, cp.location, cp.backup_id, cp.source_vhost,
                                             cp.source_queue, cp.target_vhost, cp.target_queue], "window": cp.window,
                                     "next_ordinal": cp.next_ordinal, "published": cp.published,
                                     "depth_base": cp.depth_base, "completed": cp.completed}).encode())
    else:
        store.save(cp)
    return key


@pytest.mark.parametrize("how", ["unsealed", "other-key"])
def test_a_planted_progress_unroutable_or_offsets_object_is_not_taken(location, how, caplog):
    storage = open_storage(location)
    key = plant_progress(storage, BLANK, how, next_ordinal=900, published=900, depth_base=0, completed=True)
    folder = key.rsplit("/", 1)[0]
    storage.put(f"{folder}/unroutable-{3:020d}.json", json.dumps(Unroutable(3, "k", 3, "x", "rk", "312").__dict__).encode())
    storage.put(f"{folder}/offsets-{1:020d}.json", b"[[1, 5000]]")

    with StoredRestoreCheckpoints(storage) as store:
        loaded = store.load(BLANK)
        unroutable, offset = store.unroutable(BLANK), store.mapped_offset(BLANK, 10)

    assert loaded == BLANK and not loaded.started
    assert unroutable == [] and offset is None
    warned = caplog.text
    assert f"{key} is not trusted state" in warned and "starts again" in warned
    assert f"{folder}/unroutable-{3:020d}.json is not trusted state" in warned
    assert f"{folder}/offsets-{1:020d}.json is not trusted state" in warned


def test_a_progress_copied_from_another_restore_is_not_taken(location):
    storage = open_storage(location)
    with StoredRestoreCheckpoints(storage) as store:
        other = QueueCheckpoint(**{**BLANK.__dict__, "target_queue": "elsewhere"})
        store.save(QueueCheckpoint(**{**other.__dict__, "next_ordinal": 50, "published": 50, "completed": True}))
        storage.put(store._folder(BLANK) + "progress.json", storage.get(store._folder(other) + "progress.json"))

        assert store.load(BLANK) == BLANK
        assert store.load(other).completed


def test_an_old_unsealed_checkpoint_means_start_again_and_the_restore_then_refuses_a_queue_holding_messages(
        broker, vhost, location):
    # Given a backup of 'orders', which still holds its 5 messages
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    backup(broker.connection, location, "seal-1", vhost)
    declare(broker.connection, vhost, {"orders-2": "classic"})
    storage = open_storage(location)
    with ManagementClient(broker.connection) as client:
        cluster = client.cluster_identity()

    def restore_key(settings: RestoreRequest, target_queue: str) -> QueueCheckpoint:
        """The checkpoint key of the restore of 'orders' into ``target_queue`` (as the plan computes it)."""
        return QueueCheckpoint("seal-1", vhost, "orders", vhost, target_queue, settings.window_label(),
                               target_cluster=cluster, location=storage.url)

    # And a planted progress.json at the restore's own key saying it is under way and every record is in
    settings = RestoreRequest(location, backup_id="seal-1")
    plant_progress(storage, restore_key(settings, "orders"), "unsealed", next_ordinal=5, published=5, depth_base=5,
                   completed=True)

    # When the restore runs: Then the planted checkpoint is not a resume, so the queue holding messages refuses it
    with pytest.raises(RestoreRefusedError, match=f"{vhost}/orders holds 5"):
        RestoreRun(broker.connection, settings).run()
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 5)] == [body_of(i, 300) for i in range(5)]

    # When it is restored into the empty 'orders-2', where a progress.json sealed by another deployment says "done"
    into_empty = RestoreRequest(location, backup_id="seal-1", queue_map={"orders": "orders-2"})
    plant_progress(storage, restore_key(into_empty, "orders-2"), "other-key", next_ordinal=5, published=5, depth_base=0,
                   completed=True)
    report = RestoreRun(broker.connection, into_empty).run()

    # Then every record was published, none skipped, and the report says so
    assert report.published == 5 and report.queues[0]["completed"]
    assert ready_count(broker.connection, vhost, "orders-2") == 5
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders-2", "classic", 5)] == [body_of(i, 300) for i in range(5)]


@pytest.mark.parametrize("how", ["unsealed", "other-key"])
def test_a_planted_completed_capture_checkpoint_does_not_complete_a_backup_without_its_queue(broker, vhost, location, how):
    # Given a queue of 5 messages, and a capture checkpoint planted for the next backup's id saying it is complete
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    storage = open_storage(location)
    planted = QueueProgress("cap-1", vhost, "orders", "classic", target_count=0, completed=True)
    if how == "unsealed":
        storage.put(checkpoint_key("cap-1", vhost, "orders"), json.dumps(planted.__dict__).encode())
    else:
        CaptureCheckpoints(storage, "cap-1", OTHER_DEPLOYMENT).save(planted)

    # When the backup runs
    manifest = backup(broker.connection, location, "cap-1", vhost)

    # Then the queue was captured again, whole: the planted "completed" was not taken
    (queue,) = [q for q in manifest.queues if q.name == "orders"]
    assert queue.message_count == 5
    assert CaptureCheckpoints(storage, "cap-1").get("cap-1", vhost, "orders").staged_records == 5
