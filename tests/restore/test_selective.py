"""Selective restore: chosen positions and message filters publish exactly the records they select, in stored
order, byte for byte, keeping the restore's other promises (confirms, checkpoints, refusals)."""

from __future__ import annotations

import sqlite3
import types

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.message_reader import read_messages
from airflow_rbak.restore import RestoreRefusedError, RestoreRequest, RestoreRun, selection
from airflow_rbak.restore import publisher as publisher_module
from airflow_rbak.restore.approval import approval_body, approval_subject
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.restore.publisher import ConfirmPipeline
from airflow_rbak.restore.selection import MAX_CHOSEN_POSITIONS, SelectionError
from airflow_rbak.restore.selection_report import summary_lines
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

COUNT = 240


@pytest.fixture
def location(broker, vhost, tmp_path) -> str:
    """A backup of COUNT messages of ``orders`` in segments of about 16 KiB (so a selection skips some)."""
    declare(broker.connection, vhost, {"orders": "classic", "other": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT)
    publish(broker.connection, vhost, "other", 0, 5)
    url = (tmp_path / "b").as_uri()
    backup(broker.connection, url, "sel-1", vhost, segment_max_bytes=16 * 1024)
    return url


def _request(location: str, vhost: str, tmp_path, **more) -> RestoreRequest:
    """Restores ``orders`` as ``picked`` (and ``other`` as ``other-r``) beside the source queues."""
    fields = {"queue_map": {"orders": "picked", "other": "other-r"}, "checkpoint_state": str(tmp_path / "restore.db"),
              **more}
    return RestoreRequest(location, backup_id="sel-1", vhosts=[vhost], **fields)


def _views(positions, behaviour) -> list[tuple]:
    """Messages at ``positions`` of ``orders`` as the session's broker delivers them (a 4.x sorts the headers)."""
    views = expected_views(COUNT, "classic", behaviour)
    return [views[i] for i in positions]


def _queues(broker, vhost: str) -> list[str]:
    return sorted(q["name"] for q in broker.api("GET", f"queues/{vhost}").json())


@pytest.mark.parametrize("positions, why", [
    ({"v/q": [-1]}, "is not a position"),
    ({"v/q": [True]}, "is not a position"),
    ({"v/q": "1,2"}, "expected a list"),
    ({"v/q": []}, "the list is empty"),
    ({"noslash": [1]}, 'is not "vhost/queue"'),
    (["v/q"], 'must map "vhost/queue"'),
    ({"v/q": list(range(MAX_CHOSEN_POSITIONS + 1))}, "more than 100,000 chosen"),
])
def test_a_malformed_selection_is_refused_when_the_request_is_made(positions, why):
    with pytest.raises(SelectionError, match=why):
        RestoreRequest("memory://x", positions=positions)


def test_positions_are_kept_sorted_and_once_and_replay_takes_true_for_every_queue():
    request = RestoreRequest("memory://x", positions={"v/q": [9, 2, 9]}, replay_dead_letters=True)
    assert dict(request.positions) == {"v/q": (2, 9)} and request.replay_dead_letters == ("*",)
    assert request.selection_label() == "2 chosen positions in 1 queues" and request.replays("dlq")
    assert RestoreRequest("memory://x").selection_label() is None


@pytest.mark.broker
def test_chosen_positions_publish_exactly_those_records_in_stored_order(broker, behaviour, vhost, tmp_path, location):
    chosen = [239, 0, 5, 6, 7, 100]
    settings = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": chosen})

    # When the restore runs
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()
    report = run.run()

    # Then the plan names the selection and holds only the chosen queue, as ranges of positions, reading only the
    # segments that hold them
    (queue,) = plan.queues
    assert plan.selection == "6 chosen positions in 1 queues" and queue.source_queue == "orders"
    assert queue.selected == ((0, 1), (5, 8), (100, 101), (239, 240)) and queue.records_in_window == 6
    assert len(queue.segments) < plan.segments_verified - 1  # `other` verified, untouched segments left out
    assert [m["position"] for m in queue.first_matches] == sorted(chosen)
    assert queue.first_matches[0]["message_id"] == "m-0" and "body" not in queue.first_matches[0]
    # and the report says what it published and names the selection
    assert (report.planned, report.published, report.to_json()["selection"]) == (6, 6, plan.selection)
    assert report.to_json()["selected"] == {f"{vhost}/orders": 6}
    # and the target holds exactly those records, in their stored order, byte for byte; nothing else was created
    got = read_queue(broker.connection, vhost, "picked", "classic", 6)
    assert got == _views(sorted(chosen), behaviour)
    assert _queues(broker, vhost) == ["orders", "other", "picked"]


def test_a_selection_too_scattered_for_a_plan_to_carry_is_refused_as_it_grows(monkeypatch):
    monkeypatch.setattr(selection, "MAX_SELECTED_RANGES", 3)
    scan = selection.SelectionScan(None, None)
    record = types.SimpleNamespace(properties=types.SimpleNamespace(message_id=None, correlation_id=None, timestamp=None),
                                   exchange="", routing_key="q", backed_up_at=0, body=b"")
    for position in (0, 1, 2, 4, 6):  # runs [0, 3), [4, 5), [6, 7)
        scan.add(position, record)
    assert scan.ranges == [[0, 3], [4, 5], [6, 7]] and [m["position"] for m in scan.first_matches] == [0, 1, 2, 4, 6]
    with pytest.raises(SelectionError, match="4 separate runs of positions, more than a plan carries"):
        scan.add(8, record)
    # and the ranges answer membership, and label a checkpoint by what they hold
    ranges = selection.Ranges(scan.ranges)
    assert [p for p in range(9) if p in ranges] == [0, 1, 2, 4, 6]
    assert selection.checkpoint_label(None, False) == ""
    assert selection.checkpoint_label(scan.ranges, False) != selection.checkpoint_label(scan.ranges[:2], False)
    assert selection.checkpoint_label(None, True) == " selected:all replay"


@pytest.mark.parametrize("select, field", [({"nope": 1}, "nope"), ({"body_regex": "("}, "body_regex"),
                                           ({"headers": {"seq": [1]}}, "headers.seq"), ("pay.*", "select")])
def test_a_filter_that_cannot_be_right_is_refused_when_the_request_is_made_naming_its_field(select, field):
    with pytest.raises(ConfigurationError, match=field):
        RestoreRequest("memory://x", select=select)


@pytest.mark.broker
def test_a_filter_publishes_the_matching_records_at_the_positions_rbak_messages_reports(broker, behaviour, vhost,
                                                                                       tmp_path, location):
    # Given a filter (even messages carry the header ok: true) and, for a second restore, the filter with positions
    select = {"headers": {"ok": True}}
    storage = open_storage(location)
    listed = [m.position for m in read_messages(storage, ManifestStore(storage).load("sel-1"), vhost=vhost,
                                                queue="orders", message_filter=MessageFilter.from_params(select))]

    # When the restore runs with the filter
    settings = _request(location, vhost, tmp_path, select=select)
    plan = RestoreRun(broker.connection, settings).plan()
    report = RestoreRun(broker.connection, settings).run()

    # Then it selects the very positions `rbak messages` lists for that filter, in each queue
    orders, other = plan.queues
    assert [p for first, end in orders.selected for p in range(first, end)] == listed == list(range(0, COUNT, 2))
    assert other.selected == ((0, 1), (2, 3), (4, 5))
    assert plan.selection == "filter messages with header 'ok' = True" and report.published == COUNT // 2 + 3
    assert report.to_json()["selected"] == {f"{vhost}/orders": COUNT // 2, f"{vhost}/other": 3}
    # and the targets hold exactly the matching records, in stored order, byte for byte
    got = read_queue(broker.connection, vhost, "picked", "classic", COUNT // 2)
    assert got == _views(listed, behaviour)
    assert read_queue(broker.connection, vhost, "other-r", "classic", 3) == _views((0, 2, 4), behaviour)

    # and a filter with chosen positions publishes the positions that also match
    settings = _request(location, vhost, tmp_path, select=select, positions={f"{vhost}/orders": [1, 2, 3, 4, 200]},
                        queue_map={"orders": "both"}, checkpoint_state=str(tmp_path / "both.db"))
    plan = RestoreRun(broker.connection, settings).plan()
    assert plan.selection == "filter messages with header 'ok' = True; 5 chosen positions in 1 queues"
    assert plan.queues[0].selected == ((2, 3), (4, 5), (200, 201))


@pytest.mark.broker
def test_a_dry_run_plan_and_approval_name_the_selection_and_show_the_first_matches(broker, vhost,
                                                                                   tmp_path, location):
    chosen = list(range(3, 60, 4))  # 15 positions
    settings = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": chosen}, dry_run=True)

    plan = RestoreRun(broker.connection, settings).plan()
    report = RestoreRun(broker.connection, settings).run()

    # Then the plan's lines name the selection, its count per queue, and the first 10 matches (never a body)
    lines = "\n".join(summary_lines(plan))
    assert "selection: 15 chosen positions in 1 queues: 15 records selected in 1 queues" in lines
    assert f"{vhost}/orders: 15 selected of 15 chosen positions; the first 10:" in lines
    assert [line.split(":")[0].strip() for line in lines.splitlines() if "message_id" in line] == [
        f"position {p}" for p in chosen[:10]]
    # and the approval request names the selection and its count
    subject, body = approval_subject(plan), approval_body(plan, settings, "rabbitmq_default")
    assert "15 selected records into 1 queues" in subject
    assert "only the selection `15 chosen positions in 1 queues`" in body
    assert f"- `{vhost}/orders`: 15 selected (of 15 chosen positions), first positions 3, 7, 11" in body
    # and nothing was published: the target queue does not exist
    assert report.dry_run and report.published == 15
    assert _queues(broker, vhost) == ["orders", "other"]


@pytest.mark.broker
@pytest.mark.parametrize("positions, why", [
    ({"{vhost}/nope": [1]}, "positions name queue '{vhost}/nope', which this restore does not select"),
    ({"{vhost}/orders": [3, 240, 999]}, r"positions \[240, 999\] of '{vhost}/orders' are past its last record"),
])
def test_a_selection_the_backup_cannot_meet_is_refused_before_the_target_is_touched(
        broker, vhost, tmp_path, location, positions, why):
    positions = {k.format(vhost=vhost): v for k, v in positions.items()}
    settings = _request(location, vhost, tmp_path, positions=positions)
    with pytest.raises(SelectionError, match=why.format(vhost=vhost)):
        RestoreRun(broker.connection, settings).run()
    assert _queues(broker, vhost) == ["orders", "other"]


@pytest.mark.broker
def test_a_chosen_position_in_a_damaged_segment_is_refused_even_when_damage_may_be_skipped(broker, vhost, tmp_path,
                                                                                          location):
    # Given the backup's second segment of `orders` damaged (one byte changed)
    storage = open_storage(location)
    entry = next(q for q in ManifestStore(storage).load("sel-1").queues if q.name == "orders")
    first, second = sorted(entry.segments, key=lambda s: s.sequence)[:2]
    data = bytearray(storage.get(second.key))
    data[len(data) // 2] ^= 0xFF
    storage.put(second.key, bytes(data))
    inside = first.record_count  # the second segment's first position

    # When a restore chooses a position in it, allowed to skip damaged segments
    settings = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": [0, inside]}, skip_damaged_segments=True)

    # Then it is refused, naming the positions, and nothing was created
    with pytest.raises(SelectionError, match=rf"positions \[{inside}\] of '{vhost}/orders' lie in a damaged segment"):
        RestoreRun(broker.connection, settings).run()
    assert _queues(broker, vhost) == ["orders", "other"]
    # and a position outside it is restored
    settings = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": [0]}, skip_damaged_segments=True)
    assert RestoreRun(broker.connection, settings).run().published == 1


@pytest.mark.broker
def test_a_selective_restore_still_refuses_a_target_queue_that_holds_messages(broker, vhost, tmp_path, location):
    # Given the source queues themselves as the target, still holding their messages
    settings = RestoreRequest(location, backup_id="sel-1", vhosts=[vhost], positions={f"{vhost}/orders": [1, 2]},
                              checkpoint_state=str(tmp_path / "restore.db"))
    with pytest.raises(RestoreRefusedError, match=f"{vhost}/orders holds {COUNT}"):
        RestoreRun(broker.connection, settings).run()
    # and only the queue the selection touches counts: `other` (not selected) is not named
    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, settings).run()
    assert f"{vhost}/other" not in str(refused.value)


@pytest.mark.broker
def test_an_interrupted_selective_restore_resumes_without_duplicates_or_gaps(broker, behaviour, vhost, tmp_path,
                                                                             location, monkeypatch):
    chosen = list(range(1, COUNT, 3))  # 80 positions across every segment
    settings = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": chosen}, max_in_flight=8)
    # Given a run whose connection fails after its 45th publish, with checkpoints committed every 7 confirms
    monkeypatch.setattr(publisher_module, "_COMMIT_EVERY", 7)
    send = ConfirmPipeline.publish

    def failing(self, *args, **kwargs):
        if self.published == 45:
            raise PublishError("connection lost (test)")
        send(self, *args, **kwargs)

    monkeypatch.setattr(ConfirmPipeline, "publish", failing)
    with pytest.raises(PublishError):
        RestoreRun(broker.connection, settings).run()
    monkeypatch.setattr(ConfirmPipeline, "publish", send)
    with sqlite3.connect(tmp_path / "restore.db") as db:
        (published, next_ordinal), = db.execute("SELECT published, next_ordinal FROM queue_progress").fetchall()
    # (the stop waited for its 45 confirms: the checkpoint holds every record sent, positions within the selection)
    assert published == 45 and next_ordinal == chosen[published - 1] + 1

    # When it runs again
    plan = RestoreRun(broker.connection, settings).plan()
    report = RestoreRun(broker.connection, settings).run()

    # Then it resumed where the checkpoint said, and the target holds every chosen record once, in stored order
    assert plan.queues[0].resumes and plan.queues[0].published_before == published
    (row,) = report.queues
    assert row["resumed_from"] == next_ordinal and row["completed"] and row["published_total"] == len(chosen)
    got = read_queue(broker.connection, vhost, "picked", "classic", len(chosen))
    assert got == _views(chosen, behaviour)

    # and a run with another selection is refused by the same checkpoint, not counted against it
    other = _request(location, vhost, tmp_path, positions={f"{vhost}/orders": chosen[:-1]})
    with pytest.raises(ConfigurationError, match="with window None..None selected:"):
        RestoreRun(broker.connection, other).plan()
