"""Every restore checkpoint store (SQLite file, the backup's storage, a named storage URL) and the resume arithmetic
after a crash (no broker)."""

from __future__ import annotations

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore import TargetChangedError
from airflow_rbak.restore.checkpoints import QueueCheckpoint, Unroutable, open_checkpoint_store
from airflow_rbak.restore.publisher import reconcile
from airflow_rbak.restore.records import Positioned
from airflow_rbak.storage import open_storage

BLANK = QueueCheckpoint("b-1", "/", "orders", "dr", "orders", "None..None", target_cluster="cluster-a", location="file:///b")


@pytest.fixture(params=["sqlite", "backup", "url"])
def opener(request, tmp_path):
    """Open the store ``checkpoint_state`` names: each call is a fresh process's view (nothing cached)."""
    backup_storage = open_storage((tmp_path / "backup").as_uri())
    state = {"sqlite": str(tmp_path / "cp.db"), "backup": "backup", "url": (tmp_path / "shared").as_uri()}[request.param]
    return lambda: open_checkpoint_store(state, backup_storage)


def test_progress_survives_reopening_and_a_different_window_is_refused(opener):
    with opener() as db:
        assert db.load(BLANK) == BLANK
        db.save(QueueCheckpoint(**{**BLANK.__dict__, "next_ordinal": 40, "published": 35, "depth_base": 35}))
        db.add_unroutable(BLANK, Unroutable(7, "k/segment-0001.zst", 7, "x", "rk", "312 NO_ROUTE"))
        db.add_stream_offsets(BLANK, [(10, 100), (12, 101), (20, 102)])

    with opener() as db:
        loaded = db.load(BLANK)
        assert (loaded.next_ordinal, loaded.published, loaded.depth_base) == (40, 35, 35)
        assert [u.ordinal for u in db.unroutable(BLANK)] == [7]
        assert [db.mapped_offset(BLANK, c) for c in (9, 10, 15, 99)] == [None, 100, 101, 102]
        with pytest.raises(ConfigurationError, match="window"):
            db.load(QueueCheckpoint(**{**BLANK.__dict__, "window": "1..2"}))


def test_another_target_cluster_or_location_never_reuses_a_checkpoint(opener):
    # Given one checkpoint store holding a finished restore of b-1 into cluster-a, from file:///b
    with opener() as db:
        db.save(QueueCheckpoint(**{**BLANK.__dict__, "next_ordinal": 10, "published": 10, "depth_base": 10, "completed": True}))
        db.add_unroutable(BLANK, Unroutable(3, "k", 3, "x", "rk", "312 NO_ROUTE"))
        db.add_stream_offsets(BLANK, [(1, 1)])

        # When the same backup and queues are restored into another cluster, or from another copy of the backup
        for other in ({"target_cluster": "cluster-b"}, {"location": "s3://copy/b"}):
            blank = QueueCheckpoint(**{**BLANK.__dict__, **other})

            # Then that restore starts from nothing: no progress, no unroutable records, no offsets of the first
            assert db.load(blank) == blank and not blank.started
            assert db.unroutable(blank) == [] and db.mapped_offset(blank, 5) is None
        assert db.load(BLANK).completed and db.load(BLANK).started


def _items(start: int, count: int) -> list[Positioned]:
    return [Positioned(i, "seg", i, None) for i in range(start, start + count)]


def test_records_a_crashed_run_got_into_the_queue_are_skipped_exactly():
    cp = QueueCheckpoint(**{**BLANK.__dict__, "next_ordinal": 100, "published": 90, "depth_base": 90})

    assert reconcile(cp, 90, []) == cp
    resumed = reconcile(cp, 93, _items(100, 3))
    assert (resumed.next_ordinal, resumed.published, resumed.depth_base) == (103, 93, 93)


def test_a_queue_that_lost_or_gained_messages_is_refused():
    cp = QueueCheckpoint(**{**BLANK.__dict__, "published": 90, "depth_base": 90})

    with pytest.raises(TargetChangedError, match="consumed or purged"):
        reconcile(cp, 80, [])
    with pytest.raises(TargetChangedError, match="something else publishes"):
        reconcile(cp, 95, _items(0, 2))
