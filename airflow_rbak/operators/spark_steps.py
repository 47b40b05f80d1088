"""The backup DAG's Spark steps with every setting templated (so DAG params reach them).

Encode as :class:`RbakEncodeSegmentsOperator` with compression, level and
the Spark connection templated; verify honours the DAG's ``verify`` param:
none, quick (in process: every listed segment present with its size) or
deep (the Spark verify job over every segment the encode report lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_rbak.operators.spark import RbakEncodeSegmentsOperator, RbakVerifyBackupOperator
from airflow_rbak.segments.reports import load_report
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectNotFoundError, Storage

VERIFY_MODES = ("none", "quick", "deep")


def quick_check(storage: Storage, encode_report_key: str) -> dict[str, Any]:
    """Every segment the encode report lists exists with its recorded size; all defects collected."""
    report = load_report(storage, encode_report_key, "encode")
    segments = [s for q in report["details"]["queues"] for s in q.get("segments", [])]
    defects = []
    for segment in segments:
        try:
            size = storage.stat(segment["key"]).size
        except ObjectNotFoundError:
            defects.append({"key": segment["key"], "reason": "missing"})
            continue
        if size != segment["size_bytes"]:
            defects.append({"key": segment["key"], "reason": f"size {size}, manifest says {segment['size_bytes']}"})
    return {"mode": "quick", "segments_checked": len(segments), "segments_failed": len(defects), "defects": defects[:100],
            "ok": not defects}


class RbakEncodeStepOperator(RbakEncodeSegmentsOperator):
    """:class:`RbakEncodeSegmentsOperator` whose codec settings and Spark connection are templated."""

    template_fields: Sequence[str] = (*RbakEncodeSegmentsOperator.template_fields, "compression", "level",
                                      "segment_max_interval_ms")


class RbakVerifyStepOperator(RbakVerifyBackupOperator):
    """:class:`RbakVerifyBackupOperator` that honours the DAG's ``verify`` param (Spark connection templated)."""

    template_fields: Sequence[str] = (*RbakVerifyBackupOperator.template_fields, "verify")

    def __init__(self, *, verify: str = "deep", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verify = verify

    def execute(self, context: Any) -> dict[str, Any]:
        if self.verify not in VERIFY_MODES:
            raise AirflowFailException(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.verify == "none":
            return {"mode": "none", "ok": True}
        if self.verify == "quick":
            summary = quick_check(open_storage(str(self.storage_url)), str(self.encode_report))
            if not summary["ok"]:
                raise AirflowException(f"rbak verify (quick) found defects: {summary['defects'][:5]}; re-run encode")
            return summary
        return {"mode": "deep", **super().execute(context)}
