"""Recovery to a point in time (issue 54): a snapshot, then the journal's records up to T, through the target's routing.

The source vhost has a topic exchange fanning ``order.*`` to two queues (one quorum) and queues reached by the
default exchange, ``CC`` and ``BCC``. It is journaled (``rbak journal enable``'s engine) and archived by the real
archiver around a real backup, the snapshot: its messages before it, others after it and before T (the end of an
archive), others after T. Only planted archives (a manifest naming another vhost, a foreign key) are written by hand
(``tests/restore/journal_archives.py``). A recovery into a fresh vhost must deliver the snapshot's messages, then
exactly the journal's records in ``[snapshot.created_at, T)`` in order, byte-exact with every property and header,
where the target's bindings route them; the approval and the report count what came from where and the possible
duplicates; gaps and a T past the coverage refuse; planted manifests are refused, never read.
"""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from airflow_rbak.broker import journal
from airflow_rbak.broker.pika_connection import ConfirmChannel, blocking_connection
from airflow_rbak.codec.journal_layout import archive_id
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.journal_chain import journal_chain
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.errors import DamagedSegmentsError, PublishError, RestoreRefusedError
from airflow_rbak.restore.publisher import ConfirmPipeline
from airflow_rbak.storage import open_storage
from tests.journal.helpers import archive
from tests.restore.helpers import PRIORITY, backup, body_of, message_view, props_of, publish, read_queue
from tests.restore.journal_archives import ArchiveSpec, Published, write_archive, write_chain

pytestmark = pytest.mark.broker

#: target queue -> its type; "orders" is fed by the default exchange, "audit" and "billing" by ``events``.
QUEUES = {"orders": "classic", "audit": "classic", "billing": "quorum", "cc-q": "classic", "bcc-q": "classic"}
SNAPSHOT = {"orders": range(0, 5), "audit": range(5, 8)}


def _topology(broker: Any, vhost: str) -> None:
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        for name, queue_type in QUEUES.items():
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
        ch.exchange_declare("events", "topic", durable=True)
        ch.queue_bind("audit", "events", "order.#")
        ch.queue_bind("billing", "events", "order.*")


def _planted(i: int, at: int, exchange: str = "", key: str = "orders", **kw: Any) -> Published:
    return Published(at, exchange, key, body_of(i, 200), props_of(i), **kw)


def _message(i: int, exchange: str = "", key: str = "orders", **kw: Any) -> Published:
    return Published(0, exchange, key, body_of(i, 200), props_of(i), **kw)


def publish_all(broker: Any, vhost: str, messages: list[Published]) -> None:
    """Publish each message as a publisher would (its headers with CC and BCC), all confirmed on return."""
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        acked: set[int] = set()

        def on_confirm(frame: Any) -> None:
            tag = frame.method.delivery_tag
            acked.update(range(1, tag + 1) if frame.method.multiple else (tag,))

        channel = ConfirmChannel(conn, on_confirm)
        for m in messages:
            channel.publish(m.exchange, m.routing_key, m.body, m.published_properties())
        deadline = time.monotonic() + 60
        while len(acked) < len(messages) and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.05)
        assert len(acked) == len(messages)


#: After the snapshot and before T: the default exchange with CC and with BCC, a topic exchange fanning out.
AFTER_SNAPSHOT = [_message(101), _message(102, cc=("cc-q",)), _message(103, "events", "order.created"),
                  _message(104, bcc=("bcc-q",)), _message(105, "events", "order.paid"), _message(106)]
#: What each target queue gets of them, in order.
ROUTED = {"orders": [0, 1, 3, 5], "cc-q": [1], "bcc-q": [3], "audit": [2, 4], "billing": [2, 4]}
#: Published at or after T: never replayed.
AFTER_T = [_message(107), _message(108, "events", "order.late")]


def _view(p: Published, sort: bool) -> tuple:
    """The message as a consumer of the target gets it: as published, without BCC (the broker removes it)."""
    body, props, headers = message_view(p.published_properties(), p.body)
    headers = tuple(h for h in headers if h[0] != "BCC")
    return body, props, tuple(sorted(headers, key=lambda h: h[0])) if sort else headers


def _snapshot_view(i: int, sort: bool) -> tuple:
    body, props, headers = message_view(props_of(i), body_of(i, 300))
    return body, props, tuple(sorted(headers, key=lambda h: h[0])) if sort else headers


