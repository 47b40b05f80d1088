"""A node of the cluster stopped while a restore publishes, the confirms in flight lost.

The restore publishes through node 1 into a target queue on node 2 (a classic queue's home, a quorum queue's
leader), node 1 reached through a TCP proxy (tests/cluster/proxy.py) with nodes 2 and 3 listed after it. The fault
comes from inside the restore's own segment reads, at known points: at one segment the link starts losing what node
1 sends back (so the confirms of every publish from then on are lost), and some 250 records later, once the target
holds records published after that point, node 1 stops. The run fails saying to re-run; the same restore run again
(the task's retry, through the list, so node 2) reads the target's depth, skips exactly the records already there,
some of which it never saw confirmed, and publishes the rest: every message once, in order, byte-exact
(airflow_rbak/restore/publisher.py). A checkpoint is only as old as its last commit, so what the retry skips also
counts the records confirmed since then.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.cluster.proxy import TcpProxy
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, published, without_broker_headers
from tests.reliability.test_broker_faults import as_delivered
from tests.restore.helpers import backup, declare, publish, read_queue, ready_count

pytestmark = pytest.mark.broker
COUNT = 2_000
#: Records published between the link losing replies and node 1 stopping (at least): more than the publisher sends
#: before it flushes what it buffered (every 200 publishes), far fewer than its window (so it never waits on a confirm).
LOSSY_RECORDS = 250
MAX_IN_FLIGHT = 1_000


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_the_publishing_node_stopped_with_confirms_lost_then_the_retry_publishes_every_message_once(
        cluster, cluster_vhost, tmp_path, queue_type):
    behaviour = Behaviour(cluster.version)
    vhost, node_1, node_2 = cluster_vhost, cluster.nodes[0], cluster.nodes[1]
    # Given a backup of a queue of persistent messages in small segments, and an empty target queue on node 2
    declare(node_2.connection, vhost, {"orders": queue_type})
    publish(node_2.connection, vhost, "orders", 0, COUNT, persistent=True)
    location = (tmp_path / "b").as_uri()
    manifest = backup(node_2.connection, location, "r-1", vhost, segment_max_bytes=32 * 1024,
                      allow_delivery_count_increase=behaviour.backup_leaves_out_by_default(queue_type))
    segments = manifest.queue(vhost, "orders").segments
    declare(node_2.connection, vhost, {"restored": queue_type})
    lossy_from = len(segments) // 3
    before_lossy = sum(s.record_count for s in segments[:lossy_from])
    stop_at = next(i for i in range(lossy_from, len(segments))
                   if sum(s.record_count for s in segments[lossy_from:i]) >= LOSSY_RECORDS)
    storage = faults.TriggerStorage(open_storage(location))
    request = RestoreRequest(location, backup_id="r-1", queue_map={"orders": "restored"},
                             checkpoint_state=str(tmp_path / "restore.db"), max_in_flight=MAX_IN_FLIGHT)
    def stop_node_1_once_unconfirmed_records_are_in() -> None:
        deadline = time.monotonic() + 60
        while (depth := ready_count(node_2.connection, vhost, "restored")) <= before_lossy:
            assert time.monotonic() < deadline, f"the target holds {depth} records, none sent since the link broke"
            time.sleep(0.1)
        node_1.stop()

    def lose_replies_then_arm_the_stop() -> None:
        link.replies_lost.set()
        storage.arm(lambda op, key: op == "get" and key == segments[stop_at].key, stop_node_1_once_unconfirmed_records_are_in)

    # When the link to node 1 loses its replies as the restore reads one segment (the plan's verification read it
    # first), and node 1 stops some 250 records later
    link = TcpProxy([(node_1.connection.host, node_1.connection.amqp_port)])
    through_link = replace(cluster.connection(), host="127.0.0.1", amqp_port=link.port)
    storage.arm(lambda op, key: op == "get" and key == segments[lossy_from].key, lose_replies_then_arm_the_stop, nth=2)
    try:
        with pytest.raises(PublishError) as failed:
            RestoreRun(through_link, request, storage).run()

        # Then the run failed saying so and what to do; the target holds records whose confirms it never saw
        assert_clear_failure(failed.value, PublishError, "re-run")
        assert storage.fired_at == segments[stop_at].key
        in_target = ready_count(node_2.connection, vhost, "restored")
        assert in_target > before_lossy

        # When the restore runs again through the node list, node 1 still down
        report = RestoreRun(cluster.connection(), request).run()
    finally:
        link.close()
        node_1.start()

    # Then it resumed from its checkpoint (at most what the first run saw confirmed), skipped the records already in
    # the target, and published the rest
    (row,) = report.queues
    assert row["completed"] and row["published_total"] == COUNT
    # (the first run's stop counted what reached the target, through a node still up; where it could not, the
    # checkpoint holds what it saw confirmed and the retry counts the rest)
    counted_by_the_stop = row["resumed_from"] == in_target and row["already_delivered"] == 0
    assert counted_by_the_stop or row["resumed_from"] <= before_lossy, row
    assert row["resumed_from"] + row["already_delivered"] == in_target, row
    assert row["published"] == COUNT - in_target
    # And the target holds every message exactly once, in order, byte-exact, none delivered before
    backed = as_delivered(behaviour, queue_type, published(COUNT, persistent=True))
    target, delivery_counts = without_broker_headers(read_queue(node_2.connection, vhost, "restored", queue_type, COUNT,
                                                                broker_headers=True))
    assert target == as_delivered(behaviour, queue_type, backed)
    assert set(delivery_counts) == {0}
