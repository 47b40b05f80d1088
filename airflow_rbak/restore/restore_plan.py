"""The restore plan as data: what a restore will do, per queue and per segment, as plain JSON-able records.

:mod:`.plan` computes it (reading the manifest and verifying segments), the sections (:mod:`.sections`) add to it
what their feature found, :mod:`.target` fills in the target as it is now, and the sealed approval envelope
(:mod:`.authority`) carries it between tasks. Everything that only reads a plan imports it from here, so the
planner can change without touching them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_rbak.restore import selection
from airflow_rbak.restore.checkpoints import QueueCheckpoint
from airflow_rbak.restore.errors import BackupNotRestorableError
from airflow_rbak.restore.message_sizes import LargeMessage
from airflow_rbak.restore.request import RestoreRequest


@dataclass(frozen=True)
class QueueRefusal:
    """A queue the plan leaves out before anything is published, and why (the report fails naming it)."""

    vhost: str
    queue: str
    reason: str


@dataclass(frozen=True)
class SegmentPlan:
    """One segment the restore reads; ``first_ordinal`` is its first record's position in the queue."""

    key: str
    sequence: int
    record_count: int
    first_ordinal: int
    in_window: int
    checksum: str
    first_timestamp: int | None = None
    last_timestamp: int | None = None


@dataclass(frozen=True)
class SkippedSegment:
    """A damaged segment left out because the user allowed it: what it held and why it was skipped."""

    vhost: str
    queue: str
    key: str
    sequence: int
    record_count: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class QueuePlan:
    """One source queue, where it goes, and how many of its records the window keeps."""

    source_vhost: str
    source_queue: str
    target_vhost: str
    target_queue: str
    queue_type: str
    records_total: int
    records_in_window: int
    segments: tuple[SegmentPlan, ...]
    exchanges: tuple[str, ...] = ()
    consumer_offsets: dict[str, int] = field(default_factory=dict)
    #: The target as the plan found it (:mod:`.target`): messages held (None: no such queue), whether this
    #: restore's checkpoint says it already began there, and what it confirmed then.
    target_depth: int | None = None
    resumes: bool = False
    published_before: int = 0
    completed_before: bool = False
    #: The checkpoint's next record at plan time: with the three above, the resume point the plan pins (``contract``).
    resume_ordinal: int = 0
    #: exchange mode: the other non-empty queues of the target vhost, where bindings may route records.
    vhost_depths: dict[str, int] = field(default_factory=dict)
    #: The backups whose segments hold this queue's records in the window, in chain order (:mod:`repository.chain`).
    drawn_from: tuple[str, ...] = ()
    #: The type the target queue gets when a transformation converts it (None: the backup's ``queue_type``).
    target_queue_type: str | None = None
    #: Records in the window whose body is over ``message_sizes.LARGE_MESSAGE_BYTES``: (segment key, index, bytes).
    large_messages: tuple[LargeMessage, ...] = ()
    #: Why the target will deliver this queue's messages in another order than the source (:mod:`.delivery_order`).
    delivery_order_warning: str | None = None
    #: A selective restore's positions of this queue, as sorted half-open ranges (None: every record in the window;
    #: :mod:`.selection`); ``chosen``: how many positions the request named for it (None: none named).
    selected: tuple[tuple[int, int], ...] | None = None
    chosen: int | None = None
    #: The first few selected records (position, ids, route, size; never the body), as a dry run shows them.
    first_matches: tuple[dict[str, Any], ...] = ()
    #: Dead-letter replay (:mod:`.dead_letters`): records go to ``(exchange, routing key, count)`` of their death,
    #: never into the target queue.
    replay: bool = False
    replay_routes: tuple[tuple[str, str, int], ...] = ()
    #: Exchange mode (:mod:`.exchange_routes`): ``(exchange, routing key, count)`` of the routes the records in the
    #: window (and selection) are published with, the most used first; the routes and messages left out of it; and
    #: whether that count of routes is exact. Empty in queue mode and for a replay.
    routes: tuple[tuple[str, str, int], ...] = ()
    routes_more: tuple[int, int] = (0, 0)
    routes_exact: bool = True
    #: Recovery to a point in time (:mod:`.journal_recovery`): the journal archive whose records this entry replays
    #: through the target's routing (each to its own exchange and routing key, CC and BCC kept), and the snapshot's
    #: creation time, the first ``backed_up_at`` it replays (the last is the request's ``journal_until``, excluded).
    journal_archive: str | None = None
    journal_from: int | None = None

    @property
    def to_add(self) -> int:
        """Records this run will still publish (a finished restore adds nothing; a resumed one the rest)."""
        return 0 if self.completed_before else max(self.records_in_window - self.published_before, 0)

    @property
    def task_id(self) -> str:
        """A stable label for logs and mapped-task names."""
        return f"{self.source_vhost}/{self.source_queue}"


