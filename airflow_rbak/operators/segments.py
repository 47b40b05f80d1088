"""The backup's segment step: every queue's segments encoded and verified, in process or as one Spark application.

Queues a capture task already encoded (``auto`` keeps small queues in the capture task, right after their
capture) are taken from their reports; the rest run here when the placement keeps them in process, and
otherwise in one Spark application (:mod:`airflow_rbak.segments.jobs.backup_segments`) with every remaining
queue. One ``encode`` report joins them all; finalize lists what it holds. Settings come from the DAG's
params, the same the capture tasks read, so both sides agree on what a queue's report must have been made with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from airflow.sdk.exceptions import AirflowException

from airflow_rbak.display import package_logger, printable
from airflow_rbak.operators.spark import RbakSparkJobOperator
from airflow_rbak.operators.steps import flat_results, run_step
from airflow_rbak.segments import stages
from airflow_rbak.segments.encode import QueueRef, parse_queue_refs
from airflow_rbak.segments.reports import load_report
from airflow_rbak.storage import open_storage

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter


class RbakBackupSegmentsOperator(RbakSparkJobOperator):
    """Encode and verify the backup's queues; returns the joined report's summary (with ``report_key``)."""

    job_module = "backup_segments"
    report_job = stages.JOB
    template_fields: Sequence[str] = (*RbakSparkJobOperator.template_fields, "queues", "captures", "segment_work")

    def __init__(self, *, queues: list[dict[str, Any]] | None = None, captures: Any = None,
                 segment_work: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queues, self.captures, self.segment_work = queues, captures, segment_work

    def job_arguments(self) -> list[str]:
        work: stages.SegmentWork = self._work
        encode = work.encode
        return ["--compression", encode.compression, "--level", str(encode.level),
                "--segment-max-bytes", str(encode.segment_max_bytes),
                "--segment-max-interval-ms", str(encode.segment_max_interval_ms), "--range-bytes", str(encode.range_bytes),
                "--verify", work.verify, "--max-decompressed-bytes", str(work.max_decompressed_bytes),
                "--queues-json", _refs_json(self._spark_refs),
                *(["--compact-below-bytes", str(work.compact_below_bytes)] if work.compact_below_bytes else [])]

    def execute(self, context: Any) -> dict[str, Any]:
        url, backup_id = str(self.storage_url), str(self.backup_id)
        self._work, placement = run_step("segment settings", lambda: stages.work_from(self.segment_work or {}))
        refs = run_step("segment settings", lambda: parse_queue_refs(self.queues or []))
        storage = open_storage(url)
        parts = {}
        for capture in flat_results(self.captures):
            done = capture.get("segments") or {}
            part = stages.load_part(storage, backup_id, capture["vhost"], capture["queue"], self._work) \
                if done.get("report_key") else None
            if part is not None:
                parts[(capture["vhost"], capture["queue"])] = part
        remaining = [r for r in refs if (r.vhost, r.name) not in parts]
        here = [r for r in remaining if placement.mode == "process"
                or (placement.mode == "auto" and placement.in_process(stages.staged_bytes(url, backup_id, r)))]
        self._spark_refs = [r for r in remaining if r not in here]
        log.info("backup %s: %d queues encoded by their capture tasks, %d here, %d on Spark", backup_id, len(parts),
                 len(here), len(self._spark_refs))
        found = list(parts.values())
        if here:
            report = run_step("encode", lambda: stages.encode_here(url, backup_id, here, self._work))
            found.append({**report.to_json(), "key": report.save(storage)})
        if self._spark_refs:
            key = super().execute(context)["report_key"]
            found.append({**load_report(storage, key, stages.JOB), "key": key})
        merged = stages.merge_reports(storage, backup_id, self._work, found)
        key = merged.save(storage)
        checked = merged.summary["verify"]
        if not checked["ok"]:
            raise AirflowException(printable(f"rbak verify ({checked['mode']}) found {checked['segments_failed']} damaged "
                                             f"segments: {checked['defects'][:5]}; re-run the task to encode them again"))
        log.info("backup %s: %d segments, %.1f MB, verify %s: %d checked", backup_id, merged.summary["segments"],
                 merged.summary["bytes"] / 1e6, checked["mode"], checked["segments_checked"])
        return {**merged.summary, "report_key": key}


def _refs_json(refs: list[QueueRef]) -> str:
    return orjson.dumps([{"vhost": r.vhost, "name": r.name, "queue_type": r.queue_type} for r in refs]).decode()
