"""RetryingStorage: retries transient failures, boundedly, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import (
    MemoryStorage,
    ObjectInfo,
    ObjectNotFoundError,
    RetryingStorage,
    StorageError,
    TransientStorageError,
)


class FlakyStorage(MemoryStorage):
    """A memory store whose next ``failures`` calls raise a chosen error before working."""

    def __init__(self, failures: int, error: type[StorageError] = TransientStorageError) -> None:
        super().__init__()
        self.failures = failures
        self.error = error
        self.calls = 0

    def _maybe_fail(self, key: str) -> None:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise self.error(f"flaky failure {self.calls}", key)

    def put(self, key: str, data: bytes) -> None:
        self._maybe_fail(key)
        super().put(key, data)

    def get(self, key: str) -> bytes:
        self._maybe_fail(key)
        return super().get(key)


class BrokenListStorage(MemoryStorage):
    """A memory store whose listing breaks off after ``break_after`` items, ``times`` times."""

    def __init__(self, break_after: int, times: int) -> None:
        super().__init__()
        self.break_after = break_after
        self.times = times
        self.listings = 0

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self.listings += 1
        for count, info in enumerate(super().list(prefix)):
            if count == self.break_after and self.times > 0:
                self.times -= 1
                raise TransientStorageError("connection reset while listing")
            yield info


class Sleeps:
    """Record the requested delays instead of sleeping, so tests run instantly."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _retrying(inner: MemoryStorage, retries: int, sleeps: Sleeps, jitter: float = 1.0) -> RetryingStorage:
    return RetryingStorage(inner, retries=retries, base_delay=0.1, max_delay=0.5, sleep=sleeps, jitter=lambda: jitter)


def test_given_two_transient_failures_when_retries_allow_three_then_the_call_succeeds() -> None:
    inner, sleeps = FlakyStorage(failures=2), Sleeps()
    storage = _retrying(inner, retries=3, sleeps=sleeps)

    storage.put("k", b"value")

    assert inner.calls == 3
    assert storage.get("k") == b"value"
    assert sleeps.delays == pytest.approx([0.1, 0.2])


def test_given_more_failures_than_retries_when_called_then_the_last_transient_error_is_raised() -> None:
    inner, sleeps = FlakyStorage(failures=10), Sleeps()
    storage = _retrying(inner, retries=4, sleeps=sleeps)

    with pytest.raises(TransientStorageError) as raised:
        storage.get("k")

    assert inner.calls == 5  # one attempt plus four retries
    assert str(raised.value) == "flaky failure 5"
    assert sleeps.delays == pytest.approx([0.1, 0.2, 0.4, 0.5])  # doubling, capped at max_delay


def test_given_jitter_when_waiting_then_each_delay_is_scaled_by_it() -> None:
    inner, sleeps = FlakyStorage(failures=2), Sleeps()

    _retrying(inner, retries=2, sleeps=sleeps, jitter=0.25).put("k", b"v")

    assert sleeps.delays == pytest.approx([0.025, 0.05])


def test_given_zero_retries_when_a_transient_failure_happens_then_it_is_raised_at_once() -> None:
    inner, sleeps = FlakyStorage(failures=1), Sleeps()

    with pytest.raises(TransientStorageError):
        _retrying(inner, retries=0, sleeps=sleeps).put("k", b"v")

    assert inner.calls == 1
    assert sleeps.delays == []


@pytest.mark.parametrize("error", [ObjectNotFoundError, StorageError])
def test_given_a_final_error_when_called_then_it_is_not_retried(error: type[StorageError]) -> None:
    inner, sleeps = FlakyStorage(failures=1, error=error), Sleeps()

    with pytest.raises(error):
        _retrying(inner, retries=5, sleeps=sleeps).get("k")

    assert inner.calls == 1
    assert sleeps.delays == []


def test_given_a_missing_key_when_read_through_retries_then_not_found_immediately() -> None:
    inner, sleeps = FlakyStorage(failures=0), Sleeps()

    with pytest.raises(ObjectNotFoundError):
        _retrying(inner, retries=5, sleeps=sleeps).get("missing")

    assert inner.calls == 1


def test_given_a_listing_that_breaks_midway_when_retried_then_each_key_is_yielded_once_in_order() -> None:
    inner, sleeps = BrokenListStorage(break_after=2, times=2), Sleeps()
    for key in ["a", "b", "c", "d", "e"]:
        inner.put(key, key.encode())

    keys = [info.key for info in _retrying(inner, retries=3, sleeps=sleeps).list()]

    assert keys == ["a", "b", "c", "d", "e"]
    assert inner.listings == 3
    assert len(sleeps.delays) == 2


def test_given_a_listing_that_keeps_breaking_when_retries_run_out_then_transient_error() -> None:
    inner, sleeps = BrokenListStorage(break_after=0, times=99), Sleeps()
    inner.put("a", b"")

    with pytest.raises(TransientStorageError):
        list(_retrying(inner, retries=2, sleeps=sleeps).list())

    assert inner.listings == 3


def test_given_negative_retries_when_constructed_then_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        RetryingStorage(MemoryStorage(), retries=-1)


def test_given_a_wrapped_storage_when_asked_for_its_url_then_it_is_the_inner_url() -> None:
    assert RetryingStorage(MemoryStorage("retry-url")).url == "memory://retry-url"
    MemoryStorage.discard("retry-url")
