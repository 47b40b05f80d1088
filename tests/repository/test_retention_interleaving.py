"""Retention interleaved with an incremental stream backup on the real broker: the chain stays whole.

An incremental stream backup is paused after it captured and encoded (its base chosen, its chain not yet
listed anywhere) while another backup's finalize applies retention ``keep_last: 1``. The run then
finishes: its chain is whole, validates deep, and restores every message once, in order, byte-exact.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.repository.chain import dependencies
from airflow_rbak.repository.retention import RetentionPolicy
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.segments.reports import JobReport
from airflow_rbak.storage import open_storage
from tests.restore.conftest import target_vhost  # noqa: F401 - fixture, imported to register it here
from tests.restore.helpers import body_of, declare, expected_view, publish, read_queue

pytestmark = pytest.mark.broker

BEFORE, AFTER, SIZE = 2_000, 1_000, 100
TOTAL = BEFORE + AFTER


def captured_and_encoded(run: BackupRun) -> tuple[list, list]:
    """A backup driven through discover, definitions, capture and encode: everything but its finish."""
    found = run.discover()
    run.export_definitions()
    captures = [run.capture(info) for info in found.queues]
    entries = [run.encode(info, result) for info, result in zip(found.queues, captures)]
    return captures, entries


def finalized_with_retention(run: BackupRun, policy: RetentionPolicy) -> dict:
    """The DAG's path for another backup: its steps, an encode report as the Spark job writes it, then finalize."""
    captures, entries = captured_and_encoded(run)
    report = JobReport("encode", run.settings.backup_id, run.storage.url, details={"queues": [e.to_json() for e in entries]})
    return run.finalize(report.save(run.storage), [asdict(c) for c in captures], retention=policy)


def test_retention_during_an_incremental_stream_backup_leaves_its_chain_whole_and_restorable(
    broker, vhost, target_vhost, tmp_path  # noqa: F811 - the imported fixture
):
    # Given a stream backed up once (i1), then grown
    c = broker.connection
    location = (tmp_path / "backups").as_uri()
    declare(c, vhost, {"events": "stream", "orders": "classic"})
    publish(c, vhost, "events", 0, BEFORE, size=SIZE, decimal=False)
    publish(c, vhost, "orders", 0, 10, size=SIZE)
    streams_only = QueueSelector(vhosts=(vhost,), include=("events",))
    BackupRun(c, BackupSettings("i1", location, selector=streams_only)).run()
    publish(c, vhost, "events", BEFORE, AFTER, size=SIZE, decimal=False)

    # and an incremental backup of it (i2) paused after its capture and encode, before its finish
    incremental = BackupRun(c, BackupSettings("i2", location, selector=streams_only))
    _, entries = captured_and_encoded(incremental)

    # When another backup (i3, of the other queue) finalizes meanwhile with retention keep_last 1
    other = BackupRun(c, BackupSettings("i3", location, selector=QueueSelector(vhosts=(vhost,), include=("orders",))))
    summary = finalized_with_retention(other, RetentionPolicy(keep_last=1))

    # Then retention kept i1, which the running i2 continues
    assert summary["retention_deleted"] == []
    assert summary["retention_kept"]["i1"] == "holds streams that running backups (i2) may continue from"

    # When i2 then finishes
    manifest = incremental.finish(entries)
    incremental.lock.release()

    # Then its chain is whole: it lists i1's segments, every one present and intact
    storage = open_storage(location)
    assert dependencies(manifest) == ("i1",) and manifest.queue(vhost, "events").message_count == TOTAL
    report = validate_backup(storage, "i2", deep=True)
    assert report.valid, [d.to_json() if hasattr(d, "to_json") else d for d in report.defects]

    # and a restore of it into another vhost gives every message once, in order, byte-exact
    settings = RestoreRequest(location, backup_id="i2", vhosts=[vhost], queues=["events"], vhost_map={vhost: target_vhost},
                               restore_definitions=True, checkpoint_state=str(tmp_path / "restore.db"))
    restored = RestoreRun(c, settings).run()
    assert restored.planned == restored.published == TOTAL
    expected = [(body_of(i, SIZE),) + expected_view(i, "stream")[1:] for i in range(TOTAL)]
    assert read_queue(c, target_vhost, "events", "stream", TOTAL) == expected