@pytest.fixture
def journaled_source(broker, vhost, location) -> dict[str, Any]:
    """A journaled source vhost (the real journal and archiver): its snapshot messages archived, its snapshot taken,
    the messages after it archived up to T, and the messages after T archived too."""
    _topology(broker, vhost)
    journal.enable(broker.connection, vhost)
    for name, numbers in SNAPSHOT.items():
        publish(broker.connection, vhost, name, numbers.start, len(numbers))
    first = archive(broker.connection, vhost, location)
    manifest = backup(broker.connection, location, "snap-1", vhost)
    publish_all(broker, vhost, AFTER_SNAPSHOT)
    second = archive(broker.connection, vhost, location)
    publish_all(broker, vhost, AFTER_T)
    third = archive(broker.connection, vhost, location)
    return {"location": location, "snapshot": manifest, "t": second.to_ms,
            "archives": [first, second, third]}


def _request(src: dict[str, Any], vhost: str, target: str, tmp_path: Any, **kw: Any) -> RestoreRequest:
    return RestoreRequest(src["location"], backup_id=kw.pop("backup_id", "latest"), vhosts=[vhost],
                          vhost_map={vhost: target}, restore_definitions=True, journal_until=kw.pop("until", src["t"]),
                          checkpoint_state=str(tmp_path / "restore.db"), **kw)


def _read_all(broker: Any, target: str, counts: dict[str, int]) -> dict[str, list[tuple]]:
    return {name: read_queue(broker.connection, target, name, QUEUES[name], counts[name]) for name in QUEUES}


def test_a_recovery_delivers_the_snapshot_then_the_journal_before_t_through_the_targets_routing(
        broker, behaviour, vhost, target_vhost, tmp_path, journaled_source):
    src = journaled_source
    second = src["archives"][1].backup_id
    run = RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path))
    plan = run.plan()
    assert plan.backup_id == "snap-1"  # `latest` is the snapshot, never an archive
    body = approval_body(plan, run.settings, "rabbitmq_default")
    assert f"8 messages from the snapshot `snap-1`, 6 from the journal (`{second}`: 6)" in body, body
    assert "consumers may see again what they had consumed after the snapshot" in body
    # their publish time's bound is the last clock mark before them: the first archive's end, before the snapshot
    assert "up to 6 journal records may be duplicates (6 published while the snapshot ran, 0 redelivered" in body

    definitions = run.definitions(plan)
    report = run.report(plan, [run.publish(plan, q) for q in plan.queues], definitions)

    facts = report.to_json()["journal_recovery"]
    assert (facts["from_snapshot"], facts["from_journal"], facts["per_archive"]) == (8, 6, {second: 6})
    assert (facts["duplicates_possible"], facts["redelivered_by_journal"]) == (6, 0)
    assert facts["gaps"] == [] and report.unroutable == 0
    counts = {name: len(SNAPSHOT.get(name, ())) + len(ROUTED[name]) for name in QUEUES}
    got = _read_all(broker, target_vhost, counts)
    for name, queue_type in QUEUES.items():
        sort = behaviour.sorts_headers(queue_type)
        want = [_snapshot_view(i, sort) for i in SNAPSHOT.get(name, ())] + [
            _view(AFTER_SNAPSHOT[n], sort) for n in ROUTED[name]]
        if queue_type == "quorum":  # a 4.x quorum queue delivers by priority among what it holds
            want = [want[n] for n in behaviour.delivery_order("quorum", [v[1][PRIORITY] or 0 for v in want])]
        assert got[name] == want, name


