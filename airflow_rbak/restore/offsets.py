"""Named stream consumers' offsets, moved to the offsets the restored messages received.

A source consumer that had stored offset ``c`` (its last processed
message) gets the new offset of the last restored record whose source
offset is at or before ``c``; a consumer before every restored record is
left alone. Stored through the stream protocol.
"""

from __future__ import annotations

from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.display import package_logger
from airflow_rbak.restore.checkpoints import QueueCheckpoint, RestoreCheckpointStore
from airflow_rbak.restore.restore_plan import QueuePlan

log = package_logger(__name__)


def map_consumer_offsets(checkpoints: RestoreCheckpointStore, cp: QueueCheckpoint, queue: QueuePlan) -> dict[str, int]:
    """Each saved consumer's new offset in the target stream (consumers with nothing restored left out)."""
    mapped: dict[str, int] = {}
    for name, offset in sorted(queue.consumer_offsets.items()):
        new = checkpoints.mapped_offset(cp, offset)
        if new is not None:
            mapped[name] = new
    return mapped


def restore_consumer_offsets(connection: RabbitMQConnection, checkpoints: RestoreCheckpointStore, cp: QueueCheckpoint,
                             queue: QueuePlan) -> dict[str, int]:
    """Store the mapped offsets of the queue's named consumers in the target stream; returns them."""
    mapped = map_consumer_offsets(checkpoints, cp, queue)
    for name, offset in mapped.items():
        stream_protocol.store_consumer_offset(connection, queue.target_vhost, queue.target_queue, name, offset)
    if mapped:
        log.info("%s: stored %d consumer offsets in %s/%s", queue.task_id, len(mapped), queue.target_vhost, queue.target_queue)
    return mapped
