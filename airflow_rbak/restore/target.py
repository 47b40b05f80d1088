"""The target side of a queue restore: make sure the destination exists and measure how much it holds.

The depth is what makes a resumed restore exact: a classic or quorum queue's
ready-message count, or for a stream its tail offset + 1 (a stream's
``queue.declare-ok`` always reports 0 messages on RabbitMQ 3.10).

What the target holds before a restore touches it, and the refusal that keeps a restore from harming it.

A restore with the defaults once published into the source's own live
queues (5 messages became 10). So before anything is imported or published,
the plan reads, for every queue it will publish into, what the target holds
now and whether a checkpoint says this very restore already began there.
With ``on_existing_messages: refuse`` (the default) a queue that holds
messages and was not begun by this restore stops the whole run, naming each
queue, its depth, and what to set. In ``exchange`` mode the bindings decide
where a message lands, but never outside its vhost: so there every queue of
the target vhost must be empty.

Depths are read as the broker sees them now: ready messages by passive
declare (the management API's counts can be 5 s old), and the management
API's total (which also counts unacknowledged messages) when it is larger;
a stream's depth is its tail offset + 1.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pika
import pika.exceptions

from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import QueueNotFoundError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.message_size_limit import message_size_limit
from airflow_rbak.display import package_logger
from airflow_rbak.restore import sections
from airflow_rbak.restore.checkpoints import RestoreCheckpointStore
from airflow_rbak.restore.errors import PublishError, RestoreRefusedError
from airflow_rbak.restore.quorum_support import target_version
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan, queue_checkpoint


def queue_exists(conn: pika.BlockingConnection, name: str) -> bool:
    """Passive declare on a throwaway channel (a 404 closes the channel it happens on)."""
    channel = conn.channel()
    try:
        channel.queue_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            return False
        raise
    channel.close()
    return True


def ensure_queue(conn: pika.BlockingConnection, queue: QueuePlan) -> bool:
    """Declare the target queue when it is missing, of the type it has in the target (a transformation may have
    converted it) rather than the backup's; True when it was created."""
    if queue_exists(conn, queue.target_queue):
        return False
    channel = conn.channel()
    channel.queue_declare(queue.target_queue, durable=True,
                          arguments={"x-queue-type": queue.target_queue_type or queue.queue_type})
    channel.close()
    return True


def check_exchanges(conn: pika.BlockingConnection, queue: QueuePlan) -> None:
    """Refuse to start an exchange-mode publish when an exchange the records name is missing in the target."""
    for name in queue.exchanges:
        if not name:
            continue
        channel = conn.channel()
        try:
            channel.exchange_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                fix = ("(a dead-letter replay publishes where its records died)" if queue.replay
                       else "or use publish_mode='queue'")
                raise PublishError(
                    f"exchange {name!r} does not exist in vhost {queue.target_vhost!r}; restore definitions first "
                    f"(restore_definitions) {fix}") from None
            raise
        channel.close()


def queue_depth(conn: pika.BlockingConnection, connection: RabbitMQConnection, queue: QueuePlan, settle: float = 0.0) -> int:
    """Messages in the target now; with ``settle`` > 0, reads until two readings agree (after a crash)."""
    reading = _read_depth(conn, connection, queue)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.3)
        again = _read_depth(conn, connection, queue)
        if again == reading:
            break
        reading = again
    return reading


def _read_depth(conn: pika.BlockingConnection, connection: RabbitMQConnection, queue: QueuePlan) -> int:
    if queue.queue_type == "stream":
        tail = stream_protocol.stream_tail(connection, queue.target_vhost, queue.target_queue, wait=2.0)
        return 0 if tail is None else tail + 1
    channel = conn.channel()
    count = channel.queue_declare(queue.target_queue, passive=True).method.message_count
    channel.close()
    return int(count)


log = package_logger(__name__)


