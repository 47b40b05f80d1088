"""MemoryStorage sharing rules: named stores are shared, unnamed ones are private."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from airflow_rbak.storage import MemoryStorage, ObjectNotFoundError, open_storage


@pytest.fixture
def store_name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    MemoryStorage.discard(name)


def test_given_a_named_store_when_opened_twice_by_url_then_both_see_the_same_objects(store_name: str) -> None:
    writer = open_storage(f"memory://{store_name}")
    reader = open_storage(f"memory://{store_name}")

    writer.put("k", b"shared")

    assert reader.get("k") == b"shared"
    assert reader.url == f"memory://{store_name}"


def test_given_two_unnamed_stores_when_one_is_written_then_the_other_stays_empty() -> None:
    first = open_storage("memory://")
    second = open_storage("memory://")

    first.put("k", b"mine")

    with pytest.raises(ObjectNotFoundError):
        second.get("k")


def test_given_a_discarded_name_when_opened_again_then_it_starts_empty(store_name: str) -> None:
    MemoryStorage(store_name).put("k", b"v")

    MemoryStorage.discard(store_name)

    assert list(MemoryStorage(store_name).list()) == []


def test_given_threads_writing_distinct_keys_when_done_then_every_object_is_there(store_name: str) -> None:
    storage = MemoryStorage(store_name)

    def write(thread: int) -> None:
        for i in range(200):
            storage.put(f"t{thread}/{i:03d}", bytes([thread, i % 256]))
            list(storage.list(f"t{thread}/"))  # listing while others write must not fail

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    keys = [info.key for info in storage.list()]
    assert len(keys) == 800
    assert keys == sorted(keys)
    assert storage.get("t3/199") == bytes([3, 199])
