"""One restore drill: the latest complete backup (or a sample of its queues) restored into scratch vhosts, read back,
compared with the backup byte for byte, the scratch vhosts deleted, and a report.

``rbak_verify`` proves that a backup's bytes are intact; a drill proves that they restore: the definitions import,
the publish fast path, the target broker's handling of every property and header. Each source vhost of the drill is
restored by the restore engine (:class:`~airflow_rbak.restore.RestoreRun`) into a scratch vhost of its own (two
source vhosts may hold queues and exchanges of the same names), created and marked by :mod:`.scratch`.

Nothing outside the scratch vhosts changes, so a drill needs no approval: the restore's ``vhost_map`` sends exactly
the drilled source vhost to its scratch vhost, its definitions import is the selection of that vhost (queues, the
exchanges that route to them, their bindings, the vhost's policies; never users, permissions or runtime parameters)
imported into the scratch vhost alone, and both are checked to name no other vhost before anything is imported or
published (:func:`confine`). Its checkpoints go to a temporary local file, so the backup's location is only read.
"""

from __future__ import annotations

import glob
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika.exceptions

from airflow_rbak.broker import management_admin
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.display import package_logger, printable
from airflow_rbak.drill import scratch
from airflow_rbak.drill.compare import QueueComparison, compare_queue
from airflow_rbak.drill.readback import delivered_views, expected_views
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.restore.definitions import import_selection, load_definitions
from airflow_rbak.restore.plan import resolve_manifest
from airflow_rbak.restore.request import RestoreRequest, matches
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.run import RestoreRun
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal

log = package_logger(__name__)


class DrillFailedError(RbakError):
    """A drill found that the backup does not restore as it was stored (or could not restore it)."""


class DrillRefusedError(RbakError):
    """A drill's restore would have reached beyond its scratch vhost; nothing was imported or published."""


@dataclass(frozen=True)
class DrillRequest:
    """One drill, validated at construction: which location, which backup, which queues, and the run it belongs to."""

    storage_url: str
    #: The Airflow run id (or any unique text): names the scratch vhosts and seeds the sample.
    run_id: str
    backup_id: str = "latest"
    vhosts: tuple[str, ...] = ("*",)
    queues: tuple[str, ...] = ("*",)
    #: How many of the selected queues to drill, picked at random (seeded by the run id); 0: every one.
    sample_queues: int = 0
    #: Publish records whose ``user_id`` names another user than the drill's without it (RabbitMQ refuses them
    #: otherwise), and expect them so; the restore's ``strip_user_id``.
    strip_user_id: bool = False
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.storage_url, str) or not self.storage_url:
            raise ConfigurationError("storage_url is required")
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigurationError("run_id is required: it names the drill's scratch vhosts")
        for name in ("vhosts", "queues"):
            value = getattr(self, name)
            value = (value,) if isinstance(value, str) else tuple(value)
            if not value or not all(isinstance(v, str) and v for v in value):
                raise ConfigurationError(f"{name} must be a list of glob patterns, e.g. ['*']")
            object.__setattr__(self, name, value)
        if not isinstance(self.strip_user_id, bool):
            raise ConfigurationError(f"strip_user_id must be true or false, got {self.strip_user_id!r}")
        if isinstance(self.sample_queues, bool) or not isinstance(self.sample_queues, int) or self.sample_queues < 0:
            raise ConfigurationError(f"sample_queues must be a whole number >= 0 (0: every queue), got {self.sample_queues!r}")