def inspect_target(plan: RestorePlan, client: ManagementClient, connection: RabbitMQConnection, request: RestoreRequest,
                   checkpoints: RestoreCheckpointStore) -> RestorePlan:
    """The plan with the target's identity and, per queue, its depth now and what this restore already put there;
    then as every section completes it (:func:`.sections.with_target`)."""
    plan = replace(plan, target_cluster=client.cluster_name(), target_cluster_id=client.cluster_identity())
    vhosts = set(client.vhosts())
    # max_message_size is the node's: read it through a vhost the restore reaches (one that exists, else "/")
    reach = next((q.target_vhost for q in plan.queues if q.target_vhost in vhosts), "/")
    version = client.version()
    limit = message_size_limit(connection, reach, target_version(version))
    plan = replace(plan, target_max_message_size=limit.max_bytes, target_message_size_source=limit.source,
                   target_rabbitmq_version=version)
    queues = []
    for queue in plan.queues:
        cp = checkpoints.load(queue_checkpoint(plan, queue, request))
        journal = queue.journal_archive is not None  # routed by the target's bindings: into no queue of its own
        depth = (target_depth(client, connection, queue.target_vhost, queue.target_queue)
                 if queue.target_vhost in vhosts and not journal else None)
        others = {}
        if (request.publish_mode == "exchange" or queue.replay or journal) and queue.target_vhost in vhosts:
            others = {q["name"]: target_depth(client, connection, queue.target_vhost, q["name"])
                      for q in client.queues(queue.target_vhost) if q.get("name") != queue.target_queue}
        queues.append(replace(queue, target_depth=depth, resumes=cp.started, published_before=cp.published,
                              completed_before=cp.completed, resume_ordinal=cp.next_ordinal,
                              vhost_depths={k: v for k, v in others.items() if v}))
    return sections.with_target(replace(plan, queues=tuple(queues)), request)


def refusal(plan: RestorePlan, request: RestoreRequest) -> str | None:
    """Why this restore must not run: what the sections refuse (definitions the target rejects, records it cannot
    take, ...), or (with ``on_existing_messages: refuse``) target queues that hold messages. None: nothing to refuse."""
    reasons = [*sections.refusals(plan, request), *filter(None, [_existing_refusal(plan, request)])]
    return " | ".join(reasons) or None


def _existing_refusal(plan: RestorePlan, request: RestoreRequest) -> str | None:
    if request.on_existing_messages == "append":
        return None
    held = []
    # a recovery's journal entries route into the queues its snapshot fills: once it began in a vhost, those are its own
    begun = {q.target_vhost for q in plan.queues if q.resumes or q.completed_before}
    for q in plan.queues:
        if q.resumes or q.records_in_window == 0 or (q.journal_archive is not None and q.target_vhost in begun):
            continue
        if q.target_depth:
            held.append(f"{q.target_vhost}/{q.target_queue} holds {q.target_depth}")
        how = "dead-letter replay" if q.replay else "journal replay" if q.journal_archive else "exchange mode"
        held += [f"{q.target_vhost}/{name} holds {depth} ({how} routes within the vhost)"
                 for name, depth in sorted(q.vhost_depths.items())]
    if not held:
        return None
    same = plan.source_cluster is not None and plan.source_cluster == plan.target_cluster
    where = f"cluster {plan.target_cluster!r}" + (", the cluster this backup was taken from," if same else "")
    return (f"refusing to restore backup {plan.backup_id!r} into {where} because target queues already hold messages "
            f"({'; '.join(held)}): the restore would add to them. Nothing was imported or published. Restore into other "
            "names (vhost_map, queue_map), empty those queues, or set on_existing_messages: append to add to them")


def check_target(plan: RestorePlan, request: RestoreRequest) -> None:
    """Raise :class:`RestoreRefusedError` when the plan's target must not be touched (a dry run only logs it)."""
    reason = refusal(plan, request)
    if reason is None:
        return
    if request.dry_run:
        log.warning("dry run: %s", reason)
        return
    raise RestoreRefusedError(reason)


def target_depth(client: ManagementClient, connection: RabbitMQConnection, vhost: str, queue: str) -> int | None:
    """Messages in ``vhost``/``queue`` now (None when the queue does not exist)."""
    try:
        info = client.queue(vhost, queue)
    except QueueNotFoundError:
        return None
    total = int(info.get("messages") or 0)
    if info.get("type") == "stream":
        tail = stream_protocol.stream_tail(connection, vhost, queue, wait=2.0)
        return max(total, 0 if tail is None else tail + 1)
    with pika.BlockingConnection(connection.pika_parameters_all(vhost)) as conn:
        try:
            ready = conn.channel().queue_declare(queue, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return None
            raise
    return max(total, int(ready))
