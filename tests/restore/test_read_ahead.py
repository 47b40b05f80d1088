"""Reading a queue's records ahead of the publisher: same items, same order, same errors, bounded, stoppable."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from airflow_rbak.restore.read_ahead import ReadAhead


class Broken(Exception):
    """What a source raises part-way."""


def numbers(count: int, fail_at: int | None = None, closed: list[bool] | None = None) -> Iterator[int]:
    try:
        for i in range(count):
            if i == fail_at:
                raise Broken(f"at {i}")
            yield i
    finally:
        if closed is not None:
            closed.append(True)


@pytest.mark.parametrize("count", [0, 1, 5, 256, 257, 3000])
def test_read_ahead_yields_every_item_in_order(count):
    # Given a source of count items, When it is read ahead in batches of 7, Then the same items come out in order
    with ReadAhead(numbers(count), batch=7, depth=2) as items:
        assert list(items) == list(range(count))


def test_an_error_of_the_source_comes_out_where_its_item_would_have():
    # Given a source that raises at its 10th item
    items = ReadAhead(numbers(100, fail_at=10), batch=4, depth=2)
    # When it is read, Then the 10 items before it come out, and then the error itself
    got = []
    with pytest.raises(Broken, match="at 10"):
        for item in items:
            got.append(item)
    assert got == list(range(10))
    items.close()


def test_a_slice_then_the_rest_reads_the_source_once_in_order():
    # Given the resume's way of reading: the first few records skipped, then the rest published
    import itertools

    with ReadAhead(numbers(50), batch=8, depth=2) as items:
        skipped = list(itertools.islice(items, 13))
        rest = list(items)
    # Then the two together are the source, once
    assert skipped + rest == list(range(50))


def test_the_reader_stays_within_its_bound_and_stops_when_the_publisher_stops():
    # Given an endless source read ahead by at most 2 batches of 5
    produced = []
    closed: list[bool] = []
    taken = threading.Event()

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                produced.append(i)
                yield i
                i += 1
        finally:
            closed.append(True)

    items = ReadAhead(endless(), batch=5, depth=2)
    assert next(items) == 0
    taken.set()
    # When the publisher stops
    items.close()
    # Then the reader has read no more than the hand-over holds, a batch in hand and one being filled,
    # and it closed its source
    assert len(produced) <= 5 * (2 + 2) + 1
    assert closed == [True]
    with pytest.raises(StopIteration):
        next(items)