@dataclass
class DrillReport:
    """What a drill restored, what it found, and whether its scratch vhosts are gone."""

    storage_url: str
    run_id: str
    backup_id: str | None = None
    scratch_vhosts: list[str] = field(default_factory=list)
    deleted_vhosts: list[str] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    published: int = 0
    compared: int = 0
    #: Segments that failed verification: their queues' other segments are drilled, and the drill fails.
    damaged_segments: list[dict[str, Any]] = field(default_factory=list)
    #: Why the drill could not restore or compare (a refusal, a broker error, a scratch vhost's name taken); None: it could.
    error: str | None = None
    cleanup_error: str | None = None
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and self.cleanup_error is None and not self.damaged_segments and bool(
            self.queues) and all(q["passed"] for q in self.queues)

    def describe(self) -> str:
        head = f"restore drill of {self.backup_id or 'the latest backup'} from {self.storage_url}"
        if self.passed:
            return (f"{head} passed: {len(self.queues)} queues, {self.compared:,} messages restored and equal to the "
                    "backup byte for byte; scratch vhosts deleted")
        reasons = [self.error] if self.error else []
        reasons += [f"damaged segment {d['key']} of {d['vhost']}/{d['queue']} ({d['record_count']} records not "
                    f"restorable): {'; '.join(d['reasons'])}" for d in self.damaged_segments]
        if not self.queues and not self.error:
            reasons.append("no queue was drilled (the selection matched none)")
        for q in self.queues:
            if not q["expected"] == q["delivered"] == q["matched"]:  # (damaged segments are named above)
                shown = "; ".join(q["problems"][:3])
                reasons.append(f"{q['vhost']}/{q['queue']}: {q['matched']} of {q['expected']} equal, {q['delivered']} "
                               f"delivered ({shown})")
        if self.cleanup_error:
            reasons.append(self.cleanup_error)
        return f"{head} FAILED: " + " | ".join(printable(r) for r in reasons)

    def raise_if_failed(self) -> None:
        if not self.passed:
            raise DrillFailedError(self.describe())

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "passed": self.passed}


def confine(plan: RestorePlan, selected: dict[str, Any] | None, allowed: str) -> None:
    """Refuse a restore whose queues or definitions name any vhost but ``allowed`` (the drill's scratch vhost)."""
    beyond = sorted(({q.target_vhost for q in plan.queues} | set(selected or {})) - {allowed})
    if beyond:
        raise DrillRefusedError(f"the drill's restore would reach vhosts {beyond} beyond its scratch vhost {allowed!r}; "
                                "nothing was imported or published")


