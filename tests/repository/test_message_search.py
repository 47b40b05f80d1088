"""Reading a backup's messages and searching across backups, on real backups in file and S3 storage.

Each filter is checked against a plain Python predicate over the records the backup was written from; the
search counts a message held by several backups once; a damaged segment is named and hides nothing else; a
runaway regex stops within its bound; and nothing is ever written to the location.
"""

from __future__ import annotations

import dataclasses
import struct
import time

import pytest

from airflow_rbak.codec import compression
from airflow_rbak.codec.record_identity import fingerprint
from airflow_rbak.codec.records import encode_record
from airflow_rbak.codec.segment import encode_payload
from airflow_rbak.repository.body_regex import REGEX_SECONDS, RegexTimeoutError
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.message_reader import DamagedSegment, StoredMessage, read_messages
from airflow_rbak.repository.message_search import BackupRange, plan_search, search_backups
from airflow_rbak.storage import open_storage
from tests.repository.message_backups import DLQ, ORDERS, T0, ReadOnlyStorage, write_backup

#: Each filter with the predicate over the source records that says what it must select.
FILTERS = [
    ({"since": T0 + 10_000, "until": "2024-11-22T02:00:20Z"}, lambda i, r: 10 <= i <= 20),
    ({"message_id": "order-42"}, lambda i, r: i == 42),
    ({"correlation_id": "corr-3"}, lambda i, r: i % 4 == 3),
    ({"routing_key": "orders.eu.*"}, lambda i, r: i % 2 == 0),
    ({"routing_key": "*.refunded"}, lambda i, r: i % 3 == 1),
    ({"exchange": "orders"}, lambda i, r: i % 4 != 0),
    ({"headers": {"x-tenant": "globex"}}, lambda i, r: i % 3 == 0),
    ({"headers": {"x-n": "33"}}, lambda i, r: i == 33),
    ({"content_type": "text/plain"}, lambda i, r: i % 5 == 0),
    ({"body_contains": "471"}, lambda i, r: 10 <= i <= 19),
    ({"body_contains_hex": "00ff"}, lambda i, r: i == 7),
    ({"body_regex": r'"amount":\d{3}\b'}, lambda i, r: i % 5 != 0 and i != 7 and i >= 10),
    ({"routing_key": "orders.us.*", "headers": {"x-tenant": "acme"}, "since": T0 + 30_000},
     lambda i, r: i % 2 == 1 and i % 3 != 0 and i >= 30),
]


def positions(items) -> list[int]:
    return [m.position for m in items if isinstance(m, StoredMessage)]


def test_each_filter_selects_exactly_its_records_in_stored_order(location):
    storage = open_storage(location)
    manifest = write_backup(storage, "b1", ORDERS)
    assert len(manifest.queue("/", "orders").segments) > 3  # the reading crosses segment boundaries
    for params, expected in FILTERS:
        found = list(read_messages(storage, manifest, vhost="/", queue="orders",
                                   message_filter=MessageFilter.from_params(params)))
        assert positions(found) == [i for i, r in enumerate(ORDERS) if expected(i, r)], params
        assert all(m.record == ORDERS[m.position] for m in found), params  # byte for byte the record stored there


def test_the_python_reader_selects_what_the_c_accelerator_selects(tmp_path, monkeypatch):
    from airflow_rbak.codec import records

    storage = open_storage(tmp_path.as_uri())
    manifest = write_backup(storage, "b1", ORDERS)
    accelerated = {str(p): positions(read_messages(storage, manifest, message_filter=MessageFilter.from_params(p)))
                   for p, _ in FILTERS}
    for name in ("accelerated_select", "accelerated_read", "accelerated_decode"):
        monkeypatch.setattr(records, name, None)
    for params, _ in FILTERS:
        found = list(read_messages(storage, manifest, message_filter=MessageFilter.from_params(params)))
        assert positions(found) == accelerated[str(params)] and found, params


