"""Every complete backup restores whole on its own, streams included (issue 15, Must show 1-4).

A stream is backed up three times as it grows (10,000, then +5,000, then
+5,000 messages). Each incremental backup captures only the new offsets but
its manifest lists the earlier backups' segments before its own, so the
third backup, and ``latest``, restore all 20,000 messages once, in order,
byte-exact; retention ``keep_last: 1`` keeps exactly the segments the kept
backup lists; the full mode makes each backup a copy of the whole stream.
"""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from argparse import Namespace
from urllib.parse import quote

import pytest

from airflow_rbak.cli.commands import describe_cmd, list_cmd
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.chain import dependencies, referenced_keys, segment_owner
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.plan import plan_restore
from airflow_rbak.storage import open_storage
from tests.codec.independent_reader import read_segment
from tests.restore.conftest import target_vhost  # noqa: F401 - fixture, imported to register it here
from tests.restore.helpers import backup, body_of, declare, expected_view, publish, read_queue

pytestmark = pytest.mark.broker

GROWTH = (10_000, 5_000, 5_000)
TOTAL = sum(GROWTH)
SIZE = 100
SEGMENT_BYTES = 512 * 1024  # several segments per backup, so chains are many segments long
IDS = ("c1", "c2", "c3")


def _grow_and_back_up(broker, vhost: str, location: str, ids=IDS, **settings) -> list:
    """Publish each growth step to stream ``events`` (and 50 messages to classic ``orders``), then back up."""
    declare(broker.connection, vhost, {"events": "stream", "orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 50, size=SIZE)
    manifests, start = [], 0
    for backup_id, count in zip(ids, GROWTH):
        publish(broker.connection, vhost, "events", start, count, size=SIZE, decimal=False)
        start += count
        manifests.append(backup(broker.connection, location, backup_id, vhost,
                                segment_max_bytes=SEGMENT_BYTES, **settings))
    return manifests


def _stream_records(storage, manifest) -> list[dict]:
    """Every record of the backup's stream as a foreign RBAK v1 reader gets it: the manifest as plain JSON, each
    listed segment by its ``key`` in ``sequence`` order, checked against its SHA-256 and read by the independent reader."""
    raw = json.loads(storage.get(f"{manifest.backup_id}/manifest.json"))
    (events,) = [q for q in raw["queues"] if q["name"] == "events"]
    records = []
    for segment in sorted(events["segments"], key=lambda s: s["sequence"]):
        data = storage.get(segment["key"])
        assert hashlib.sha256(data).hexdigest() == segment["checksum"], segment["key"]
        header, found = read_segment(data)
        assert header["record_count"] == segment["record_count"] == len(found), segment["key"]
        records += found
    assert len(records) == events["message_count"]
    return records


def _assert_whole_stream(records: list[dict], count: int) -> None:
    assert [r["delivery_tag"] for r in records] == list(range(count))  # every offset once, in order
    assert [bytes(r["body"]) for r in records] == [body_of(i, SIZE) for i in range(count)]
    assert [r["properties"]["message_id"] for r in records] == [f"m-{i}" for i in range(count)]


def _new_vhost() -> str:
    """A vhost name that does not exist yet: the restore creates it."""
    return f"r-{uuid.uuid4().hex[:10]}"


def _restore(broker, location: str, backup_id: str, source: str, target: str, tmp_path) -> list[tuple]:
    settings = RestoreRequest(location, backup_id=backup_id, vhosts=[source], queues=["events"],
                               vhost_map={source: target}, restore_definitions=True,
                               checkpoint_state=str(tmp_path / f"restore-{target}.db"))
    report = RestoreRun(broker.connection, settings).run()
    assert report.planned == report.published == TOTAL
    return read_queue(broker.connection, target, "events", "stream", TOTAL)


@pytest.fixture
def chain(broker, vhost, tmp_path):
    location = (tmp_path / "backups").as_uri()
    manifests = _grow_and_back_up(broker, vhost, location)
    return location, manifests


def test_the_third_backup_and_latest_each_restore_all_20000_stream_messages_once_in_order(
    broker, vhost, target_vhost, chain, tmp_path
):
    # Given three incremental backups of a growing stream
    location, (first, second, third) = chain
    storage = open_storage(location)
    # Then each backup captured only its new offsets, yet lists its whole chain and declares it
    assert [m.queue(vhost, "events").message_count for m in (first, second, third)] == [10_000, 15_000, 20_000]
    assert [dependencies(m) for m in (first, second, third)] == [(), ("c1",), ("c1", "c2")]
    assert [m.queue(vhost, "events").extensions["chain_base"] for m in (first, second, third)] == [None, "c1", "c2"]
    assert {segment_owner(s.key) for s in third.queue(vhost, "orders").segments} == {"c3"}  # classic: its own copy
    owners = [segment_owner(s.key) for s in third.queue(vhost, "events").segments]
    assert owners == sorted(owners) and set(owners) == {"c1", "c2", "c3"}
    # and the restore plan of the third says which backups it draws from
    plan = plan_restore(storage, RestoreRequest(location, backup_id="latest", vhosts=[vhost], queues=["events"]))
    assert plan.backup_id == "c3" and plan.drawn_from == ("c1", "c2", "c3")
    assert plan.queue(vhost, "events").records_in_window == TOTAL

    # When the third backup and `latest` are restored into two other vhosts
    by_id = _restore(broker, location, "c3", vhost, target_vhost, tmp_path)
    latest_vhost = _new_vhost()
    try:
        by_latest = _restore(broker, location, "latest", vhost, latest_vhost, tmp_path)
    finally:
        broker.api("DELETE", f"vhosts/{quote(latest_vhost, safe='')}")

    # Then each holds all 20,000 messages once, in order, byte-exact with every property and header
    expected = [expected_view(i, "stream") for i in range(TOTAL)]
    expected = [(body_of(i, SIZE),) + e[1:] for i, e in enumerate(expected)]
    assert by_id == expected
    assert by_latest == expected


def test_a_point_in_time_window_over_a_chain_selects_by_record_time_and_names_its_backups(chain, vhost):
    # Given the chain; a window from the second backup's first record to its last
    location, (_, second, _) = chain
    storage = open_storage(location)
    own = [s for s in second.queue(vhost, "events").segments if segment_owner(s.key) == "c2"]
    start, end = own[0].first_timestamp, own[-1].last_timestamp

    # When the third backup is planned with that window
    settings = RestoreRequest(location, backup_id="c3", vhosts=[vhost], queues=["events"],
                               time_window_start=start, time_window_end=end)
    plan = plan_restore(storage, settings)

    # Then it keeps exactly the 5,000 records captured by the second backup, and says it drew on c2 alone
    assert plan.queue(vhost, "events").records_in_window == 5_000
    assert plan.drawn_from == ("c2",)


def test_retention_keep_last_1_keeps_exactly_what_the_kept_backup_needs_and_it_still_restores_whole(
    broker, vhost, target_vhost, s3_storage_url, tmp_path
):
    # Given the chain of three backups in loopback S3 (tests/dags/test_stream_chains.py runs keep_last 1 over a
    # folder; one location keeps this 20,000-message test to one run)
    location = s3_storage_url
    _, _, third = _grow_and_back_up(broker, vhost, location)
    storage = open_storage(location)

    # When retention keep_last 1 runs after the third
    result = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=third.completed_at + 1, protect="c3")

    # Then c1 and c2 are removed as backups but their stream segments stay, because c3 lists them
    assert result.deleted == ["c1", "c2"]
    kept = {segment_owner(s.key): 0 for s in third.queue(vhost, "events").segments}
    for s in third.queue(vhost, "events").segments:
        kept[segment_owner(s.key)] += 1
    assert result.segments_kept_for_chains == {"c1": kept["c1"], "c2": kept["c2"]}
    # and the storage holds nothing that no kept backup needs: c3's own objects and the segments it lists
    needed = set(referenced_keys([third]))
    leftover = [i.key for i in storage.list("") if not i.key.startswith("c3/") and i.key not in needed]
    assert leftover == []
    assert needed <= {i.key for i in storage.list("")}
    # `rbak list` shows the retired folders and who needs them
    summaries = {s.backup_id: s for s in list_backups(storage)}
    assert {k: s.status for k, s in summaries.items()} == {"c1": "retired", "c2": "retired", "c3": "complete"}
    assert summaries["c1"].needed_by == ("c3",) and summaries["c3"].depends_on == ("c1", "c2")
    out = io.StringIO()
    list_cmd(Namespace(path=location, format="text"), out)
    assert "depends on c1, c2" in out.getvalue() and "needed by c3" in out.getvalue()
    out = io.StringIO()
    describe_cmd(Namespace(path=location, backup_id="c3", format="text"), out)
    assert "depends on c1, c2" in out.getvalue() and "chain: segments from c1, c2, c3" in out.getvalue()
    assert validate_backup(storage, "c3", deep=True).defects == []
    # and a restore of `latest` is still whole
    restored = _restore(broker, location, "latest", vhost, target_vhost, tmp_path)
    assert [m[0] for m in restored] == [body_of(i, SIZE) for i in range(TOTAL)]

    # When the stream grows again and a fourth backup continues the chain across the retired folders
    publish(broker.connection, vhost, "events", TOTAL, 1_000, size=SIZE, decimal=False)
    fourth = backup(broker.connection, location, "c4", vhost, segment_max_bytes=SEGMENT_BYTES)
    # Then it lists all 21,000 messages; retention then frees c3's own folder of all but its stream segments
    assert dependencies(fourth) == ("c1", "c2", "c3")
    _assert_whole_stream(_stream_records(storage, fourth), TOTAL + 1_000)
    apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=fourth.completed_at + 1, protect="c4")
    needed = set(referenced_keys([fourth]))
    assert [i.key for i in storage.list("") if not i.key.startswith("c4/") and i.key not in needed] == []


