"""The node a capture is connected to stops in the middle of the capture.

The capture connects through the node list [node 1, node 2, node 3], so to node 1; the queue lives on node 2 (a
classic queue's home, a quorum queue's leader), so stopping node 1 loses the capture's connection and nothing else.
The stop lands from inside the capture's own storage call, once the first chunk is staged and while the capture
holds the rest of the queue unacknowledged. Then: the held messages are back in the queue, the run fails saying
what happened and what to do, and the same backup_id run again (the task's retry, through the list, so node 2)
resumes after the staged chunk and completes byte-exact; the source holds every message, in order, once.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector
from airflow_rbak.capture.errors import CaptureInterruptedError
from airflow_rbak.capture.queue_capture import CaptureResult
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.reliability import faults
from tests.reliability.expect import assert_clear_failure, backed_up, header_order_free, published, without_broker_headers
from tests.reliability.test_broker_faults import as_delivered
from tests.restore.helpers import declare, publish, read_queue

pytestmark = pytest.mark.broker
COUNT, SIZE = 3_000, 6_144  # three staging chunks (a chunk ends at 5,000 deliveries or 8 MiB staged)


class ResultsKept(BackupRun):
    """A backup run that keeps each queue's capture result (how far a resumed capture skipped)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.results: list[CaptureResult] = []

    def capture(self, info: QueueInfo, **kwargs: Any) -> CaptureResult:
        result = super().capture(info, **kwargs)
        self.results.append(result)
        return result


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_the_capture_node_stopped_mid_capture_then_the_retry_resumes_through_another_node(cluster, cluster_vhost, tmp_path,
                                                                                            queue_type):
    behaviour = Behaviour(cluster.version)
    vhost, node_2 = cluster_vhost, cluster.nodes[1].connection
    # Given a queue on node 2, and a backup through the node list (so connected to node 1)
    declare(node_2, vhost, {"orders": queue_type})
    publish(node_2, vhost, "orders", 0, COUNT, SIZE)
    storage = faults.TriggerStorage(open_storage((tmp_path / "b").as_uri()))
    settings = BackupSettings("lost-1", storage.url, selector=QueueSelector(vhosts=(vhost,)),
                              allow_delivery_count_increase=behaviour.backup_leaves_out_by_default(queue_type))

    # When node 1 stops once the first chunk is staged (the rest delivered to the capture, unacknowledged)
    storage.arm(lambda op, key: op == "put" and key.endswith("chunk-00000001.zst"), cluster.nodes[0].stop)
    try:
        with pytest.raises(CaptureInterruptedError) as failed:
            BackupRun(cluster.connection(), settings, storage).run()

        # Then the run failed saying so, the backup is incomplete, and the held messages are back in the queue
        assert storage.fired_at is not None
        assert_clear_failure(failed.value, CaptureInterruptedError, "staged messages", "Re-run the same backup_id")
        assert ManifestStore(storage).load("lost-1").completed_at is None

        # When the task's retry runs the same backup_id through the same list, node 1 still down
        retry = ResultsKept(cluster.connection(), settings, storage)
        manifest = retry.run()
    finally:
        cluster.nodes[0].start()

    # Then it resumed after the staged chunk and the backup holds every message once, in order, byte-exact
    assert manifest.completed_at is not None and manifest.queue(vhost, "orders").message_count == COUNT
    (result,) = retry.results
    assert 0 < result.resumed_from < COUNT and result.messages == COUNT
    expected = as_delivered(behaviour, queue_type, published(COUNT, SIZE), returned=True)
    sorted_on_return_only = behaviour.sorts_headers(queue_type, returned=True) != behaviour.sorts_headers(queue_type)
    same = header_order_free if sorted_on_return_only else list
    assert same(backed_up(storage, "lost-1", vhost, "orders")) == same(expected)
    # And the source holds every message, in order, once (none dead-lettered or dropped)
    source, _delivery_counts = without_broker_headers(read_queue(node_2, vhost, "orders", queue_type, COUNT, broker_headers=True))
    assert source == expected
