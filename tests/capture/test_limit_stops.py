"""A capture that stopped at a quorum queue's delivery limit is remembered in the location, and later captures leave
the queue out until the risk is gone (airflow_rbak/capture/limit_stops.py; no broker needed)."""

from __future__ import annotations

import pytest

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.limit_stops import record_stop, stop_reason
from airflow_rbak.codec.layout import delivery_limit_stop_key
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage

KEY = delivery_limit_stop_key("/", "orders/eu")


def queue(messages: int = 12) -> QueueInfo:
    return QueueInfo("/", "orders/eu", "quorum", messages=messages)


def never_asked() -> int:
    raise AssertionError("the exact depth is read only when the management API counts no message")


def test_a_stop_is_recorded_outside_every_backup_and_leaves_later_captures_of_the_queue_out():
    storage = open_storage("memory://")

    key = record_stop(storage, queue(), limit=3, backup_id="nightly-2")

    assert key == KEY == "_state/delivery-limit-stops/_default/orders%2Feu.json"  # escaped as every storage key
    reason = stop_reason(storage, queue(), 3, never_asked)
    assert reason is not None
    assert "backup 'nightly-2' stopped at this queue's delivery limit of 3" in reason
    assert "its messages may be one below the limit and another capture would bring them to it" in reason and KEY in reason
    assert stop_reason(storage, queue(), 3, never_asked) == reason  # it stays until the risk is gone
    # another queue, or the same name in another vhost, is not concerned
    assert stop_reason(storage, QueueInfo("other", "orders/eu", "quorum", messages=12), 3, never_asked) is None
    # and the catalog shows no backup for it
    assert list_backups(storage) == [] and ManifestStore(storage).backup_ids() == []


def test_a_queue_seen_empty_clears_the_stop_but_a_management_zero_alone_does_not():
    storage = open_storage("memory://")
    record_stop(storage, queue(), limit=3, backup_id="nightly-2")

    # the management API's count is sampled (absent for a new queue): an exact depth of messages keeps the stop
    assert stop_reason(storage, queue(messages=0), 3, lambda: 12) is not None
    assert storage.exists(KEY)

    assert stop_reason(storage, queue(messages=0), 3, lambda: 0) is None
    assert not storage.exists(KEY)
    assert stop_reason(storage, queue(), 3, never_asked) is None  # gone: the next capture proceeds


def test_a_limit_raised_above_the_recorded_one_clears_the_stop_and_a_lowered_one_keeps_it():
    storage = open_storage("memory://")
    record_stop(storage, queue(), limit=3, backup_id="nightly-2")

    assert "delivery limit of 3" in stop_reason(storage, queue(), 2, never_asked)
    assert stop_reason(storage, queue(), 3, never_asked) is not None
    # every message is at most at 2 (one below the old limit), and a return takes it at most to 3: below the new one
    assert stop_reason(storage, queue(), 4, never_asked) is None
    assert not storage.exists(KEY)


@pytest.mark.parametrize("planted", [b"not json", b'{"limit": "3"}', b"[3]", b'{"limit": true}', b" " * 20_000])
def test_an_unreadable_record_counts_as_a_stop_and_says_so(planted):
    storage = open_storage("memory://")
    storage.put(KEY, planted)

    reason = stop_reason(storage, queue(), 20, never_asked)

    assert reason is not None and "is unreadable" in reason and KEY in reason and "delivery limit of 20" in reason
    assert storage.get(KEY) == planted  # left for the operator to see
    assert stop_reason(storage, queue(messages=0), 20, lambda: 0) is None  # an empty queue has nothing at risk
    assert not storage.exists(KEY)