def test_gaps_refuse_the_recovery_unless_accepted_then_they_are_listed(broker, vhost, target_vhost, tmp_path, location):
    _topology(broker, vhost)
    journal.enable(broker.connection, vhost)
    publish(broker.connection, vhost, "orders", 0, 3)
    archive(broker.connection, vhost, location)
    snapshot = backup(broker.connection, location, "snap-1", vhost)
    publish_all(broker, vhost, [_message(100)])
    broker.ctl("trace_off", "-p", vhost)  # what is published now never reaches the journal
    publish_all(broker, vhost, [_message(101)])
    second = archive(broker.connection, vhost, location)  # names the gap and turns tracing back on
    publish_all(broker, vhost, [_message(102)])
    third = archive(broker.connection, vhost, location)
    (gap,) = second.gaps
    assert "tracing was off" in gap["reason"]
    src = {"location": location, "t": third.to_ms}

    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path)).run()
    assert "1 gap(s) between the snapshot and journal_until" in str(refused.value)
    assert "tracing was off" in str(refused.value) and "journal_accept_gaps" in str(refused.value)
    assert target_vhost not in [v["name"] for v in broker.api("GET", "vhosts").json()]  # nothing touched

    accepted = _request(src, vhost, target_vhost, tmp_path, journal_accept_gaps=True)
    run = RestoreRun(broker.connection, accepted)
    plan = run.plan()
    assert "1 gaps in the journal** between the snapshot and the moment, accepted" in approval_body(plan, accepted, "c")
    report = run.run().to_json()
    (listed,) = report["journal_recovery"]["gaps"]
    assert (listed["from"], listed["to"]) == (gap["from"], gap["to"]) and "tracing was off" in listed["reason"]
    assert snapshot.created_at < gap["to"] and report["journal_recovery"]["gaps_accepted"] is True
    got = read_queue(broker.connection, target_vhost, "orders", "classic", 5)
    assert [m[0] for m in got] == [body_of(i, 300) for i in range(3)] + [_message(100).body, _message(102).body]


def test_a_queue_the_snapshot_left_out_is_named_in_the_approval_and_the_report(
        broker, vhost, target_vhost, tmp_path, journaled_source):
    src = journaled_source
    store = ManifestStore(open_storage(src["location"]))
    snapshot = store.load("snap-1")
    reason = "a classic queue with an exclusive owner"
    snapshot.extensions["left_out"] = [*snapshot.extensions.get("left_out", []),
                                       {"vhost": vhost, "queue": "ghost", "queue_type": "classic", "reason": reason}]
    store.save(snapshot)
    run = RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path))

    plan = run.plan()

    body = approval_body(plan, run.settings, "rabbitmq_default")
    assert f"**1 queues the snapshot left out** (`{vhost}/ghost`): only what the journal holds of them comes back" in body
    assert plan.journal["left_out"] == [{"vhost": vhost, "queue": "ghost", "reason": reason}]  # the journal's own not
    assert run.report(plan, [], None).to_json()["journal_recovery"]["snapshot_left_out"] == plan.journal["left_out"]


def test_a_moment_past_the_journals_coverage_is_refused_naming_its_end(broker, vhost, target_vhost, tmp_path, location):
    _topology(broker, vhost)
    journal.enable(broker.connection, vhost)
    backup(broker.connection, location, "snap-1", vhost)
    last = archive(broker.connection, vhost, location)

    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, _request({"location": location, "t": last.to_ms + 1}, vhost, target_vhost,
                                               tmp_path)).run()
    assert "whose coverage ends at" in str(refused.value) and f"({last.to_ms})" in str(refused.value)


def test_planted_archives_are_refused_and_a_broken_link_is_a_gap(broker, vhost, target_vhost, tmp_path, location):
    _topology(broker, vhost)
    s = backup(broker.connection, location, "snap-1", vhost).created_at
    first, second = (ArchiveSpec(s - 1000, s + 10_000, [_planted(100, s + 1000)]),
                     ArchiveSpec(s + 10_000, s + 20_000, [_planted(101, s + 15_000)]))
    a1 = write_archive(location, vhost, first, None)
    # under this vhost's tag, a manifest naming another vhost: refused, never read as this vhost's
    other = write_archive(location, vhost, ArchiveSpec(s, s + 30_000, [_planted(102, s + 16_000)]), None,
                          backup_id=archive_id(vhost, s + 10_001), journal={"vhost": "elsewhere"})
    # a backup whose id only starts like an archive's is a snapshot: the chain never reads it
    lookalike = write_archive(location, vhost, ArchiveSpec(s, s + 30_000, [_planted(104, s + 16_000)]), None,
                              backup_id=a1[:-13] + "0-" + a1[-12:], created_at=s - 5000)
    # the second archive's segment key moved into the snapshot's folder: a foreign object, refused
    a2 = write_archive(location, vhost, second, a1)
    storage = open_storage(location)
    store = ManifestStore(storage)
    manifest = store.load(a2)
    manifest.queues[0].segments[0].key = "snap-1/" + manifest.queues[0].segments[0].key.split("/", 1)[1]
    store.save(manifest)
    write_archive(location, vhost, ArchiveSpec(s + 20_000, s + 30_000, [_planted(103, s + 25_000)]), a2)

    chain = journal_chain(storage, vhost)
    refused = dict(chain.refused)
    assert "names vhost 'elsewhere'" in refused[other]
    assert "not its own" in refused[a2] or "damaged" in refused[a2], refused[a2]
    assert [a.backup_id for a in chain.archives] == [a1, chain.archives[1].backup_id]
    assert lookalike not in refused and lookalike not in [a.backup_id for a in chain.archives]
    (gap,) = chain.gaps
    assert (gap.from_ms, gap.to_ms) == (s + 10_000, s + 20_000) and a2 in gap.reason

    with pytest.raises(RestoreRefusedError) as stopped:
        RestoreRun(broker.connection, _request({"location": location, "t": s + 28_000}, vhost, target_vhost,
                                               tmp_path)).run()
    assert a2 in str(stopped.value)


