"""What the view has learnt about a backup beyond its manifest: damage any reader found, and why a restore ended.

The listing reads manifests only, so a backup with a flipped byte in a segment lists as ``complete``. Three
readers find such damage: a restore's ``plan`` that refuses the backup's segments, the message browser reading a
segment that does not verify, and a verify run that failed. Each is evidence; this module turns that evidence into
one list of reasons (:func:`damage_of`), and the pages then withdraw Restore… (Verify stays: it is how to check
again) and name the damage. A verify that succeeds after a finding clears it. No Airflow import: the Airflow side
(``airflow_runs.py``) reads the task states and logs, this module only judges them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_rbak.display import printable

#: The longest reason shown for a run's failure (a task's exception text can be long).
REASON_CHARS = 400
#: The exception types (anywhere in a failure's chain) and words that say a reader refused the backup as damaged.
_DAMAGE_TYPES = ("DamagedSegmentsError", "SegmentUnreadableError", "CodecError")
_DAMAGE_WORDS = ("failed verification", "damaged segment")
#: The task of rbak_restore that asks a person; its failure is a rejection (or an approval that did not count).
APPROVE_TASK = "approve"


@dataclass(frozen=True)
class Finding:
    """One reader's report that a backup is damaged: when (ms since the epoch), who found it, and what it found."""

    at: int
    by: str
    reason: str


class DamageLedger:
    """The damage the message browser found, per (location URL, backup id), kept for the api-server's life.

    The browser is the one reader that leaves no trace in Airflow; what it finds is kept here so that the backup's
    page says so too. A verify that ends successfully after a finding supersedes it (:func:`damage_of`).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._found: dict[tuple[str, str], dict[str, Finding]] = {}
        self._lock = threading.Lock()

    def record(self, storage_url: str, backup_id: str, segment: str, reason: str) -> None:
        """Keep the newest finding per segment (a page read twice is one finding)."""
        finding = Finding(int(self._clock() * 1000), "the message browser", f"segment {segment}: {reason}")
        with self._lock:
            self._found.setdefault((storage_url, backup_id), {})[segment] = finding

    def found(self, storage_url: str, backup_id: str) -> list[Finding]:
        with self._lock:
            return list(self._found.get((storage_url, backup_id), {}).values())


def _chain(detail: Any) -> list[Mapping[str, Any]]:
    return [e for e in detail if isinstance(e, Mapping)] if isinstance(detail, list) else []


def failure_reason(events: Iterable[Mapping[str, Any]]) -> tuple[str | None, bool]:
    """A failed task's reason from its structured log: the last exception's message, and whether it names damage.

    Airflow's task log holds one JSON event per line; the exception that failed the task is an event with
    ``error_detail`` (its chain: ``exc_type``, ``exc_value``, the causes after it). Without one, the last error
    event's text is the reason.
    """
    reason, damaged, last_error = None, False, None
    for event in events:
        chain = _chain(event.get("error_detail"))
        if chain:
            reason = str(chain[0].get("exc_value") or chain[0].get("exc_type") or "")
            types = " ".join(str(e.get("exc_type", "")) for e in chain)
            damaged = any(t in types for t in _DAMAGE_TYPES) or any(w in reason for w in _DAMAGE_WORDS)
        elif str(event.get("level", "")).lower() == "error" and event.get("event"):
            last_error = str(event["event"])
    reason = reason or last_error
    if reason and len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS] + "…"
    return (printable(reason) if reason else None), damaged


def restore_outcome(state: str, failed_task: str | None, reason: str | None) -> str | None:
    """How a restore run ended, in one line, when it ended without a report: rejected, or failed in a named task.

    A rejection (or an approval that did not count) fails the ``approve`` task and reads as "not approved"; a
    failure anywhere else names the task, so a plan that refused the backup does not look like a rejection.
    """
    if state != "failed":
        return None
    said = f": {reason}" if reason else " (the reason is in the task's log)"
    if failed_task == APPROVE_TASK:
        return f"not approved{said}"
    if failed_task:
        return f"failed in {failed_task}{said}"
    return f"failed{said}"


def damage_of(runs: Iterable[Mapping[str, Any]], found: Iterable[Finding]) -> list[str]:
    """Every reason to call the backup damaged, newest first; those older than a successful verify are dropped.

    ``runs`` are the backup's DAG runs (``BackupDagRun.to_json()``): a verify task that failed, a restore whose task
    failed with ``damaged`` set. ``found`` is what the message browser found.
    """
    runs = list(runs)
    verified_ok = max((r.get("verify_at") or 0 for r in runs if r.get("verify_state") == "success"), default=0)
    said: list[tuple[int, str]] = []
    for r in runs:
        if r.get("kind") in ("verify", "backup") and r.get("verify_state") == "failed":
            at = r.get("verify_at") or 0
            said.append((at, f"the verify of run {r['run_id']} failed" + (f": {r['reason']}" if r.get("reason") else "")))
        elif r.get("kind") == "restore" and r.get("damaged"):
            at = r.get("ended_at") or r.get("started_at") or 0
            said.append((at, f"restore run {r['run_id']} refused it in {r.get('failed_task') or 'plan'}"
                             + (f": {r['reason']}" if r.get("reason") else "")))
    said += [(f.at, f"{f.by} found {f.reason}") for f in found]
    return [text for at, text in sorted(said, key=lambda x: -x[0]) if at > verified_ok or not at and not verified_ok]
