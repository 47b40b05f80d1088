"""Whatever the journal lost is a gap with its time range, never hidden: a full journal, a journal disabled or its
queue deleted and enabled again, tracing turned off on the node (by rabbitmqctl or a restart), a previous archive
that is gone; an archive run refuses a journal queue that is missing (it never creates one), and an archive run that
fails before its manifest loses nothing."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from urllib.parse import quote

import pytest

from airflow_rbak.broker import journal
from airflow_rbak.broker.journal import JournalError
from airflow_rbak.journal.archive_run import ArchiveSettings, JournalArchive
from airflow_rbak.repository.journal_chain import journal_chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.storage import open_storage
from tests.journal.helpers import archive, channel_of, records_of
from tests.journal.traffic import now_ms
from tests.restore.helpers import backup


def _publish(broker, vhost, bodies) -> None:
    conn, channel = channel_of(broker.connection, vhost)
    channel.queue_declare("q", durable=True)
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", "q", body)
    conn.close()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _bodies(url, *archives) -> list[bytes]:
    return [bytes(r["body"]) for a in archives for r in records_of(url, a.backup_id)]


def test_a_full_journal_drops_its_oldest_and_is_a_gap_from_the_last_archive_to_the_first_mark_kept(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost, max_messages=6)
    first = archive(broker.connection, vhost, url)
    _publish(broker, vhost, [b"m%d" % n for n in range(20)])  # the journal keeps the newest six
    deadline = time.monotonic() + 60  # the trace messages are enqueued after the publishes' own confirms
    while not journal.status(broker.connection, vhost).full:
        assert time.monotonic() < deadline, "the journal never filled up"
        time.sleep(0.1)

    second = archive(broker.connection, vhost, url)

    kept = _bodies(url, second)  # the newest (the run's own first clock mark may push one more out)
    assert 1 <= len(kept) <= 6 and kept == [b"m%d" % n for n in range(20 - len(kept), 20)]
    [gap] = second.gaps
    assert gap["from"] == first.to_ms and first.to_ms < gap["to"] <= second.to_ms and "full" in gap["reason"]
    assert journal.status(broker.connection, vhost).depth == 0


def test_a_recovery_over_a_full_journals_lost_messages_names_the_gap_and_its_range(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost, max_messages=6)
    _publish(broker, vhost, [b"before"])
    first = archive(broker.connection, vhost, url)
    snapshot = backup(broker.connection, url, "snap-1", vhost)
    _publish(broker, vhost, [b"m%d" % n for n in range(20)])  # the oldest unarchived are dropped
    deadline = time.monotonic() + 60
    while not journal.status(broker.connection, vhost).full:
        assert time.monotonic() < deadline, "the journal never filled up"
        time.sleep(0.1)
    second = archive(broker.connection, vhost, url)
    [gap] = second.gaps
    request = RestoreRequest(url, backup_id="latest", vhosts=[vhost], vhost_map={vhost: f"{vhost}-r"},
                             journal_until=second.to_ms, checkpoint_state=str(tmp_path / "restore.db"))

    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, request).plan()

    # the gap runs from the first archive's end (after the snapshot began) to the first clock mark kept
    assert first.to_ms == gap["from"] < gap["to"] <= second.to_ms and snapshot.created_at < gap["to"]
    said = str(refused.value)
    assert "1 gap(s) between the snapshot and journal_until" in said and "full" in said, said
    assert f"{_iso(gap['from'])} .. {_iso(gap['to'])}" in said, said
    assert f"{vhost}-r" not in [v["name"] for v in broker.api("GET", "vhosts").json()]  # nothing touched


def _broker_state(broker, vhost) -> dict:
    """What the vhost holds (queues, exchanges, bindings by name) and the journal as status reads it."""
    path = quote(vhost, safe="")
    return {"queues": sorted((q["name"], q.get("type")) for q in broker.api("GET", f"queues/{path}").json()),
            "exchanges": sorted(e["name"] for e in broker.api("GET", f"exchanges/{path}").json()),
            "bindings": sorted((b["source"], b["destination"], b["routing_key"])
                               for b in broker.api("GET", f"bindings/{path}").json()),
            "journal": journal.status(broker.connection, vhost).to_json()}


def test_a_deleted_journal_queue_makes_the_archive_refuse_and_change_nothing_and_enable_records_the_gap(
        broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    first = archive(broker.connection, vhost, url)
    conn, channel = channel_of(broker.connection, vhost)
    channel.queue_delete("rbak.journal")
    conn.close()
    _publish(broker, vhost, [b"lost"])
    before = _broker_state(broker, vhost)

    with pytest.raises(JournalError) as refused:
        archive(broker.connection, vhost, url)

    said = str(refused.value)
    assert repr(vhost) in said and first.backup_id in said and f"(to {first.to_ms})" in said, said
    assert "`rbak journal enable`" in said and "gap" in said, said
    assert _broker_state(broker, vhost) == before  # no queue, tracing as it was: nothing changed on the broker
    assert not before["journal"]["queue_exists"] and set(before["journal"]["nodes"].values()) == {"on"}
    assert ManifestStore(open_storage(url)).backup_ids() == [first.backup_id]  # nor in the location

    enabling = now_ms()
    journal.enable(broker.connection, vhost)
    enabled = now_ms()
    _publish(broker, vhost, [b"kept"])
    second = archive(broker.connection, vhost, url)

    [gap] = second.gaps
    assert gap["from"] == first.to_ms and enabling <= gap["to"] <= enabled and "started again" in gap["reason"]
    assert _bodies(url, second) == [b"kept"]
    assert second.previous == first.backup_id and second.from_ms == first.to_ms
    [chained] = journal_chain(open_storage(url), vhost).gaps
    assert (chained.from_ms, chained.to_ms) == (gap["from"], gap["to"])


def test_a_disable_and_enable_is_a_gap_over_the_time_off_and_a_recovery_into_it_refuses_unless_accepted(
        broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    _publish(broker, vhost, [b"before"])
    first = archive(broker.connection, vhost, url)
    snapshot = backup(broker.connection, url, "snap-1", vhost)
    disabling = now_ms()
    journal.disable(broker.connection, vhost)
    _publish(broker, vhost, [b"lost"])
    lost = now_ms()
    journal.enable(broker.connection, vhost)
    enabled = now_ms()
    _publish(broker, vhost, [b"kept"])

    second = archive(broker.connection, vhost, url)

    assert _bodies(url, first) == [b"before"] and _bodies(url, second) == [b"kept"]
    [gap] = second.gaps
    assert gap["from"] == first.to_ms <= disabling and lost <= gap["to"] <= enabled, (gap, disabling, lost, enabled)
    assert "started again" in gap["reason"] and second.from_ms == first.to_ms
    assert snapshot.created_at < lost

    def request(**accept):
        return RestoreRequest(url, backup_id="latest", vhosts=[vhost], vhost_map={vhost: f"{vhost}-r"},
                              journal_until=lost, checkpoint_state=str(tmp_path / "restore.db"), **accept)

    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, request()).plan()

    said = str(refused.value)
    assert "1 gap(s) between the snapshot and journal_until" in said and "started again" in said, said
    assert f"{_iso(gap['from'])} .. {_iso(gap['to'])}" in said, said
    assert f"{vhost}-r" not in [v["name"] for v in broker.api("GET", "vhosts").json()]  # nothing touched
    plan = RestoreRun(broker.connection, request(journal_accept_gaps=True)).plan()
    assert plan.queues  # accepted: the recovery plans


def test_enable_run_again_on_a_journal_that_is_on_records_no_gap(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    journal.enable(broker.connection, vhost)  # before any archive: the first mark begins the journal, no gap
    first = archive(broker.connection, vhost, url)
    journal.enable(broker.connection, vhost)
    journal.enable(broker.connection, vhost)
    _publish(broker, vhost, [b"kept"])

    second = archive(broker.connection, vhost, url)

    assert first.gaps == [] and second.gaps == [] and _bodies(url, second) == [b"kept"]
    assert second.previous == first.backup_id and second.from_ms == first.to_ms
    assert journal_chain(open_storage(url), vhost).gaps == ()


def test_tracing_turned_off_by_rabbitmqctl_is_a_gap_and_is_turned_back_on(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    first = archive(broker.connection, vhost, url)
    broker.ctl("trace_off", "-p", vhost)
    _publish(broker, vhost, [b"untraced"])

    second = archive(broker.connection, vhost, url)
    _publish(broker, vhost, [b"traced"])
    third = archive(broker.connection, vhost, url)

    [gap] = second.gaps
    assert gap["from"] == first.to_ms and gap["to"] >= gap["from"] and "tracing was off" in gap["reason"]
    assert _bodies(url, second, third) == [b"traced"] and third.gaps == []
    assert journal.status(broker.connection, vhost).tracing_everywhere


def test_a_node_restart_turns_tracing_off_and_the_next_archive_names_the_gap(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    _publish(broker, vhost, [b"before"])
    first = archive(broker.connection, vhost, url)
    broker.stop()
    broker.start()
    _publish(broker, vhost, [b"after the restart"])

    assert {n.state for n in journal.status(broker.connection, vhost).nodes} == {"off"}
    second = archive(broker.connection, vhost, url)

    assert _bodies(url, first) == [b"before"] and _bodies(url, second) == []
    [gap] = second.gaps
    assert gap["from"] == first.to_ms and "tracing was off" in gap["reason"]


class _CrashBeforeManifest(JournalArchive):
    def store_manifest(self, manifests, manifest):
        raise RuntimeError("the worker died before the manifest")


def test_a_run_that_fails_before_its_manifest_acks_nothing_and_the_next_run_archives_it_all(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    bodies = [b"m%d" % n for n in range(500)]
    _publish(broker, vhost, bodies)
    settings = ArchiveSettings(vhost, url, seconds=30, segment_max_bytes=4096)

    with pytest.raises(RuntimeError):
        _CrashBeforeManifest(broker.connection, settings).run()

    store = ManifestStore(open_storage(url))
    [crashed] = store.backup_ids()
    assert store.load(crashed).completed_at is None  # segments written, never completed
    # nothing acked: the 500, the enable's clock mark and the crashed run's own marks are all still there
    assert journal.status(broker.connection, vhost).depth >= 501
    result = JournalArchive(broker.connection, settings).run()
    assert _bodies(url, result) == bodies
    assert result.redelivered == 500 and result.previous is None


def test_a_missing_previous_archive_is_a_gap(broker, vhost, tmp_path):
    url = f"file://{tmp_path}"
    journal.enable(broker.connection, vhost)
    first = archive(broker.connection, vhost, url)
    second = archive(broker.connection, vhost, url)
    storage = open_storage(url)
    for info in list(storage.list(f"{first.backup_id}/")):
        storage.delete(info.key)

    third = archive(broker.connection, vhost, url)

    assert third.previous == second.backup_id
    [gap] = third.gaps
    assert gap["to"] == second.from_ms and first.backup_id in gap["reason"]
