"""Before a queue restore sends its first record on a fresh start, its target is measured again against the plan.

A fresh start is a publish whose checkpoint says this restore never began: there is none, or the one stored fails its
seal. The plan may have pinned exactly that; but a missing checkpoint is evidence that something happened, never
permission to start afresh. An attempt that published part of the queue and whose ``progress.json`` was then
deleted looks the same, and its retry would take the target's depth as it is now for its base and publish every
record again. So before the first send the target must hold no more than the plan saw; else the queue is refused,
with nothing sent, naming what the plan saw and what it holds now.

What is measured is what the publish can reach, by the measure the plan used (:func:`.target.target_depth`): in
``queue`` mode the target queue; in ``exchange`` mode and for a dead-letter replay, whose records the bindings may route
to any queue of the target vhost, every queue of it (``QueuePlan.vhost_depths``). A queue the plan found missing, or
did not see, counts as empty. Fewer messages than planned refuse nothing (consumers take messages).

Other queue restores of the same plan may already have published into the same vhost: their messages are expected.
One in ``queue`` mode changes only its own target queue, which is then left out of the comparison. Once one that
routes through exchanges has begun, no queue of the vhost can tell its messages from a deleted checkpoint's: the
comparison is skipped with a warning (``exchange`` mode is at-least-once, :mod:`.publisher`). Siblings are read after
the target is measured, so a sibling whose messages were counted has its beginning (saved before its first send) seen.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.display import package_logger
from airflow_rbak.restore.errors import UnexpectedMessagesError
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.target import target_depth

log = package_logger(__name__)


def spreads(publish_mode: str, queue: QueuePlan) -> bool:
    """True when the queue's records go through exchanges, so they may land in any queue of the target vhost."""
    return publish_mode == "exchange" or queue.replay or queue.journal_archive is not None


def unexpected(queue: QueuePlan, now: dict[str, int], spread: bool, begun: list[QueuePlan],
               publish_mode: str) -> list[str] | None:
    """Each measured queue holding more than the plan saw, as ``name: saw X, holds Y``; None when ``begun`` (the plan's
    other queue restores into this vhost that have begun) makes the comparison meaningless."""
    if any(spreads(publish_mode, s) for s in begun):
        return None
    theirs = {s.target_queue for s in begun}
    found = []
    for name, depth in sorted(now.items()):
        if name in theirs:
            continue
        if name == queue.target_queue:
            planned = queue.target_depth or 0
            saw = "no such queue" if queue.target_depth is None else str(planned)
        else:
            planned = queue.vhost_depths.get(name, 0) if spread else 0
            saw = str(planned)
        if depth > planned:
            found.append(f"{queue.target_vhost}/{name}: the plan saw {saw}, it holds {depth} now")
    return found


def check_fresh_start(client: ManagementClient, connection: RabbitMQConnection, plan: RestorePlan, queue: QueuePlan,
                      publish_mode: str, has_begun: Callable[[QueuePlan], bool]) -> None:
    """Raise :class:`UnexpectedMessagesError` when what the publish can reach holds messages the plan did not see.

    ``has_begun`` says whether another queue restore of the plan has begun (its checkpoint, or the plan's pin)."""
    vhost = queue.target_vhost
    if vhost not in set(client.vhosts()):
        return  # nothing there yet: the definitions step or the publish creates it
    spread = spreads(publish_mode, queue)
    names = [str(q["name"]) for q in client.queues(vhost)] if spread else [queue.target_queue]
    now = {name: target_depth(client, connection, vhost, name) or 0 for name in names}
    siblings = [s for s in plan.queues if s.target_vhost == vhost
                and (s.source_vhost, s.source_queue) != (queue.source_vhost, queue.source_queue) and has_begun(s)]
    found = unexpected(queue, now, spread, siblings, publish_mode)
    if found is None:
        log.warning("%s: another queue of this restore routes through the exchanges of vhost %r and has begun, so the "
                    "vhost's queues cannot show whether this queue was published before; publishing from its start",
                    queue.task_id, vhost)
        return
    if found:
        raise UnexpectedMessagesError(
            f"{queue.task_id} -> {vhost}/{queue.target_queue}: this restore's checkpoint says it never began, but the "
            f"target holds messages the plan did not expect ({'; '.join(found)}). A checkpoint of this restore may have "
            "been deleted after an attempt published, or someone else published there since the plan; publishing "
            "from the first record could put records in twice. Nothing was published to it. If those messages are "
            "this restore's, purge the target queue and run again; if not, plan the restore again")
