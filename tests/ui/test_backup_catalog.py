"""The view lists a location at most once at a time, and refreshes it at a bounded rate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_rbak.codec import BackupManifest
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import MemoryStorage
from airflow_rbak.storage.base import ObjectInfo, TransientStorageError
from airflow_rbak.ui.backup_catalog import BackupCatalog, LocationNotFoundError
from airflow_rbak.ui.runs import RunIndex

URL = "memory://catalog"
CALLERS = 4


class CountingStorage(MemoryStorage):
    """Counts the listings of the whole location; each waits for ``gate`` when one is set."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0
        self.entered = threading.Event()
        self.gate: threading.Event | None = None
        self.fail = False

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if prefix == "":
            self.listings += 1
            self.entered.set()
            if self.gate is not None:
                assert self.gate.wait(30)
            if self.fail:
                raise TransientStorageError("the bucket is unreachable")
        return super().list(prefix)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def storage() -> CountingStorage:
    storage = CountingStorage()
    for n in (1, 2):
        ManifestStore(storage).save(BackupManifest(f"b{n}", n, "0", completed_at=n + 1))
    return storage


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catalog(storage, clock) -> BackupCatalog:
    return BackupCatalog([URL], ttl=15, min_refresh=5, opener=lambda url: storage, clock=clock)


def test_concurrent_callers_wait_for_the_listing_in_flight_and_share_it(catalog, storage):
    # Given a listing of the location in flight (held until the gate opens)
    storage.gate = threading.Event()
    (location,) = catalog.locations
    with ThreadPoolExecutor(1 + CALLERS) as pool:
        first = pool.submit(catalog.summaries, location)
        assert storage.entered.wait(30)

        # When more callers ask meanwhile, asking for a refresh
        others = [pool.submit(catalog.summaries, location, True) for _ in range(CALLERS)]
        assert catalog.listings.await_waiting(location.id, CALLERS, timeout=30)
        storage.gate.set()

        # Then they all get the one listing's result
        results = [first.result(timeout=30)] + [f.result(timeout=30) for f in others]
    assert storage.listings == 1
    assert all([s.backup_id for s in r] == ["b2", "b1"] for r in results)


def test_a_failing_listing_in_flight_is_shared_too_and_not_retried_within_min_refresh(catalog, storage):
    storage.gate, storage.fail = threading.Event(), True
    (location,) = catalog.locations
    with ThreadPoolExecutor(1 + CALLERS) as pool:
        pages = [pool.submit(catalog.page, location, RunIndex([]))]
        assert storage.entered.wait(30)
        pages += [pool.submit(catalog.page, location, RunIndex([]), 0, 50, True) for _ in range(CALLERS)]
        assert catalog.listings.await_waiting(location.id, CALLERS, timeout=30)
        storage.gate.set()
        errors = [p.result(timeout=30)["error"] for p in pages]
    again = catalog.page(location, RunIndex([]), refresh=True)["error"]

    assert storage.listings == 1
    assert errors == [again] * (1 + CALLERS) == ["TransientStorageError: the bucket is unreachable"] * (1 + CALLERS)


def test_refresh_lists_again_at_most_once_per_min_refresh(catalog, storage, clock):
    (location,) = catalog.locations
    catalog.summaries(location)

    for _ in range(10):
        catalog.summaries(location, refresh=True)
    within = storage.listings
    clock.now += 5
    catalog.summaries(location, refresh=True)
    catalog.summaries(location, refresh=True)

    assert (within, storage.listings) == (1, 2)


def test_an_unknown_backup_id_lists_again_at_most_once_per_min_refresh(catalog, storage, clock):
    (location,) = catalog.locations

    for _ in range(10):
        with pytest.raises(LocationNotFoundError, match="no backup 'nope'"):
            catalog.detail(location, "nope", RunIndex([]))
    within = storage.listings
    clock.now += 5
    ManifestStore(storage).save(BackupManifest("nope", 3, "0", completed_at=4))
    found = catalog.detail(location, "nope", RunIndex([]))

    assert (within, storage.listings) == (1, 2) and found["backup"]["backup_id"] == "nope"


def test_without_refresh_a_listing_is_kept_for_ttl(catalog, storage, clock):
    (location,) = catalog.locations
    catalog.summaries(location)
    clock.now += 14.9
    catalog.summaries(location)
    kept = storage.listings
    clock.now += 0.1
    catalog.summaries(location)

    assert (kept, storage.listings) == (1, 2)