class DrillRun:
    """A drill from one location into one broker: :meth:`run` does it all, :meth:`cleanup` removes what a stopped
    drill left behind."""

    def __init__(self, connection: RabbitMQConnection, request: DrillRequest, storage: Storage | None = None,
                 seal: StateSeal | None = None) -> None:
        self.connection, self.request, self.seal = connection, request, seal
        self.storage = storage or open_storage(request.storage_url)

    def select(self) -> tuple[str, dict[str, list[str]]]:
        """The backup (``latest`` resolved) and the queues to drill, by source vhost."""
        manifest = resolve_manifest(self.storage, self.request.backup_id)
        chosen = sorted((q.vhost, q.name) for q in manifest.queues
                        if matches(q.vhost, self.request.vhosts) and matches(q.name, self.request.queues))
        if 0 < self.request.sample_queues < len(chosen):
            chosen = sorted(random.Random(self.request.run_id).sample(chosen, self.request.sample_queues))
        by_vhost: dict[str, list[str]] = {}
        for vhost, name in chosen:
            by_vhost.setdefault(vhost, []).append(name)
        return manifest.backup_id, by_vhost

    def run(self) -> DrillReport:
        """Select, create the scratch vhosts, restore and compare each, delete them; the report says what was found.

        What a drill finds ends in the report, not in an exception: a damaged segment (the rest is drilled all the
        same), a message that differs, a restore that could not run (``error``). When a scratch vhost's name is taken it
        stops before creating or restoring anything."""
        started = time.monotonic()
        report = DrillReport(self.storage.url, self.request.run_id)
        created: list[str] = []
        try:
            report.backup_id, by_vhost = self.select()
            names = scratch.scratch_names(self.request.run_id, len(by_vhost))
            report.scratch_vhosts = names
            with ManagementClient(self.connection) as client:
                taken = sorted(set(names) & set(client.vhosts()))
                if taken:
                    raise scratch.ScratchVhostError(f"scratch vhosts {taken} exist already; nothing was created or restored")
                for (vhost, queues), target in zip(sorted(by_vhost.items()), names):
                    scratch.create(client, target, self.request.run_id)
                    created.append(target)
                    self._drill_vhost(client, report, vhost, queues, target)
        except (RbakError, BrokerError, pika.exceptions.AMQPError, OSError) as exc:  # OSError: requests' errors too
            report.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._delete(report, created)
        report.duration_s = round(time.monotonic() - started, 3)
        log.info("%s", report.describe())
        return report

    def cleanup(self) -> list[str]:
        """Delete what is left of this run's scratch vhosts (each only if it carries the run's marker)."""
        with ManagementClient(self.connection) as client:
            left = scratch.leftovers(client, self.request.run_id)
            return [v for v in left if scratch.delete_own(client, v, self.request.run_id)]

    def _delete(self, report: DrillReport, created: Sequence[str]) -> None:
        failures = []
        try:
            with ManagementClient(self.connection) as client:
                for vhost in created:
                    try:
                        if scratch.delete_own(client, vhost, self.request.run_id):
                            report.deleted_vhosts.append(vhost)
                    except scratch.ScratchVhostError as exc:
                        failures.append(str(exc))
        except BrokerError as exc:
            failures.append(f"scratch vhosts {list(created)} not deleted: {exc}")
        report.cleanup_error = " | ".join(failures) or None

    def _drill_vhost(self, client: ManagementClient, report: DrillReport, vhost: str, queues: list[str],
                     target: str) -> None:
        """Restore the queues of one source vhost into its scratch vhost, then compare them one by one."""
        with tempfile.TemporaryDirectory(prefix="rbak-drill-") as tmp:
            request = RestoreRequest(
                self.request.storage_url, backup_id=report.backup_id or self.request.backup_id,
                vhosts=(glob.escape(vhost),), queues=tuple(glob.escape(q) for q in queues), vhost_map={vhost: target},
                checkpoint_state=str(Path(tmp) / "checkpoints.sqlite"), skip_damaged_segments=True,
                strip_user_id=self.request.strip_user_id,
                max_decompressed_bytes=self.request.max_decompressed_bytes)
            restore = RestoreRun(self.connection, request, self.storage, self.seal)
            plan = restore.plan()
            # a damaged segment fails the drill, and the rest of its queue and the other queues are drilled all the same
            report.damaged_segments += [{**d.__dict__, "reasons": list(d.reasons)} for d in plan.skipped_segments]
            confine(plan, None, target)
            self._import_definitions(client, plan, request, target)
            results = [restore.publish(plan, queue) for queue in plan.queues]
            report.published += restore.report(plan, results).published
        for queue in plan.queues:
            found = compare_queue(vhost, queue.source_queue,
                                  expected_views(self.storage, queue, self.request.max_decompressed_bytes,
                                                 self.connection.username if self.request.strip_user_id else None),
                                  delivered_views(self.connection, queue, queue.records_total),
                                  ordered=queue.delivery_order_warning is None)
            damaged = sum(d.record_count for d in plan.skipped_segments if (d.vhost, d.queue) == (vhost, queue.source_queue))
            report.compared += found.expected
            report.queues.append({**found.to_json(), "passed": found.passed and not damaged, "damaged_records": damaged,
                                  "delivery_order_warning": queue.delivery_order_warning})
            _log_comparison(found, damaged)

    def _import_definitions(self, client: ManagementClient, plan: RestorePlan, request: RestoreRequest,
                            target: str) -> None:
        """The drilled vhost's definitions (what the restore engine selects and adapts) into the scratch vhost only."""
        if plan.definitions_key is None:
            return
        saved = load_definitions(self.storage, plan.definitions_key)
        selection = request.definitions_of(plan.backup_vhosts, plan.queue_vhosts)
        chosen = import_selection(saved, selection, request, client.version(), plan.definitions_key)
        confine(plan, chosen.selected, target)
        document = chosen.selected.get(target)
        if document and any(document.values()):
            management_admin.import_vhost_definitions(client, target, document)


def _log_comparison(found: QueueComparison, damaged: int) -> None:
    state = "equal" if found.passed and not damaged else "DIFFERENT"
    lost = f", {damaged} more in damaged segments" if damaged else ""
    log.info("%s/%s: %s (%d records read from the backup%s; %d delivered, %d equal)", found.vhost, found.queue, state,
             found.expected, lost, found.delivered, found.matched)
    for problem in found.problems:
        log.info("  %s", problem)