@dataclass(frozen=True)
class RestorePlan:
    """Everything a restore will do, computed without touching the target broker."""

    backup_id: str
    storage_url: str
    window_start: int | None
    window_end: int | None
    queues: tuple[QueuePlan, ...]
    skipped_segments: tuple[SkippedSegment, ...] = ()
    definitions_key: str | None = None
    segments_verified: int = 0
    segments_outside_window: int = 0
    source_cluster: str | None = None
    target_cluster: str | None = None
    target_cluster_id: str | None = None
    definitions_changes: dict[str, Any] | None = None
    drawn_from: tuple[str, ...] = ()
    #: What the transformations did to the definitions (``restore.migration``); None when none are named.
    migration: dict[str, Any] | None = None
    #: The vhosts the backup was asked for (its definitions export holds every vhost); None: every vhost.
    backup_vhosts: tuple[str, ...] | None = None
    #: The source vhosts of the queues this restore selects: whose definitions a manifest naming no vhosts imports.
    queue_vhosts: tuple[str, ...] = ()
    #: The definitions export and the import as checksums (``contract.DefinitionsPin`` JSON); the definitions step
    #: refuses when either changed after approval.
    definitions_pin: dict[str, Any] | None = None
    #: Every object the definitions import creates or replaces, with what acts beyond it (``import_view``).
    definitions_import: list[dict[str, Any]] | None = None
    #: The target's ``max_message_size`` and where it was read (:mod:`.message_sizes`); None: not inspected.
    target_max_message_size: int | None = None
    target_message_size_source: str | None = None
    #: What the target's version does with the definitions it treats differently (``target_compatibility``).
    definitions_compatibility: list[dict[str, str]] | None = None
    #: The runtime parameters (operator policies, ...) of the imported vhosts that a restore does not import.
    definitions_not_imported: list[dict[str, str]] | None = None
    #: The RabbitMQ versions of the source (the backup's manifest) and of the target (when inspected).
    source_rabbitmq_version: str | None = None
    target_rabbitmq_version: str | None = None
    #: The selection in one line (``selection.describe``); None: every record of the window.
    selection: str | None = None
    #: Queues left out before anything was published (a dead-letter queue whose records give no route to replay them
    #: to); the report fails naming them, the others are restored.
    refused_queues: tuple[QueueRefusal, ...] = ()
    #: A recovery to a point in time: the snapshot, the journal's coverage, the archives replayed and what each
    #: adds, the gaps in the window (:func:`.journal_recovery.plan_journal`); None: a plain restore.
    journal: dict[str, Any] | None = None

    @property
    def records_in_window(self) -> int:
        """Records the plan publishes, summed over its queues."""
        return sum(q.records_in_window for q in self.queues)

    def queue(self, source_vhost: str, source_queue: str) -> QueuePlan:
        """The plan of one source queue; refuses a queue the plan does not hold."""
        for q in self.queues:
            if (q.source_vhost, q.source_queue) == (source_vhost, source_queue):
                return q
        raise BackupNotRestorableError(f"queue {source_queue!r} of vhost {source_vhost!r} is not in the restore plan")

    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON (XCom, the sealed approval envelope)."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RestorePlan:
        """The plan :meth:`to_json` wrote, with its tuples and records typed again."""
        queues = tuple(
            QueuePlan(
                **{
                    **q,
                    "segments": tuple(SegmentPlan(**s) for s in q["segments"]),
                    "exchanges": tuple(q.get("exchanges", ())),
                    "drawn_from": tuple(q.get("drawn_from", ())),
                    "large_messages": tuple(tuple(m) for m in q.get("large_messages", ())),
                    "selected": None if q.get("selected") is None else tuple(tuple(r) for r in q["selected"]),
                    "first_matches": tuple(q.get("first_matches", ())),
                    "replay_routes": tuple(tuple(r) for r in q.get("replay_routes", ())),
                    "routes": tuple(tuple(r) for r in q.get("routes", ())),
                    "routes_more": tuple(q.get("routes_more", (0, 0))),
                }
            )
            for q in obj["queues"]
        )
        skipped = tuple(SkippedSegment(**{**s, "reasons": tuple(s["reasons"])}) for s in obj.get("skipped_segments", ()))
        vhosts = obj.get("backup_vhosts")
        return cls(**{**obj, "queues": queues, "skipped_segments": skipped, "drawn_from": tuple(obj.get("drawn_from", ())),
                      "backup_vhosts": tuple(vhosts) if vhosts is not None else None,
                      "queue_vhosts": tuple(obj.get("queue_vhosts", ())),
                      "refused_queues": tuple(QueueRefusal(**r) for r in obj.get("refused_queues", ()))})


def queue_checkpoint(plan: RestorePlan, queue: QueuePlan, request: RestoreRequest) -> QueueCheckpoint:
    """The checkpoint key of one queue of this restore: target cluster, location, backup, queues, window."""
    if not plan.target_cluster_id:
        raise BackupNotRestorableError("the plan does not name its target cluster; plan the restore again")
    label = request.window_label() + selection.checkpoint_label(queue.selected, queue.replay)
    return QueueCheckpoint(plan.backup_id, queue.source_vhost, queue.source_queue, queue.target_vhost, queue.target_queue,
                           label, target_cluster=plan.target_cluster_id, location=plan.storage_url)
