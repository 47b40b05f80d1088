"""A backup's segment work as stages (encode, then compact when asked, then verify), and where it runs.

The same stages run in a task's own process or as one Spark application per backup run
(:mod:`.jobs.backup_segments`); either way they write the same keys and bytes and end in one ``encode``
report that finalize reads. Spark's fixed cost (a JVM, a session, Python workers) is larger than the whole
work of a small queue, so by default (``auto``) a queue whose staging is at most ``in_process_max_bytes``
is encoded and verified in the capture task that staged it, as soon as its capture ends, while other
queues are still being captured; the rest go to the one application. ``process`` and ``spark`` force
either way for every queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from airflow_rbak.codec import QueueBackup, SegmentMetadata
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.layout import encode_name, reports_prefix, vhost_dir
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.segments import compact as cp
from airflow_rbak.segments import encode as er
from airflow_rbak.segments import overlap
from airflow_rbak.segments import verify as vf
from airflow_rbak.segments.reports import JobReport, ReportError, load_report
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage

JOB = "encode"
VERIFY_MODES = ("none", "quick", "deep")
PLACEMENTS = ("auto", "process", "spark")
#: Staged bytes of one queue up to which ``auto`` keeps its work in the task's process (docs/performance.md
#: has the measurement: below it, Spark's start-up costs more than the work it would spread).
DEFAULT_IN_PROCESS_MAX_BYTES = 256 * 1024**2


@dataclass(frozen=True)
class SegmentWork:
    """What the stages do: how segments are cut and compressed, and how they are checked once written."""

    encode: er.EncodeSpec = er.EncodeSpec()
    verify: str = "deep"
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    #: Merge each queue's runs of segments smaller than this (file bytes) after encoding; None: no compaction.
    compact_below_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ConfigurationError(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        self.compaction()  # validates the threshold

    def compaction(self) -> cp.CompactSpec | None:
        if self.compact_below_bytes is None:
            return None
        e = self.encode
        return cp.CompactSpec(self.compact_below_bytes, e.segment_max_bytes, e.segment_max_interval_ms, e.compression,
                                  e.level)

    def to_json(self) -> dict[str, Any]:
        return {**self.encode.to_json(), "verify": self.verify, "max_decompressed_bytes": self.max_decompressed_bytes,
                "compact_below_bytes": self.compact_below_bytes}


@dataclass(frozen=True)
class Placement:
    """Where a queue's segment work runs: ``auto`` (in process up to ``in_process_max_bytes``), ``process``, ``spark``."""

    mode: str = "auto"
    in_process_max_bytes: int = DEFAULT_IN_PROCESS_MAX_BYTES

    def __post_init__(self) -> None:
        if self.mode not in PLACEMENTS:
            raise ConfigurationError(f"segment work runs in one of {PLACEMENTS}, got {self.mode!r}")
        if not isinstance(self.in_process_max_bytes, int) or self.in_process_max_bytes < 0:
            raise ConfigurationError(f"in_process_max_bytes must be a non-negative integer, got {self.in_process_max_bytes!r}")

    def in_process(self, staged_bytes: int) -> bool:
        return self.mode == "process" or (self.mode == "auto" and staged_bytes <= self.in_process_max_bytes)


def verify_queues(storage_url: str, queues: Iterable[QueueBackup], work: SegmentWork) -> list[dict[str, Any]]:
    """This process's check of every segment the queues list: per segment, present at its size (quick) or read
    back from the storage and checked as ``rbak validate --deep`` checks it (deep)."""
    items = [vf.VerifyItem(q.vhost, q.name, s.to_json()) for q in queues for s in q.segments]
    if work.verify == "deep":
        return vf.check_group(storage_url, items, work.max_decompressed_bytes)
    if work.verify == "quick":
        return vf.stat_group(storage_url, items)
    return []