def test_full_mode_makes_each_backup_a_whole_copy_that_retention_of_the_others_leaves_alone(broker, vhost, tmp_path):
    # Given three backups of the growing stream in full mode
    location = (tmp_path / "backups").as_uri()
    manifests = _grow_and_back_up(broker, vhost, location, ids=("f1", "f2", "f3"),
                                  incremental_streams=False)
    storage = open_storage(location)

    # Then each holds its whole stream in its own folder and depends on nothing
    for manifest, count in zip(manifests, (10_000, 15_000, 20_000)):
        assert dependencies(manifest) == ()
        assert {segment_owner(s.key) for q in manifest.queues for s in q.segments} == {manifest.backup_id}
        _assert_whole_stream(_stream_records(storage, manifest), count)
    third_keys = {i.key: i.size for i in storage.list("f3/")}

    # When retention keep_last 1 runs
    result = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=manifests[2].completed_at + 1, protect="f3")

    # Then the others are gone entirely and the third is untouched
    assert result.deleted == ["f1", "f2"] and result.segments_kept_for_chains == {}
    assert {i.key: i.size for i in storage.list("")} == third_keys
    assert validate_backup(storage, "f3", deep=True).defects == []


def test_every_segment_of_every_chain_reads_independently_and_validate_names_a_missing_base(chain, vhost):
    # Given the chain of three backups
    location, manifests = chain
    storage = open_storage(location)

    # Then the independent reader reads every segment each manifest lists, and each is the whole stream so far
    for manifest, count in zip(manifests, (10_000, 15_000, 20_000)):
        _assert_whole_stream(_stream_records(storage, manifest), count)
        report = validate_backup(storage, manifest.backup_id, deep=True)
        assert report.defects == [] and report.records_checked == count + 50

    # When the first backup's folder disappears (a lifecycle rule, a careless delete)
    for info in list(storage.list("c1/")):
        storage.delete(info.key)

    # Then deep validation of the third names the missing base, and every missing segment
    report = validate_backup(storage, "c3", deep=True)
    reasons = [d.reason for d in report.defects]
    assert any(r.startswith("missing base backup 'c1':") for r in reasons), reasons
    c1_segments = [s.key for s in manifests[2].queue(vhost, "events").segments if segment_owner(s.key) == "c1"]
    assert sorted(d.key for d in report.defects if d.reason == "missing") == sorted(c1_segments)
    assert validate_backup(storage, "c2", deep=False).valid is False
