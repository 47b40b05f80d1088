"""A restore cut off from a broker that stays up, with publishes still travelling, resumes without publishing twice.

The restore publishes through a TCP proxy (tests/cluster/proxy.py). At one segment the proxy starts holding what the
restore sends, as a network does with bytes in flight; two segments later it cuts the restore's side, leaving the
broker's side of the connection open (no heartbeats, so the broker never times it out) with those publishes still
to arrive. The run fails saying to re-run. The earlier attempt's connection is closed through the management API
before the target is measured (airflow_rbak/restore/earlier_attempts.py): by the attempt's own stop, when it reaches
the broker to count what landed, else by the re-run; then the held bytes are
released, and once the broker has read them and the connection's end, nothing of them has landed: the target holds
every message once, in order.
Without the close, the held publishes would land after the re-run measured, each a second copy.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.storage import open_storage
from tests.cluster.proxy import TcpProxy
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, published, without_broker_headers
from tests.reliability.test_broker_faults import as_delivered
from tests.restore.helpers import backup, declare, publish, read_queue, ready_count

pytestmark = pytest.mark.broker
COUNT = 2_000
#: Records published between the hold and the cut (at least): more than the publisher sends before it flushes what
#: it buffered (every 200 publishes), fewer than its window (so it never waits on a confirm the hold keeps back).
HELD_RECORDS = 250


def restore_connections(broker, besides: frozenset[str] = frozenset()) -> list[str]:
    """The broker's names of the restore publishing connections it lists now, but ``besides`` (other tests', which the
    management API may still list for a few seconds after they closed)."""
    listed = broker.api("GET", "connections", params={"columns": "name,client_properties"}).json()
    return [c["name"] for c in listed if str((c.get("client_properties") or {}).get("connection_name", "")).startswith(
        "airflow-rbak restore ") and c["name"] not in besides]


def wait_until_gone(broker, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    while set(names) & set(restore_connections(broker)):
        assert time.monotonic() < deadline, "the broker kept the earlier connection"
        time.sleep(0.1)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_restore_cut_off_with_publishes_in_flight_resumes_without_publishing_any_twice(
        broker, behaviour, vhost, tmp_path, queue_type):
    # Given a backup of a queue of persistent messages in small segments, and an empty target queue
    declare(broker.connection, vhost, {"orders": queue_type})
    publish(broker.connection, vhost, "orders", 0, COUNT, persistent=True)
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "cut-1", vhost, segment_max_bytes=32 * 1024,
                      allow_delivery_count_increase=behaviour.backup_leaves_out_by_default(queue_type))
    segments = manifest.queue(vhost, "orders").segments
    hold_at = 4
    cut_at = next(i for i in range(hold_at, len(segments)) if sum(s.record_count for s in segments[hold_at:i]) >= HELD_RECORDS)
    declare(broker.connection, vhost, {"restored": queue_type})
    request = RestoreRequest(location, backup_id="cut-1", queue_map={"orders": "restored"},
                             checkpoint_state=str(tmp_path / "restore.db"), max_in_flight=1_000)
    storage = faults.TriggerStorage(open_storage(location))
    others = frozenset(restore_connections(broker))
    link = TcpProxy([(broker.connection.host, broker.connection.amqp_port)])
    through_link = replace(broker.connection, amqp_port=link.port, heartbeat=0)

    def hold_then_arm_the_cut() -> None:
        link.hold_requests.set()
        storage.arm(lambda op, key: op == "get" and key == segments[cut_at].key, cut_once_listed)

    def cut_once_listed() -> None:
        """Cut once the management API lists the connection, as it does every connection older than its statistics
        interval (5 s): a retry comes later than that (docs/production.md)."""
        deadline = time.monotonic() + 60
        while not restore_connections(broker, others):
            assert time.monotonic() < deadline, "the management API never listed the restore's connection"
            time.sleep(0.2)
        link.cut_clients()

    # When the link holds what the restore sends from one segment on (the plan's verification read it first), and
    # cuts the restore off some 250 records later, the broker's side of its connection left open with them in it
    storage.arm(lambda op, key: op == "get" and key == segments[hold_at].key, hold_then_arm_the_cut, nth=2)
    try:
        with pytest.raises(PublishError) as failed:
            RestoreRun(through_link, request, storage).run()
        assert_clear_failure(failed.value, PublishError, "re-run")
        assert storage.fired_at == segments[cut_at].key
        earlier = restore_connections(broker, others)
        assert len(earlier) == 1  # the broker still holds the first run's connection
        assert link.held_bytes() > 0  # and publishes are travelling in it

        # When the restore runs again, straight to the broker
        report = RestoreRun(broker.connection, request).run()

    finally:
        link.release()  # what was held travels on; over a connection still open it lands now
        wait_until_gone(broker, earlier)  # (the broker reads it all, then the end of the connection)
        link.close()
    # And the target holds every message exactly once, in order, byte-exact, none delivered before
    assert ready_count(broker.connection, vhost, "restored") == COUNT
    target, delivery_counts = without_broker_headers(read_queue(broker.connection, vhost, "restored", queue_type, COUNT,
                                                                broker_headers=True))
    backed = as_delivered(behaviour, queue_type, published(COUNT, persistent=True))
    assert target == as_delivered(behaviour, queue_type, backed)
    assert set(delivery_counts) == {0}
    # And the re-run says what it did: closed the earlier connection unless the stop had (the management API lists a
    # closed connection for a few seconds more), skipped what was in, published the rest
    (row,) = report.queues
    assert row["completed"] and row["published_total"] == COUNT and row["closed_earlier_connections"] <= 1, row
    assert row["published"] == COUNT - (row["resumed_from"] + row["already_delivered"])
