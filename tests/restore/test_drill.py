"""A restore drill on a real broker, without Airflow (``airflow_rbak.drill``): it drills into scratch vhosts it marks,
never touches a vhost it did not create, and reaches no vhost beyond its scratch vhost.

The whole drill through ``airflow dags test`` (passing, and against a damaged backup) is tests/dags/test_rbak_drill.py.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.drill import scratch
from airflow_rbak.drill.run import DrillRefusedError, DrillRequest, DrillRun, confine
from airflow_rbak.restore.plan import QueuePlan, RestorePlan
from tests.restore.helpers import backup, body_of, declare, publish, read_queue


def vhosts(broker) -> set[str]:
    return {v["name"] for v in broker.api("GET", "vhosts").json()}


@pytest.fixture
def drilled(broker, vhost, tmp_path):
    """A location holding a backup of a classic queue (40 messages), a quorum queue (20) and a stream (20), every
    property set (no decimal header in the stream: RabbitMQ 3.10 refuses one there)."""
    declare(broker.connection, vhost, {"orders": "classic", "payments": "quorum", "events": "stream"})
    publish(broker.connection, vhost, "orders", 0, 40)
    publish(broker.connection, vhost, "payments", 0, 20)
    publish(broker.connection, vhost, "events", 0, 20, decimal=False)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "drill-1", vhost)
    return location


@pytest.mark.broker
def test_a_drill_restores_into_a_marked_scratch_vhost_compares_everything_and_deletes_it(broker, vhost, drilled):
    before = vhosts(broker)

    report = DrillRun(broker.connection, DrillRequest(drilled, "run-1", vhosts=(vhost,))).run()

    assert report.passed, report.describe()
    assert [(q["queue"], q["expected"], q["matched"]) for q in report.queues] == [
        ("events", 20, 20), ("orders", 40, 40), ("payments", 20, 20)]
    assert report.compared == report.published == 80 and report.backup_id == "drill-1"
    assert report.deleted_vhosts == report.scratch_vhosts == scratch.scratch_names("run-1", 1)
    assert vhosts(broker) == before
    # and a drill of a sample drills that many queues, the same ones for the same run id
    sampled = [DrillRun(broker.connection, DrillRequest(drilled, "run-5", vhosts=(vhost,), sample_queues=1)).run()
               for _ in range(2)]
    assert all(r.passed for r in sampled) and len(sampled[0].queues) == 1
    assert sampled[0].queues[0]["queue"] == sampled[1].queues[0]["queue"] and vhosts(broker) == before
    # and the source queues were only read (the backup gave every message back)
    assert [m[0] for m in read_queue(broker.connection, vhost, "orders", "classic", 40)] == [body_of(i, 300) for i in range(40)]


@pytest.mark.broker
def test_a_drill_whose_scratch_vhost_name_exists_touches_nothing_and_fails(broker, vhost, drilled):
    # Given a vhost (someone's, unmarked) under the name the drill of run-2 would use
    (name,) = scratch.scratch_names("run-2", 1)
    broker.api("PUT", f"vhosts/{quote(name, safe='')}", json={"description": "not the drill's"})
    try:
        report = DrillRun(broker.connection, DrillRequest(drilled, "run-2", vhosts=(vhost,))).run()

        # Then the drill failed before creating or restoring anything, and the vhost is still there, as it was
        assert not report.passed and "exist already" in (report.error or "")
        assert report.queues == [] and report.deleted_vhosts == []
        info = broker.api("GET", f"vhosts/{quote(name, safe='')}").json()
        assert name in vhosts(broker) and (info.get("description") or info["metadata"]["description"]) == "not the drill's"
        # and neither the drill's cleanup deletes it (it does not carry the run's marker)
        with pytest.raises(scratch.ScratchVhostError, match="does not carry this drill's marker"):
            DrillRun(broker.connection, DrillRequest(drilled, "run-2")).cleanup()
        assert name in vhosts(broker)
    finally:
        broker.api("DELETE", f"vhosts/{quote(name, safe='')}")


@pytest.mark.broker
def test_cleanup_deletes_only_the_marked_scratch_vhosts_of_its_own_run(broker):
    # Given run-3's scratch vhost left behind (a drill stopped before its cleanup) and run-4's
    ours, theirs = scratch.scratch_names("run-3", 1)[0], scratch.scratch_names("run-4", 1)[0]
    with ManagementClient(broker.connection) as client:
        scratch.create(client, ours, "run-3")
        scratch.create(client, theirs, "run-4")
    try:
        deleted = DrillRun(broker.connection, DrillRequest("memory://unused", "run-3")).cleanup()

        assert deleted == [ours] and ours not in vhosts(broker) and theirs in vhosts(broker)
    finally:
        broker.api("DELETE", f"vhosts/{quote(theirs, safe='')}")


def test_a_restore_reaching_beyond_the_scratch_vhost_is_refused():
    queue = QueuePlan("src", "orders", "rbak-drill-x-0", "orders", "classic", 1, 1, ())
    plan = RestorePlan("b1", "memory://", None, None, (queue,))

    confine(plan, {"rbak-drill-x-0": {}}, "rbak-drill-x-0")  # the scratch vhost alone: allowed
    with pytest.raises(DrillRefusedError, match=r"\['src'\]"):
        confine(plan, {"rbak-drill-x-0": {}, "src": {}}, "rbak-drill-x-0")  # definitions into the source vhost
    with pytest.raises(DrillRefusedError, match=r"\['src'\]"):
        confine(RestorePlan("b1", "memory://", None, None, (queue.__class__(**{**queue.__dict__, "target_vhost": "src"}),)),
                None, "rbak-drill-x-0")


@pytest.mark.broker
@pytest.mark.parametrize("held", [19, 20, 23])
def test_a_stream_is_read_back_to_its_end_whatever_it_holds_without_waiting_on_a_clock(broker, vhost, held, monkeypatch):
    from types import SimpleNamespace

    from airflow_rbak.drill import readback

    monkeypatch.setattr(readback, "STREAM_STALL_S", 600.0)  # the read must end on the stream's end, not on this
    declare(broker.connection, vhost, {"events": "stream"})
    publish(broker.connection, vhost, "events", 0, held, decimal=False)
    queue = SimpleNamespace(target_vhost=vhost, target_queue="events", queue_type="stream", target_queue_type=None)

    views = list(readback.delivered_views(broker.connection, queue, 20))

    assert [v.body for v in views] == [body_of(i, 300) for i in range(held)]  # one missing, none, three beyond