def test_every_record_carries_its_place_in_the_backup(location):
    storage = open_storage(location)
    manifest = write_backup(storage, "b1", ORDERS)
    found = list(read_messages(storage, manifest))
    assert [(m.vhost, m.queue) for m in found] == [("/", "orders")] * len(ORDERS) + [("prod", "dlq")] * len(DLQ)
    for queue in manifest.queues:
        ours = [m for m in found if (m.vhost, m.queue) == (queue.vhost, queue.name)]
        expected = [(s.key, s.sequence, i) for s in queue.segments for i in range(s.record_count)]
        assert [(m.segment, m.sequence, m.index) for m in ours] == expected
        assert [m.position for m in ours] == list(range(len(ours)))


def test_the_reader_stops_where_its_consumer_stops(location):
    storage = ReadOnlyStorage(open_storage(location))
    manifest = write_backup(open_storage(location), "b1", ORDERS)
    reader = read_messages(storage, manifest, queue="orders")
    first = [next(reader) for _ in range(3)]
    assert positions(first) == [0, 1, 2]
    assert storage.gets == [manifest.queues[0].segments[0].key]  # one segment fetched, no more


def test_a_message_in_several_backups_is_found_once_with_every_backup_that_holds_it(location):
    storage = open_storage(location)
    write_backup(storage, "b1", ORDERS[:40])
    # the next backup of the same queue: the same messages taken again (another time, redelivered), and newer ones
    write_backup(storage, "b2", ORDERS, later_by_ms=3_600_000)
    result = search_backups(storage, ["b1", "b2"], MessageFilter(routing_key="orders.eu.paid"))
    wanted = [i for i in range(len(ORDERS)) if i % 6 == 0]
    assert result.backups_searched == ["b1", "b2"]
    # the dead-letter queue's copy of order-0 is another message: another queue
    # (listed in stored order: b1's orders, b1's dead-letter queue, then what only b2 holds)
    assert [(hit.first.queue, hit.first.summary["message_id"]) for hit in result.hits.values()] == [
        *(("orders", f"order-{i}") for i in wanted if i < 40), ("dlq", "order-0"),
        *(("orders", f"order-{i}") for i in wanted if i >= 40)]
    assert [[h["backup_id"] for h in hit.held_by] for hit in result.hits.values()] == [
        *(["b1", "b2"] for i in wanted if i < 40), ["b1", "b2"], *(["b2"] for i in wanted if i >= 40)]
    assert result.matched_records == len(wanted) + len([i for i in wanted if i < 40]) + 2
    hit = next(iter(result.hits.values()))
    assert [(h["segment"], h["position"]) for h in hit.held_by] == [("b1/queues/_default/orders/segment-0001.zst", 0),
                                                                    ("b2/queues/_default/orders/segment-0001.zst", 0)]
    assert hit.first.fingerprint == fingerprint(ORDERS[0])


def test_identical_messages_in_one_queue_stay_two_messages(location):
    storage = open_storage(location)
    twice = [ORDERS[1], ORDERS[1], ORDERS[2]]
    write_backup(storage, "b1", twice, dlq=False)
    write_backup(storage, "b2", twice, later_by_ms=1000, dlq=False)
    result = search_backups(storage, ["b1", "b2"], MessageFilter(message_id="order-1"))
    assert [[(h["backup_id"], h["position"]) for h in hit.held_by] for hit in result.hits.values()] == [
        [("b1", 0), ("b2", 0)], [("b1", 1), ("b2", 1)]]


def test_the_limit_bounds_what_is_kept_and_counts_the_rest(location):
    storage = open_storage(location)
    write_backup(storage, "b1", ORDERS, dlq=False)
    write_backup(storage, "b2", ORDERS, later_by_ms=1000, dlq=False)
    result = search_backups(storage, ["b1", "b2"], MessageFilter(exchange="orders"), limit=5)
    assert len(result.hits) == 5
    assert all(len(hit.held_by) == 2 for hit in result.hits.values())
    matching = sum(1 for i in range(len(ORDERS)) if i % 4)
    assert result.matched_records == 2 * matching and result.more_records == 2 * matching - 10


