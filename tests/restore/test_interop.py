"""A backup made by another RBAK writer, within what docs/format.md allows, is validated, dumped and restored as written.

The writer (``tests/codec/independent_writer.py``) shares no code with the
package. It stores names verbatim in keys, cuts payloads into several zstd
frames (with and without a declared size) and several LZ4 frames, and keeps
records out of time order.
"""

from __future__ import annotations

import json

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.plan import plan_restore
from airflow_rbak.restore.records import iter_window_records
from airflow_rbak.storage import open_storage
from tests.codec.independent_writer import PROPERTIES, QueueSpec, SegmentSpec, record, write_backup
from tests.reliability.expect import header_order_free
from tests.restore.helpers import read_queue

pytestmark = pytest.mark.broker

SOURCE_VHOST = "prod"
NAMES = ("orders%v2", "a b", "naïve-ü.q", "q" * 250)
T0 = 1_767_225_600_000
PER_SEGMENT = 3
#: zstd frames that state their size, zstd frames that state none, and LZ4 frames of both kinds.
SEGMENTS = ((1, 3, True), (1, 2, False), (2, 3, True), (2, 2, False))
COUNT = PER_SEGMENT * len(SEGMENTS)
#: backed_up_at of record i of each queue: seconds after T0, out of order (a permutation of 0..COUNT-1).
ORDER = [(5 * i) % COUNT for i in range(COUNT)]


def body(q: int, i: int) -> bytes:
    """Every byte value occurs; record 4 of each queue has an empty body (``null`` in the record)."""
    return b"" if i == 4 else bytes((q * 31 + i * 7 + k) % 256 for k in range(300))


def records_of(q: int, name: str) -> list[dict]:
    return [record(body(q, i), T0 + ORDER[i] * 1000, SOURCE_VHOST, name, i + 1,
                   content_type="application/octet-stream", content_encoding="identity", delivery_mode=2, priority=i % 10,
                   correlation_id=f"c-{i}", reply_to="replies", expiration="86400000", message_id=f"{q}-{i}",
                   timestamp=1_700_000_000 + i, type_field="test.event", app_id="elsewhere", cluster_id="c1",
                   headers=[["seq", {"Long": i}], ["name", {"LongString": f"m-{i}"}]], exchange="orders.x")
            for i in range(COUNT)]


@pytest.fixture
def foreign_backup(tmp_path):
    """The independent writer's backup in a folder: its URL and each queue's records in stored order."""
    root = tmp_path / "foreign"
    queues, written = [], {}
    for q, name in enumerate(NAMES):
        records = records_of(q, name)
        written[name] = records
        queues.append(QueueSpec(SOURCE_VHOST, name, segments=[
            SegmentSpec(records[n * PER_SEGMENT : (n + 1) * PER_SEGMENT], compression, frames, sized)
            for n, (compression, frames, sized) in enumerate(SEGMENTS)]))
    manifest = write_backup(root, "foreign-1", queues, created_at=T0 - 60_000)
    return root, root.as_uri(), manifest, written


def consumer_view(rec: dict) -> tuple:
    """What a consumer of the restored queue should see of a record: body, every property (pika's ``type`` holds
    ``type_field``; the order is the format's), the headers."""
    props = tuple(rec["properties"][name] for name in PROPERTIES)
    headers = tuple((k, H.long(v["Long"]) if "Long" in v else H.long_string(v["LongString"])) for k, v in rec["headers"])
    return bytes(rec["body"] or b""), props, headers


def test_validate_deep_finds_no_defect_in_the_foreign_backup(foreign_backup, capsys):
    _, url, _, _ = foreign_backup

    code = main(["validate", "--path", url, "--backup-id", "foreign-1", "--deep", "--format", "json"])

    report = json.loads(capsys.readouterr().out)
    assert (code, report["valid"], report["defects"]) == (0, True, [])
    assert (report["segments_checked"], report["records_checked"]) == (len(NAMES) * len(SEGMENTS), len(NAMES) * COUNT)


def test_segment_dump_returns_exactly_the_records_written(foreign_backup, capsys):
    root, _, manifest, written = foreign_backup
    for entry in manifest["queues"]:
        dumped = []
        for meta in entry["segments"]:
            assert main(["segment", "dump", str(root / meta["key"]), "--format", "json"]) == 0
            header, *records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert (header["record_count"], header["sha256"]) == (meta["record_count"], meta["checksum"])
            dumped += records
        assert dumped == written[entry["name"]], entry["name"]


def test_a_window_selects_exactly_the_records_stamped_inside_it(foreign_backup):
    _, url, _, written = foreign_backup
    start, end = T0 + 3000, T0 + 7000  # seconds 3..7: records in several segments, none of them at a segment's ends
    settings = RestoreRequest(url, backup_id="foreign-1", vhosts=[SOURCE_VHOST], time_window_start=start,
                               time_window_end=end, checkpoint_state="memory://")
    storage = open_storage(url)

    plan = plan_restore(storage, settings)

    for queue in plan.queues:
        selected = [p.record.properties.message_id for p in iter_window_records(storage, queue, settings)]
        expected = [r["properties"]["message_id"] for r in written[queue.source_queue] if start <= r["backed_up_at"] <= end]
        assert selected == expected and len(expected) == 5, queue.source_queue
        assert queue.records_in_window == 5


def test_a_restore_into_another_vhost_publishes_each_record_once_in_stored_order(broker, behaviour, vhost, foreign_backup,
                                                                                  tmp_path):
    _, url, _, written = foreign_backup
    settings = RestoreRequest(url, backup_id="foreign-1", vhosts=[SOURCE_VHOST], vhost_map={SOURCE_VHOST: vhost},
                               checkpoint_state=str(tmp_path / "restore.db"))

    report = RestoreRun(broker.connection, settings).run()

    assert report.planned == report.published == len(NAMES) * COUNT
    for name, records in written.items():
        restored = read_queue(broker.connection, vhost, name, "classic", COUNT)
        expected = [consumer_view(r) for r in records]
        # (a 4.x classic queue delivers the header table sorted by key: tests/broker/behaviour.py)
        assert [(view[0], view[1], view[2]) for view in restored] == (
            header_order_free(expected) if behaviour.sorts_headers("classic") else expected), name
