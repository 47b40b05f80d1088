"""The plan's segment checks: read in order on the caller's thread, checked two at a time, results in order."""

from __future__ import annotations

import threading

import pytest

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import DamagedSegmentsError, RestoreRequest, plan_restore
from airflow_rbak.restore.segment_checks import READ_ATTEMPTS, checked_segments
from airflow_rbak.storage import MemoryStorage
from tests.repository.sample import build_sample_backup


class ReadLog(MemoryStorage):
    """A memory location that notes each read (key and thread), and can cut chosen reads short."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, str]] = []
        self.short: dict[str, int] = {}

    def get(self, key: str) -> bytes:
        data = super().get(key)
        self.reads.append((key, threading.current_thread().name))
        if self.short.get(key, 0) > 0:
            self.short[key] -= 1
            return data[: len(data) // 2]
        return data


@pytest.fixture
def storage():
    storage = ReadLog()
    build_sample_backup(storage, "b-1", segment_max_bytes=2048)
    storage.reads.clear()
    return storage


def _segments(storage):
    manifest = ManifestStore(storage).load("b-1")
    storage.reads.clear()
    return [(entry, meta) for entry in manifest.queues for meta in entry.stored_order()]


def test_segments_are_read_in_order_on_the_callers_thread_and_come_back_in_that_order(storage):
    segments = _segments(storage)
    assert len(segments) > 6

    checked = list(checked_segments(storage, segments, DEFAULT_MAX_DECOMPRESSED_BYTES, threads=2))

    assert [(c.entry.name, c.meta.key) for c in checked] == [(e.name, m.key) for e, m in segments]
    assert all(c.check.ok and c.check.records_checked == c.meta.record_count for c in checked)
    assert [key for key, _ in storage.reads] == [m.key for _, m in segments]
    assert {thread for _, thread in storage.reads} == {threading.current_thread().name}


def test_a_body_cut_short_in_transfer_is_read_again_and_one_short_every_time_is_damaged(storage):
    segments = _segments(storage)
    healed, damaged = segments[1][1].key, segments[4][1].key
    storage.short = {healed: READ_ATTEMPTS - 1, damaged: READ_ATTEMPTS}

    checked = {c.meta.key: c for c in checked_segments(storage, segments, DEFAULT_MAX_DECOMPRESSED_BYTES, threads=2)}

    assert checked[healed].check.ok and checked[healed].data == MemoryStorage.get(storage, healed)
    assert not checked[damaged].check.ok and any("size is" in d for d in checked[damaged].check.defects)
    assert [key for key, _ in storage.reads].count(damaged) == READ_ATTEMPTS


def test_a_missing_segment_is_a_defect_and_the_plan_refuses_before_anything_is_published(storage):
    victim = _segments(storage)[5][1].key
    storage.delete(victim)

    with pytest.raises(DamagedSegmentsError) as caught:
        plan_restore(storage, RestoreRequest("memory://", backup_id="b-1"))

    assert caught.value.defects == {victim: ["missing"]}