def test_a_damaged_segment_is_named_and_hides_no_other_match(location):
    storage = open_storage(location)
    b1 = write_backup(storage, "b1", ORDERS, dlq=False)
    write_backup(storage, "b2", ORDERS, later_by_ms=1000, dlq=False)
    bad = b1.queue("/", "orders").segments[1]
    data = bytearray(storage.get(bad.key))
    data[40] ^= 0xFF  # same size: the catalog still lists b1 complete; reading it finds the damage
    storage.put(bad.key, bytes(data))

    result = search_backups(storage, ["b1", "b2"], MessageFilter(content_type="application/json"))

    assert [(d.backup_id, d.segment) for d in result.damaged] == [("b1", bad.key)]
    assert "SHA-256" in result.damaged[0].reason and not result.ok
    wanted = [i for i in range(len(ORDERS)) if i % 5]
    lost = set(range(b1.queue("/", "orders").segments[0].record_count,
                     b1.queue("/", "orders").segments[0].record_count + bad.record_count))
    # every match listed: those of the unreadable segment from b2, after what b1 gave (stored order)
    order = [i for i in wanted if i not in lost] + [i for i in wanted if i in lost]
    assert lost and [hit.first.summary["message_id"] for hit in result.hits.values()] == [f"order-{i}" for i in order]
    assert [[h["backup_id"] for h in hit.held_by] for hit in result.hits.values()] == [
        ["b2"] if i in lost else ["b1", "b2"] for i in order]


def reseal(storage, manifest, segment, raw: list[bytes]):
    """Replace ``segment`` with one framing ``raw`` (records' JSON, well formed or not) and make the manifest vouch
    for it: bytes a writer produced, not bytes changed in transit."""
    sealed = encode_payload(b"".join(struct.pack("<I", len(r)) + r for r in raw), len(raw), T0, T0)
    storage.put(segment.key, sealed.data)
    entry = next(q for q in manifest.queues if segment in q.segments)
    entry.segments[entry.segments.index(segment)] = dataclasses.replace(
        segment, record_count=len(raw), size_bytes=len(sealed.data), uncompressed_bytes=sealed.uncompressed_bytes,
        checksum=sealed.sha256)
    ManifestStore(storage).save(manifest)
    return manifest


@pytest.mark.parametrize("chunk", [None, 64])
def test_a_segment_damaged_inside_its_records_yields_what_came_before_and_says_how_many(tmp_path, monkeypatch, chunk):
    if chunk:  # records carried from one decompressed chunk to the next
        monkeypatch.setattr(compression, "_CHUNK", chunk)
    storage = open_storage(tmp_path.as_uri())
    manifest = write_backup(storage, "b1", ORDERS[:40], segment_max_bytes=10**6, dlq=False)
    segment = manifest.queues[0].segments[0]
    good = [encode_record(r) for r in ORDERS[:5]]
    reseal(storage, manifest, segment, [*good[:3], b'{"not": "a record"}', *good[3:]])

    found = list(read_messages(storage, manifest, queue="orders"))

    assert [m.record for m in found[:-1]] == ORDERS[:3] and positions(found) == [0, 1, 2]
    damaged = found[-1]
    assert isinstance(damaged, DamagedSegment) and damaged.segment == segment.key and damaged.records_read == 3
    assert "record 3" in damaged.reason
    assert str(damaged).endswith("(3 records read before it)")


