"""What backups and restores report to Airflow's ``Stats`` (StatsD or OpenTelemetry, as ``[metrics]`` configures).

One table of names here, so dashboards and docs/airflow.md#metrics follow it.
Per queue the names carry ``<vhost>.<queue>`` with every character StatsD
names may not hold replaced by ``_`` (vhost ``/`` becomes ``_``); the same
pair also goes as tags for backends that take them. Airflow prefixes every
name (``[metrics] statsd_prefix``, default ``airflow``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: name: what it counts (the kind: counter, timer in ms, or gauge)
METRICS = {
    "rbak.backup.complete": "complete backups (counter)",
    "rbak.backup.messages": "messages in each complete backup (counter)",
    "rbak.backup.bytes": "bytes of segments in each complete backup (counter)",
    "rbak.backup.duration": "from discover to finalize (timer)",
    "rbak.backup.last_complete": "completed_at of the newest complete backup, epoch seconds (gauge)",
    "rbak.backup.queue.messages.<vhost>.<queue>": "messages captured (counter)",
    "rbak.backup.queue.bytes.<vhost>.<queue>": "bytes captured (counter)",
    "rbak.backup.queue.duration.<vhost>.<queue>": "the queue's capture (timer)",
    "rbak.backup.queue.left_out": "queues left out of a backup (counter)",
    "rbak.restore.complete": "restores reported (counter)",
    "rbak.restore.messages": "messages published by each restore (counter)",
    "rbak.restore.unroutable": "messages returned unroutable (counter)",
    "rbak.restore.queue.messages.<vhost>.<queue>": "messages published into the target queue (counter)",
}


def _stats() -> Any:
    try:  # Airflow 3.1+
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # pragma: no cover - older Airflow
        from airflow.stats import Stats
    return Stats


def queue_key(vhost: str, queue: str) -> str:
    """``<vhost>.<queue>`` in the characters a StatsD name may hold."""
    return ".".join(re.sub(r"[^A-Za-z0-9_-]", "_", part) or "_" for part in (vhost, queue))


def captured(result: Mapping[str, Any]) -> None:
    """One queue's capture result (``CaptureResult`` as JSON); a queue a retry found done was counted already."""
    if result.get("skipped_completed"):
        return
    stats, key = _stats(), queue_key(result["vhost"], result["queue"])
    tags = {"vhost": result["vhost"], "queue": result["queue"]}
    if result.get("left_out"):
        stats.incr("rbak.backup.queue.left_out", tags=tags)
        return
    stats.incr(f"rbak.backup.queue.messages.{key}", result["messages"], tags=tags)
    stats.incr(f"rbak.backup.queue.bytes.{key}", result["bytes"], tags=tags)
    stats.timing(f"rbak.backup.queue.duration.{key}", result["duration_s"] * 1000, tags=tags)


def backup_completed(summary: Mapping[str, Any]) -> None:
    """The finalize summary of a complete backup."""
    stats = _stats()
    stats.incr("rbak.backup.complete")
    stats.incr("rbak.backup.messages", summary["total_messages"])
    stats.incr("rbak.backup.bytes", summary["total_bytes"])
    if summary.get("duration_s") is not None:
        stats.timing("rbak.backup.duration", summary["duration_s"] * 1000)
    stats.gauge("rbak.backup.last_complete", summary["completed_at"] / 1000)


def published(result: Mapping[str, Any]) -> None:
    """One queue's restore result (``QueueResult`` as JSON); a dry run publishes nothing and counts nothing."""
    if result.get("dry_run"):
        return
    tags = {"vhost": result["target_vhost"], "queue": result["target_queue"]}
    _stats().incr(f"rbak.restore.queue.messages.{queue_key(result['target_vhost'], result['target_queue'])}",
                  result["published"], tags=tags)


def restore_reported(report: Mapping[str, Any]) -> None:
    """The report of a restore that was not a dry run."""
    if report.get("dry_run"):
        return
    stats = _stats()
    stats.incr("rbak.restore.complete")
    stats.incr("rbak.restore.messages", report["published"])
    stats.incr("rbak.restore.unroutable", report["unroutable"])