def test_a_record_of_another_vhost_in_an_archive_is_never_replayed(broker, vhost, target_vhost, tmp_path, location):
    _topology(broker, vhost)
    s = backup(broker.connection, location, "snap-1", vhost).created_at
    records = [_planted(100, s + 10), _planted(101, s + 20, vhost="elsewhere"), _planted(102, s + 30)]
    (planted,) = write_chain(location, vhost, [ArchiveSpec(s - 1000, s + 10_000, records)])
    src = {"location": location, "t": s + 10_000}

    # the segment check refuses a segment holding another queue's record: it is damaged, nothing is touched
    with pytest.raises(DamagedSegmentsError, match="1 records name another queue"):
        RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path)).run()
    # skipped as damaged, its archive's range is a gap, which must be accepted too
    with pytest.raises(RestoreRefusedError, match="skipped as damaged"):
        RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path, skip_damaged_segments=True)).run()
    report = RestoreRun(broker.connection, _request(src, vhost, target_vhost, tmp_path, skip_damaged_segments=True,
                                                    journal_accept_gaps=True)).run().to_json()

    assert report["journal_recovery"]["from_journal"] == 0 and report["published"] == 0
    assert [s["key"].split("/", 1)[0] for s in report["skipped_segments"]] == [planted]
    assert planted in report["journal_recovery"]["gaps"][0]["reason"]


def test_a_recovery_stopped_mid_journal_resumes_from_its_checkpoint(
        broker, vhost, target_vhost, tmp_path, location, monkeypatch):
    _topology(broker, vhost)
    journal.enable(broker.connection, vhost)
    publish(broker.connection, vhost, "orders", 0, 3)
    archive(broker.connection, vhost, location)
    backup(broker.connection, location, "snap-1", vhost)
    records = [_message(100 + n) for n in range(40)]
    publish_all(broker, vhost, records)
    last = archive(broker.connection, vhost, location)
    request = _request({"location": location, "t": last.to_ms}, vhost, target_vhost, tmp_path, max_in_flight=1)
    send = ConfirmPipeline.publish

    def cut(self: ConfirmPipeline, *args: Any, **kwargs: Any) -> None:
        if self.cp.source_queue.startswith("rbak.journal@") and self.published >= 15:
            raise pika.exceptions.AMQPConnectionError("cut")
        send(self, *args, **kwargs)

    monkeypatch.setattr(ConfirmPipeline, "publish", cut)
    with pytest.raises(PublishError):
        RestoreRun(broker.connection, request).run()
    monkeypatch.undo()

    report = RestoreRun(broker.connection, request).run()

    journal_row = report.queues[-1]
    assert journal_row["resumed_from"] == 15 and journal_row["published"] == 25 and journal_row["completed"]
    got = read_queue(broker.connection, target_vhost, "orders", "classic", 43)
    assert [m[0] for m in got] == [body_of(i, 300) for i in range(3)] + [p.body for p in records]


def test_journal_settings_are_validated(tmp_path):
    with pytest.raises(ConfigurationError, match="name each in vhosts"):
        RestoreRequest("memory://", journal_until=5)
    with pytest.raises(ConfigurationError, match="does not combine with queues"):
        RestoreRequest("memory://", vhosts=["a"], queues=["x"], journal_until=5)
    with pytest.raises(ConfigurationError, match="set journal_until"):
        RestoreRequest("memory://", vhosts=["a"], journal_accept_gaps=True)
    assert RestoreRequest("memory://", vhosts=["a"], journal_until="2026-11-29T12:00:00Z").journal_until == 1_795_953_600_000