@pytest.mark.parametrize("chunk", [64, 1000])
def test_records_split_across_decompressed_chunks_read_as_stored(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(compression, "_CHUNK", chunk)
    storage = open_storage(tmp_path.as_uri())
    manifest = write_backup(storage, "b1", ORDERS, segment_max_bytes=10**6)
    assert [m.record for m in read_messages(storage, manifest)] == ORDERS + DLQ


def test_positions_follow_the_segments_sequence_however_the_manifest_lists_them(tmp_path):
    storage = open_storage(tmp_path.as_uri())
    manifest = write_backup(storage, "b1", ORDERS, dlq=False)
    entry = manifest.queues[0]
    assert len(entry.segments) > 3
    entry.segments.reverse()  # another writer may list them in any order; sequence is the stored order
    ManifestStore(storage).save(manifest)
    reread = ManifestStore(storage).load("b1")
    assert [s.sequence for s in reread.queues[0].segments] != sorted(s.sequence for s in reread.queues[0].segments)

    found = list(read_messages(storage, reread))

    assert [m.record for m in found] == ORDERS and positions(found) == list(range(len(ORDERS)))


def test_a_runaway_regex_stops_the_search_within_its_bound(location):
    storage = open_storage(location)
    manifest = write_backup(storage, "b1", [*ORDERS[:3], dataclasses.replace(ORDERS[3], body=b"a" * 5000 + b"!")])
    started = time.monotonic()
    with pytest.raises(RegexTimeoutError) as err:
        list(read_messages(storage, manifest, message_filter=MessageFilter(body_regex=r"(a|aa)+$")))
    assert time.monotonic() - started < REGEX_SECONDS + 5
    assert err.value.field == "body_regex"


def test_backup_ranges_pick_complete_backups_in_creation_order_and_name_the_rest(location):
    storage = open_storage(location)
    for backup_id in ("a", "b", "c"):
        write_backup(storage, backup_id, ORDERS[:2])
    manifest = ManifestStore(storage).load("b")
    manifest.completed_at = None
    ManifestStore(storage).save(manifest)
    created = {s.backup_id: s.created_at for s in list_backups(storage)}

    chosen, skipped = plan_search(storage, BackupRange())
    assert [s.backup_id for s in chosen] == ["a", "c"] and skipped == [
        {"backup_id": "b", "status": "incomplete",
         "problem": "not finished: no completed_at (still running, or stopped: re-run the same backup_id)"}]
    assert [s.backup_id for s in plan_search(storage, BackupRange(from_id="b", to_id="c"))[0]] == ["c"]
    assert [s.backup_id for s in plan_search(storage, BackupRange(until=created["a"]))[0]] == ["a"]
    with pytest.raises(ValueError, match="no backup 'zz'"):
        plan_search(storage, BackupRange(from_id="zz"))
    with pytest.raises(ValueError, match="not both"):
        BackupRange(from_id="a", since=1)


def test_reading_and_searching_never_write_to_the_location(location):
    write_backup(open_storage(location), "b1", ORDERS)
    write_backup(open_storage(location), "b2", ORDERS, later_by_ms=1000)
    storage = ReadOnlyStorage(open_storage(location))
    before = sorted((i.key, i.size) for i in storage.list(""))

    chosen, _ = plan_search(storage, BackupRange())
    result = search_backups(storage, [s.backup_id for s in chosen], MessageFilter(body_contains="47"))
    list(read_messages(storage, ManifestStore(storage).load("b1")))

    assert result.matched_records == 2 * len(ORDERS) + 2 * len(DLQ)
    assert sorted((i.key, i.size) for i in storage.list("")) == before


def test_a_segment_without_the_wanted_id_is_not_parsed_and_nothing_is_missed(location, monkeypatch):
    from airflow_rbak.repository import message_reader

    storage = open_storage(location)
    manifest = write_backup(storage, "b1", ORDERS, dlq=False)
    parsed: list[int] = []
    real = message_reader.iter_record_batches

    def counting(data, header, *args):
        parsed.append(header.record_count)
        return real(data, header, *args)

    monkeypatch.setattr(message_reader, "iter_record_batches", counting)
    found = list(read_messages(storage, manifest, message_filter=MessageFilter(message_id="order-42")))
    assert positions(found) == [42] and found[0].record == ORDERS[42]
    assert len(parsed) == 1  # only the segment that holds it


def test_a_wanted_id_split_between_two_decompressed_chunks_is_still_found(tmp_path, monkeypatch):
    from airflow_rbak.repository import message_reader

    storage = open_storage(tmp_path.as_uri())
    manifest = write_backup(storage, "b1", ORDERS, dlq=False)
    real = message_reader.stream

    def tiny_chunks(*args, **kwargs):
        for chunk in real(*args, **kwargs):
            for at in range(0, len(chunk), 5):
                yield chunk[at:at + 5]

    monkeypatch.setattr(message_reader, "stream", tiny_chunks)
    for wanted in ("order-42", "order-0", "order-59"):
        found = list(read_messages(storage, manifest, message_filter=MessageFilter(message_id=wanted)))
        assert [m.record.properties.message_id for m in found] == [wanted]