def verify_summary(mode: str, results: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """What a verify stage found: counts, and the first hundred defects by key."""
    failed = [r for r in results if not r["ok"]]
    return {
        "mode": mode,
        "ok": not failed,
        "segments_checked": len(results),
        "segments_failed": len(failed),
        "defects": [{"key": r["key"], "reason": d} for r in failed for d in r["defects"]][:100],
        "records_checked": sum(r.get("records_checked", 0) for r in results),
        "bytes_checked": sum(r.get("bytes_checked", 0) for r in results),
        "seconds": round(seconds, 3),
    }


def encode_here(storage_url: str, backup_id: str, refs: Iterable[er.QueueRef], work: SegmentWork) -> JobReport:
    """Every stage for ``refs`` in this process: the report the Spark application would write for them."""
    storage = open_storage(storage_url)
    report = JobReport(JOB, backup_id, storage.url, settings={**work.to_json(), "ran": "process"})
    started = time.perf_counter()
    entries, results, stale = [], [], []
    # Without compaction the segments encoded are the ones kept, so each is checked while the next is encoded.
    behind = work.verify == "deep" and work.compact_below_bytes is None
    with overlap.CheckBehind(storage, work.max_decompressed_bytes) as checker:
        for ref in sorted(refs, key=lambda r: (r.vhost, r.name)):
            entry, ranges, removed = er.encode_queue_here(storage, backup_id, ref, work.encode,
                                                          checker.stored if behind else None)
            entries.append(entry)
            results += ranges
            stale += removed
        stale += compact(storage_url, backup_id, entries, work, lambda items, task: [task(i) for i in items])
        encoded = time.perf_counter()
        checks = checker.results() if behind else verify_queues(storage_url, entries, work)
    # Checked behind the encode, the checks' own time is what they cost; after it, the wall time is.
    verify_s = sum(c["seconds"] for c in checks) if behind else time.perf_counter() - encoded
    return finish_report(report, entries, results, stale, work.verify, checks, encoded - started, verify_s)


def compact(storage_url: str, backup_id: str, entries: list[QueueBackup], work: SegmentWork,
            run_each: Callable[[list[Any], Callable[[Any], Any]], list[Any]]) -> list[str]:
    """Merge each queue's runs of small segments (``compact_below_bytes``) in place of the entries' segments; the
    keys it removed. ``run_each`` maps a task over items (here or on Spark's executors).

    Nothing lists these segments yet (finalize writes the manifest from the report), so a crash needs no swap:
    a re-run encodes the staging again and removes every segment object it did not write, interim copies too.
    """
    settings = work.compaction()
    plans = {(q.vhost, q.name): plan for q in entries if settings and (plan := cp.plan_queue(q, settings))}
    if not settings or not plans:
        return []
    old = {s.key for q in entries for s in q.segments}
    outputs = [o for plan in plans.values() for o in plan]
    built = dict(run_each(outputs, lambda o: ((o.vhost, o.queue, o.sequence),
                                              cp.build_output(storage_url, backup_id, o, settings))))
    for q in entries:
        if (q.vhost, q.name) in plans:
            q.segments = [SegmentMetadata.from_json(built[(q.vhost, q.name, o.sequence)]) for o in plans[(q.vhost, q.name)]]
    storage = open_storage(storage_url)
    removed = sorted(old - {s.key for q in entries for s in q.segments})
    pending = [(q.vhost, q.name, s.to_json()) for q in entries for s in q.segments
               if not cp.is_canonical(backup_id, q.vhost, q.name, s)]
    for key in removed:
        storage.delete(key)
    moved = dict(run_each(pending, lambda p: (p[2]["key"], cp.canonicalize(storage_url, backup_id, p[0], p[1], p[2]))))
    for q in entries:
        q.segments = [SegmentMetadata.from_json(moved[s.key]) if s.key in moved else s for s in q.segments]
        q.refresh_totals()
    for key in sorted(moved):
        storage.delete(key)
    return removed


def finish_report(
    report: JobReport,
    entries: list[QueueBackup],
    results: list[er.RangeResult],
    stale: list[str],
    verify: str,
    checks: list[dict[str, Any]],
    encode_s: float,
    verify_s: float,
) -> JobReport:
    """Fill the report of the stages: the queues' entries (what finalize lists), the encode counts and the checks."""
    report.details = {"queues": [q.to_json() for q in entries], "removed_stale": stale, "verify": checks}
    checked = verify_summary(verify, checks, verify_s)
    report.ok = checked["ok"]
    report.summary = {
        "queues": len(entries),
        "segments": sum(len(q.segments) for q in entries),
        "segments_written": sum(r.written for r in results),
        "segments_unchanged": sum(r.unchanged for r in results),
        "stale_removed": len(stale),
        "messages": sum(q.message_count for q in entries),
        "bytes": sum(s.size_bytes for q in entries for s in q.segments),
        "seconds": round(encode_s, 3),
        "verify": checked,
    }
    return report


def queue_report_key(backup_id: str, vhost: str, queue: str) -> str:
    """Where a capture task keeps the report of the one queue it encoded (a retry overwrites it)."""
    return f"{reports_prefix(backup_id)}queues/{vhost_dir(vhost)}/{encode_name(queue)}.json"


def merge_reports(storage: Storage, backup_id: str, work: SegmentWork, parts: list[dict[str, Any]]) -> JobReport:
    """One ``encode`` report from the stages' reports of parts of a backup (capture tasks', the application's)."""
    report = JobReport(JOB, backup_id, storage.url, settings=work.to_json())
    report.started_at = min((p["started_at"] for p in parts), default=report.started_at)
    queues = sorted((q for p in parts for q in p["details"]["queues"]), key=lambda q: (q["vhost"], q["name"]))
    checks = [c for p in parts for c in p["details"].get("verify", [])]
    report.details = {
        "queues": queues,
        "removed_stale": [k for p in parts for k in p["details"].get("removed_stale", [])],
        "verify": checks,
        "parts": [p.get("key") for p in parts],
    }
    summaries = [p["summary"] for p in parts]
    counted = ("queues", "segments", "segments_written", "segments_unchanged", "stale_removed", "messages", "bytes")
    report.summary = {name: sum(s.get(name, 0) for s in summaries) for name in counted}
    report.summary["seconds"] = round(sum(s.get("seconds", 0) for s in summaries), 3)
    verify_s = sum(s.get("verify", {}).get("seconds", 0) for s in summaries)
    report.summary["verify"] = verify_summary(work.verify, checks, verify_s)
    report.summary["ran"] = sorted({p["settings"].get("ran", "spark") for p in parts})
    report.ok = report.summary["verify"]["ok"]
    return report


def load_part(storage: Storage, backup_id: str, vhost: str, queue: str, work: SegmentWork) -> dict[str, Any] | None:
    """The report a capture task left of its queue, when it is this backup's, holds exactly that queue, was made
    with these settings and found nothing wrong; else None, and the queue is encoded again (the same bytes). It
    is read from the location, so nothing in it is taken on trust beyond what it may speak for."""
    key = queue_report_key(backup_id, vhost, queue)
    try:
        part = load_report(storage, key, JOB)
    except ReportError:
        return None
    queues = part.get("details", {}).get("queues") if isinstance(part.get("details"), dict) else None
    settings = part.get("settings")
    made_with = {k: v for k, v in settings.items() if k != "ran"} if isinstance(settings, dict) else None
    ours = (part.get("backup_id") == backup_id and isinstance(queues, list) and len(queues) == 1
            and isinstance(queues[0], dict) and (queues[0].get("vhost"), queues[0].get("name")) == (vhost, queue))
    return {**part, "key": key} if ours and made_with == work.to_json() and part.get("ok") is True else None


def work_from(params: dict[str, Any]) -> tuple[SegmentWork, Placement]:
    """The stages' work (:class:`SegmentWork`) and placement from the backup DAG's params (names as there)."""
    encode = er.EncodeSpec(
        str(params.get("compression", "zstd")),
        int(params.get("compression_level", 3)),
        **{k: int(params[k]) for k in ("segment_max_bytes", "segment_max_interval_ms") if params.get(k)},
    )
    compact = params.get("compact_below_bytes")
    work = SegmentWork(encode, str(params.get("verify", "deep")), compact_below_bytes=int(compact) if compact else None)
    placement = Placement(
        str(params.get("segment_work", "auto")), int(params.get("in_process_max_bytes", DEFAULT_IN_PROCESS_MAX_BYTES))
    )
    return work, placement


def staged_bytes(storage_url: str, backup_id: str, ref: er.QueueRef) -> int:
    """The bytes of a queue's staging that its checkpoint accounts for: what decides where its work runs."""
    return sum(c.size for c in er.queue_staging(open_storage(storage_url), backup_id, ref.vhost, ref.name))


def encode_captured(storage_url: str, backup_id: str, ref: er.QueueRef, work: SegmentWork,
                    placement: Placement) -> dict[str, Any] | None:
    """Right after a queue's capture: its stages here when the placement keeps it in process, its report stored
    where the segment step finds it; None when the queue is left to that step."""
    if not placement.in_process(staged_bytes(storage_url, backup_id, ref)):
        return None
    report = encode_here(storage_url, backup_id, [ref], work)
    key = report.save(open_storage(storage_url), queue_report_key(backup_id, ref.vhost, ref.name))
    return {"report_key": key, **{k: report.summary[k] for k in ("segments", "bytes", "seconds")},
            "verify": {k: report.summary["verify"][k] for k in ("mode", "ok", "segments_failed", "seconds")}}
