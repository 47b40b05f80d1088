"""Planning against a backup built through the codec: counts, window, verification, skipping."""

from __future__ import annotations

import pytest

from airflow_rbak.restore import BackupNotRestorableError, DamagedSegmentsError, RestorePlan, RestoreRequest, plan_restore
from airflow_rbak.restore.plan_log import summary_lines
from airflow_rbak.storage import MemoryStorage
from tests.repository.sample import build_sample_backup

BASE = 1_712_756_400_000  # backed_up_at of record 0; record i is BASE + 10 i


@pytest.fixture
def storage():
    storage = MemoryStorage()
    build_sample_backup(storage, "b-1", segment_max_bytes=2048)
    return storage


def test_the_plan_counts_every_selected_queue_and_maps_its_target(storage):
    plan = plan_restore(storage, RestoreRequest("memory://", backup_id="latest", vhost_map={"prod": "dr"},
                                                 queue_map={"orders": "orders-2"}))

    assert plan.backup_id == "b-1"
    found = {(q.source_vhost, q.source_queue): (q.target_vhost, q.target_queue, q.queue_type, q.records_in_window) for q in plan.queues}
    assert found == {("/", "orders"): ("/", "orders-2", "classic", 240), ("prod", "payments"): ("dr", "payments", "quorum", 30),
                     ("prod", "events/eu"): ("dr", "events/eu", "stream", 12)}
    orders = plan.queue("/", "orders")
    assert len(orders.segments) > 3 and [s.first_ordinal for s in orders.segments][0] == 0
    assert sum(s.record_count for s in orders.segments) == 240
    assert RestorePlan.from_json(plan.to_json()) == plan


def test_the_window_skips_whole_segments_by_their_timestamps_then_counts_records(storage):
    settings = RestoreRequest("memory://", backup_id="b-1", queues=["orders"], time_window_start=BASE + 1000,
                               time_window_end=f"{BASE + 1990}")  # records 100..199

    plan = plan_restore(storage, settings)

    (orders,) = plan.queues
    assert orders.records_in_window == 100
    assert plan.segments_outside_window > 0
    assert all(s.last_timestamp >= BASE + 1000 and s.first_timestamp <= BASE + 1990 for s in orders.segments)


def test_a_damaged_segment_stops_the_plan_and_is_named(storage):
    manifest_segments = plan_restore(storage, RestoreRequest("memory://", backup_id="b-1", queues=["orders"])).queues[0].segments
    victim = manifest_segments[2]
    data = bytearray(storage.get(victim.key))
    data[40] ^= 0xFF
    storage.put(victim.key, bytes(data))

    with pytest.raises(DamagedSegmentsError, match="segment-0003") as caught:
        plan_restore(storage, RestoreRequest("memory://", backup_id="b-1"))
    assert list(caught.value.defects) == [victim.key]
    assert any("SHA-256" in reason for reason in caught.value.defects[victim.key])


def test_skipping_damaged_segments_reports_exactly_what_was_skipped(storage):
    plan = plan_restore(storage, RestoreRequest("memory://", backup_id="b-1", queues=["orders"]))
    victim = plan.queues[0].segments[1]
    storage.delete(victim.key)

    plan = plan_restore(storage, RestoreRequest("memory://", backup_id="b-1", queues=["orders"], skip_damaged_segments=True))

    (skipped,) = plan.skipped_segments
    assert (skipped.key, skipped.record_count, skipped.reasons) == (victim.key, victim.record_count, ("missing",))
    assert plan.queues[0].records_in_window == 240 - victim.record_count
    assert victim.key not in [s.key for s in plan.queues[0].segments]
    assert any("SKIPPED" in line and victim.key in line for line in summary_lines(plan))


def test_an_incomplete_or_missing_backup_is_refused(storage):
    from airflow_rbak.repository.manifest_store import ManifestStore

    manifest = ManifestStore(storage).load("b-1")
    manifest.completed_at = None
    ManifestStore(storage).save(manifest)

    with pytest.raises(BackupNotRestorableError, match="did not complete"):
        plan_restore(storage, RestoreRequest("memory://", backup_id="b-1"))
    with pytest.raises(BackupNotRestorableError, match="no complete backup"):
        plan_restore(storage, RestoreRequest("memory://"))
    with pytest.raises(BackupNotRestorableError, match="no manifest"):
        plan_restore(storage, RestoreRequest("memory://", backup_id="nope"))


def test_two_queues_mapped_onto_one_target_are_refused(storage):
    with pytest.raises(BackupNotRestorableError, match="would both restore into"):
        plan_restore(storage, RestoreRequest("memory://", backup_id="b-1", vhost_map={"prod": "/"}, queue_map={"payments": "orders"}))
