"""A node of the cluster stopped while a restore publishes: the confirms in flight are lost.

The restore publishes through the node list [node 1, node 2, node 3], so through node 1, into a target queue on
node 2 (a classic queue's home, a quorum queue's leader). Node 1 stops from inside the restore's own read of a
segment past the middle: the records published before it are confirmed and checkpointed, confirmed but not yet
checkpointed (a checkpoint is committed every 500 confirms), or sent and unconfirmed (the publisher's window); the
confirms of the last two never reach the checkpoint. The run fails saying so; the same restore run again (the
task's retry, through the list, so node 2) reads the target's depth, skips exactly the records already there, and
publishes the rest: every message once, in order, byte-exact (airflow_rbak/restore/publisher.py)."""

from __future__ import annotations

import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, published, without_broker_headers
from tests.reliability.test_broker_faults import as_delivered
from tests.restore.helpers import backup, declare, publish, read_queue, ready_count

pytestmark = pytest.mark.broker
COUNT = 2_000


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_the_publishing_node_stopped_mid_restore_then_the_retry_publishes_every_message_once(cluster, cluster_vhost, tmp_path,
                                                                                            queue_type):
    behaviour = Behaviour(cluster.version)
    vhost, node_1, node_2 = cluster_vhost, cluster.nodes[0], cluster.nodes[1]
    # Given a backup of a queue of persistent messages, in many small segments, and an empty target queue on node 2
    declare(node_2.connection, vhost, {"orders": queue_type})
    publish(node_2.connection, vhost, "orders", 0, COUNT, persistent=True)
    location = (tmp_path / "b").as_uri()
    manifest = backup(node_2.connection, location, "r-1", vhost, segment_max_bytes=32 * 1024,
                      allow_delivery_count_increase=behaviour.backup_leaves_out_by_default(queue_type))
    declare(node_2.connection, vhost, {"restored": queue_type})
    segments = manifest.queue(vhost, "orders").segments
    assert len(segments) >= 20
    storage = faults.TriggerStorage(open_storage(location))
    request = RestoreRequest(location, backup_id="r-1", queue_map={"orders": "restored"},
                             checkpoint_state=str(tmp_path / "restore.db"), max_in_flight=300)
    struck = len(segments) * 2 // 3
    before_struck = sum(s.record_count for s in segments[:struck])

    # When node 1 stops as the restore reads that segment (the plan's verification read it first)
    storage.arm(lambda op, key: op == "get" and key == segments[struck].key, node_1.stop, nth=2)
    try:
        with pytest.raises(PublishError) as failed:
            RestoreRun(cluster.connection(), request, storage).run()

        # Then the run failed saying so and what to do
        assert storage.fired_at == segments[struck].key
        in_target = ready_count(node_2.connection, vhost, "restored")
        assert 0 < in_target <= before_struck  # (what node 1 had sent on; the rest never left the client)
        assert_clear_failure(failed.value, PublishError, "re-run")

        # When the restore runs again through the same list, node 1 still down
        report = RestoreRun(cluster.connection(), request).run()
    finally:
        node_1.start()

    # Then it resumed after the checkpoint, skipped the records already in the target whose confirms were lost
    # with node 1 (or never read before the checkpoint was committed), and published the rest
    (row,) = report.queues
    assert row["completed"] and row["published_total"] == COUNT
    assert row["resumed_from"] + row["already_delivered"] + row["published"] == COUNT, row
    assert 0 < row["published"] < COUNT
    # And the target holds every message exactly once, in order, byte-exact, none delivered before
    backed = as_delivered(behaviour, queue_type, published(COUNT, persistent=True))
    target, delivery_counts = without_broker_headers(read_queue(node_2.connection, vhost, "restored", queue_type, COUNT,
                                                                broker_headers=True))
    assert target == as_delivered(behaviour, queue_type, backed)
    assert set(delivery_counts) == {0}
