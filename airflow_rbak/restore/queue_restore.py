"""Restore one queue: claim, checkpoint, target, resume point, then publish every record in the window (and selection).

The run holds the queue restore's claim (:mod:`.claims`) from before it reads the checkpoint until its last write, so
a second run of the same restore refuses, or later finds the queue completed. A fresh start (no checkpoint of this
restore) first measures the target against the plan (:mod:`.fresh_start`); a resume counts as delivered only what its
earlier attempt's sent bound can explain (:func:`.publisher.reconcile`), and on a stream reads it back
(:mod:`.stream_resume`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pika
import pika.exceptions

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.display import package_logger
from airflow_rbak.restore import stream_resume, target
from airflow_rbak.restore.checkpoints import QueueCheckpoint, RestoreCheckpointStore
from airflow_rbak.restore.contract import check_resume
from airflow_rbak.restore.earlier_attempts import close_earlier_attempts, publisher_names, publisher_names_for
from airflow_rbak.restore.errors import PublishError
from airflow_rbak.restore.fresh_start import check_fresh_start
from airflow_rbak.restore.publisher import ConfirmPipeline, reconcile, sent_allowance
from airflow_rbak.restore.records import Positioned, iter_window_records
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan, queue_checkpoint
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)
_SETTLE_SECONDS = 3.0


@dataclass
class QueueResult:
    """What restoring one queue did; JSON-serialisable for XCom."""

    source_vhost: str
    source_queue: str
    target_vhost: str
    target_queue: str
    planned: int
    published: int = 0
    published_total: int = 0
    already_delivered: int = 0
    resumed_from: int = 0
    unroutable: list[dict[str, Any]] = field(default_factory=list)
    consumer_offsets: dict[str, int] = field(default_factory=dict)
    created_queue: bool = False
    #: Connections of an earlier attempt of this restore the broker still held, closed before the target was measured.
    closed_earlier_connections: int = 0
    completed: bool = False
    dry_run: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def restore_queue(connection: RabbitMQConnection, storage: Storage, request: RestoreRequest, plan: RestorePlan,
                  queue: QueuePlan, checkpoints: RestoreCheckpointStore) -> QueueResult:
    """Publish the queue's records in the window, resuming after its checkpoint; dry run publishes nothing.

    A checkpoint that is not the resume point the plan pinned (or a later state of it) raises PlanChangedError
    before anything is published (:func:`.contract.check_resume`); another run holding the queue restore's claim,
    RestoreClaimedError; a target holding messages its checkpoint cannot account for, UnexpectedMessagesError."""
    started = time.monotonic()
    result = QueueResult(queue.source_vhost, queue.source_queue, queue.target_vhost, queue.target_queue, queue.records_in_window)
    if request.dry_run:
        result.dry_run, result.published = True, queue.to_add
        return result
    blank = queue_checkpoint(plan, queue, request)
    with checkpoints.claim(blank):
        cp = checkpoints.load(blank)
        check_resume(queue, cp)  # the approved resume point, or later progress of the same restore; never a skip
        result.resumed_from = cp.next_ordinal
        if not cp.completed:
            if not cp.started:
                _check_fresh_start(connection, request, plan, queue, checkpoints)
            cp = _publish(connection, storage, request, queue, checkpoints, cp, result)
    result.published_total = cp.published
    result.completed = cp.completed
    result.unroutable = [asdict(u) for u in checkpoints.unroutable(cp)]
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _check_fresh_start(connection: RabbitMQConnection, request: RestoreRequest, plan: RestorePlan, queue: QueuePlan,
                       checkpoints: RestoreCheckpointStore) -> None:
    """Refuse a fresh start into a target that gained messages since the plan (:mod:`.fresh_start`)."""
    def has_begun(other: QueuePlan) -> bool:
        return other.resumes or checkpoints.load(queue_checkpoint(plan, other, request)).started

    with ManagementClient(connection) as client:
        check_fresh_start(client, connection, plan, queue, request.publish_mode, has_begun)


def _publish(connection: RabbitMQConnection, storage: Storage, request: RestoreRequest, queue: QueuePlan,
             checkpoints: RestoreCheckpointStore, cp: QueueCheckpoint, result: QueueResult) -> QueueCheckpoint:
    prefix, name = publisher_names(cp)
    try:
        conn = blocking_connection(connection.pika_parameters_all(queue.target_vhost, name))
    except pika.exceptions.AMQPError as exc:
        raise PublishError(f"cannot connect to vhost {queue.target_vhost!r} on {connection.addresses} "
                           f"({type(exc).__name__}); check the connection and that the vhost exists") from None
    try:
        if _exact(request, queue):
            result.created_queue = target.ensure_queue(conn, queue)
        else:
            target.check_exchanges(conn, queue)
        records = iter_window_records(storage, queue, request, cp.next_ordinal)
        if cp.depth_base is not None:  # a re-run: nothing an earlier attempt sent may arrive once it has measured
            closed = close_earlier_attempts(connection, prefix, name)
            result.closed_earlier_connections = len(closed)
            if closed:
                log.warning("closed %d connection(s) of an earlier attempt of this restore still open on the broker "
                            "before measuring %s/%s", len(closed), queue.target_vhost, queue.target_queue)
        cp = _resume(conn, connection, queue, checkpoints, cp, records, result, request)
        measure = (lambda: _depth_after_stop(connection, queue, prefix)) if _exact(request, queue) else None
        return _send(conn, connection, request, queue, checkpoints, cp, records, result, measure)
    except pika.exceptions.AMQPError as exc:
        raise PublishError(f"restore of {queue.task_id} into {queue.target_vhost}/{queue.target_queue} stopped "
                           f"({type(exc).__name__}: {exc}); re-run to resume after the checkpoint") from None
    finally:
        try:
            conn.close()
        except pika.exceptions.AMQPError:
            pass


def _resume(conn: pika.BlockingConnection, connection: RabbitMQConnection, queue: QueuePlan, checkpoints: RestoreCheckpointStore,
            cp: QueueCheckpoint, records: Any, result: QueueResult, request: RestoreRequest) -> QueueCheckpoint:
    """Measure the target; on a re-run, skip the records a crashed run already got into it, as far as its sent bound
    explains them (and, on a stream, as the messages there show)."""
    if cp.depth_base is None:
        return cp  # a fresh start (depth_base is set in _send), or exchange mode (no exact resume there)
    depth = target.queue_depth(conn, connection, queue, settle=_SETTLE_SECONDS)
    extra = depth - cp.depth_base
    allowance = sent_allowance(cp, request.max_in_flight)
    skip: list[Positioned] = list(itertools.islice(records, min(extra, allowance))) if extra > 0 else []
    updated = reconcile(cp, depth, skip, allowance)
    result.already_delivered = updated.published - cp.published
    if queue.queue_type == "stream" and result.already_delivered:
        stream_resume.check_gap(connection, queue.target_vhost, queue.target_queue, cp.depth_base, skip)
        if request.restore_consumer_offsets:  # their new offsets, for the mapping
            checkpoints.add_stream_offsets(cp, [(s.record.delivery_tag, cp.depth_base + j) for j, s in enumerate(skip)])
    if updated != cp:
        checkpoints.save(updated)
    return updated


def _depth_after_stop(connection: RabbitMQConnection, queue: QueuePlan, prefix: str) -> int | None:
    """The target's settled depth once the broker holds no connection of this restore (a stream: ``None``, its re-run
    reads the gap back); what a stopped attempt counts its unconfirmed publishes by."""
    if queue.queue_type == "stream":
        return None
    _, name = publisher_names_for(prefix)
    with blocking_connection(connection.pika_parameters_all(queue.target_vhost, name)) as conn:
        close_earlier_attempts(connection, prefix, name)
        return target.queue_depth(conn, connection, queue, settle=_SETTLE_SECONDS)


def _send(conn: pika.BlockingConnection, connection: RabbitMQConnection, request: RestoreRequest, queue: QueuePlan,
          checkpoints: RestoreCheckpointStore, cp: QueueCheckpoint, records: Any, result: QueueResult,
          measure: Callable[[], int | None] | None = None) -> QueueCheckpoint:
    exact = _exact(request, queue)
    if exact and cp.depth_base is None:
        cp = replace(cp, depth_base=target.queue_depth(conn, connection, queue))
        checkpoints.save(cp)
    elif not cp.stored:  # marks the restore as begun: a re-run resumes it instead of refusing what it published
        checkpoints.save(cp)
    stream = queue.queue_type == "stream" and exact
    next_offset = cp.depth_base if stream else None
    pipeline = ConfirmPipeline(conn, checkpoints, cp, request.max_in_flight, request.max_publish_rate,
                               track_offsets=stream and request.restore_consumer_offsets)
    try:
        for item in records:
            exchange, routing_key = _route(request, queue, item)
            pipeline.publish(item, exchange, routing_key, _properties(item, request, connection), next_offset)
            if next_offset is not None:
                next_offset += 1
        pipeline.drain()
        result.published = pipeline.confirmed
        cp = replace(pipeline.cp, completed=True)
        checkpoints.save(cp)
        log.info("%s -> %s/%s: %d records published and confirmed (%d unroutable)", queue.task_id, queue.target_vhost,
                 queue.target_queue, pipeline.confirmed, pipeline.unroutable)
        return cp
    except BaseException:
        pipeline.stop(measure)
        raise
    finally:
        pipeline.close()


def _exact(request: RestoreRequest, queue: QueuePlan) -> bool:
    """True when every record goes into the target queue itself, so its depth makes a resume exact (``queue`` mode,
    not a dead-letter replay, which publishes where the records died)."""
    return request.publish_mode == "queue" and not queue.replay and queue.journal_archive is None


def _route(request: RestoreRequest, queue: QueuePlan, item: Positioned) -> tuple[str, str]:
    """A replayed record goes where it died, a journal record to its own route; ``queue`` mode and default-exchange
    records straight to the target queue; others keep their route."""
    if item.route is not None:
        return item.route
    record = item.record
    if request.publish_mode == "queue" or record.exchange == "":
        return "", queue.target_queue
    return record.exchange, record.routing_key


def _properties(item: Positioned, request: RestoreRequest, connection: RabbitMQConnection) -> bytes:
    """The record's content-header property list to publish (``user_id`` left out where ``strip_user_id`` says)."""
    record = item.record
    user_id = record.user_id
    if user_id is not None and user_id != connection.username:
        if not request.strip_user_id:
            raise PublishError(
                f"record {item.index} of {item.segment_key} has user_id {user_id!r}, which RabbitMQ refuses from "
                f"user {connection.username!r}; restore as that user, or set strip_user_id to publish without it")
        return record.property_list(strip_user_id=True)
    return record.property_list()
