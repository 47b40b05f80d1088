"""What backups, restores and freshness checks report to Airflow's ``Stats`` (StatsD or OpenTelemetry, ``[metrics]``).

Fixed names, with what varies (the location, a queue's vhost and name) in tags, so that a new queue or location never
makes a new metric and a dashboard selects by tag. :data:`METRICS` is the one table of them; docs/airflow.md#metrics
shows it. Where the tags go is Airflow's ``[metrics]`` choice: OpenTelemetry sends them as attributes; StatsD sends
them only with ``statsd_influxdb_enabled`` (``name,tag=value:1|c``, which statsd_exporter reads) or
``statsd_datadog_enabled`` (DogStatsD's ``|#tag:value``), and drops them otherwise (the names stay fixed).

Airflow drops a whole tagged StatsD metric whose name holds any character but letters, digits and ``_.-/``
(``,`` and ``=`` between tags) or runs past 250 characters, so tag values keep to those characters and to
:data:`MAX_TAG` each. The location is named without its query (an endpoint, a key id) or any user info.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

#: name: (kind, tags, meaning); Airflow prefixes each name (``[metrics] statsd_prefix``, default ``airflow``).
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "rbak.backup.complete": ("counter", ("location",), "one per complete backup (finalize)"),
    "rbak.backup.messages": ("counter", ("location",), "messages in the complete backup"),
    "rbak.backup.bytes": ("counter", ("location",), "bytes of segments in the complete backup"),
    "rbak.backup.duration": ("timer (ms)", ("location",), "from discover to finalize"),
    "rbak.backup.last_complete": ("gauge", ("location",), "completed_at of the backup just finished, epoch seconds"),
    "rbak.backup.queue.messages": ("counter", ("location", "vhost", "queue"), "messages captured from the queue"),
    "rbak.backup.queue.bytes": ("counter", ("location", "vhost", "queue"), "bytes captured from the queue"),
    "rbak.backup.queue.duration": ("timer (ms)", ("location", "vhost", "queue"), "the queue's capture"),
    "rbak.backup.queue.left_out": ("counter", ("location", "vhost", "queue"), "the queue was left out of the backup"),
    "rbak.restore.complete": ("counter", ("location",), "one per restore that was not a dry run (report)"),
    "rbak.restore.messages": ("counter", ("location",), "messages the restore published"),
    "rbak.restore.unroutable": ("counter", ("location",), "messages returned unroutable"),
    "rbak.restore.queue.messages": ("counter", ("location", "vhost", "queue"),
                                    "messages published into the target queue (vhost, queue: the target's)"),
    "rbak.freshness.age": ("gauge", ("location",),
                           "seconds since the location's newest complete backup finished (rbak_freshness)"),
    "rbak.freshness.fresh": ("gauge", ("location",), "1 when that backup is within max_age_hours, else 0"),
    "rbak.drill.passed": ("gauge", ("location",),
                          "1 when the location's restore drill passed, else 0 (rbak_drill; sent whatever the outcome)"),
    "rbak.drill.messages": ("counter", ("location",), "messages a restore drill compared with the backup"),
}
#: The longest tag value sent; longer ones keep their start and a hash of the whole, so they stay distinct.
MAX_TAG = 60
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_./-]")


def _stats() -> Any:
    try:  # Airflow 3.1+
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # pragma: no cover - older Airflow
        from airflow.stats import Stats
    return Stats


def tag_value(text: str) -> str:
    """``text`` in the characters a tagged StatsD name may hold (others become ``_``), at most :data:`MAX_TAG` long."""
    safe = _TAG_UNSAFE.sub("_", text) or "_"
    if len(safe) <= MAX_TAG:
        return safe
    return f"{safe[:MAX_TAG - 9]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def location_tag(storage_url: str) -> str:
    """A location as a tag: scheme, bucket or host, and path (``s3/bucket/backups``); never a query or user info."""
    parts = urlsplit(storage_url)
    where = (parts.netloc.rpartition("@")[2] + parts.path).strip("/")
    return tag_value(f"{parts.scheme}/{where}" if where else parts.scheme)


def _tags(storage_url: str, vhost: str | None = None, queue: str | None = None) -> dict[str, str]:
    tags = {"location": location_tag(storage_url)}
    if vhost is not None and queue is not None:
        tags.update(vhost=tag_value(vhost), queue=tag_value(queue))
    return tags


def captured(result: Mapping[str, Any], storage_url: str) -> None:
    """One queue's capture result (``CaptureResult`` as JSON); a queue a retry found done was counted already."""
    if result.get("skipped_completed"):
        return
    stats, tags = _stats(), _tags(storage_url, result["vhost"], result["queue"])
    if result.get("left_out"):
        stats.incr("rbak.backup.queue.left_out", tags=tags)
        return
    stats.incr("rbak.backup.queue.messages", result["messages"], tags=tags)
    stats.incr("rbak.backup.queue.bytes", result["bytes"], tags=tags)
    stats.timing("rbak.backup.queue.duration", result["duration_s"] * 1000, tags=tags)


def backup_completed(summary: Mapping[str, Any]) -> None:
    """The finalize summary of a complete backup (its ``storage_url`` is the location's, without credentials)."""
    stats, tags = _stats(), _tags(summary["storage_url"])
    stats.incr("rbak.backup.complete", tags=tags)
    stats.incr("rbak.backup.messages", summary["total_messages"], tags=tags)
    stats.incr("rbak.backup.bytes", summary["total_bytes"], tags=tags)
    if summary.get("duration_s") is not None:
        stats.timing("rbak.backup.duration", summary["duration_s"] * 1000, tags=tags)
    stats.gauge("rbak.backup.last_complete", summary["completed_at"] / 1000, tags=tags)


def published(result: Mapping[str, Any], storage_url: str) -> None:
    """One queue's restore result (``QueueResult`` as JSON); a dry run publishes nothing and counts nothing."""
    if result.get("dry_run"):
        return
    _stats().incr("rbak.restore.queue.messages", result["published"],
                  tags=_tags(storage_url, result["target_vhost"], result["target_queue"]))


def restore_reported(report: Mapping[str, Any], storage_url: str) -> None:
    """The report of a restore that was not a dry run."""
    if report.get("dry_run"):
        return
    stats, tags = _stats(), _tags(storage_url)
    stats.incr("rbak.restore.complete", tags=tags)
    stats.incr("rbak.restore.messages", report["published"], tags=tags)
    stats.incr("rbak.restore.unroutable", report["unroutable"], tags=tags)


def drill_reported(report: Mapping[str, Any]) -> None:
    """A restore drill's report (``DrillReport`` as JSON), passed or failed: the gauge a dashboard alerts on."""
    stats, tags = _stats(), _tags(report["storage_url"])
    stats.gauge("rbak.drill.passed", 1 if report.get("passed") else 0, tags=tags)
    stats.incr("rbak.drill.messages", report.get("compared") or 0, tags=tags)


def freshness_measured(found: Mapping[str, Any]) -> None:
    """A location's freshness (``Freshness`` as JSON): its newest complete backup's age, and whether that is fresh."""
    stats, tags = _stats(), _tags(found["storage_url"])
    if found.get("age_hours") is not None:
        stats.gauge("rbak.freshness.age", round(found["age_hours"] * 3600, 3), tags=tags)
    stats.gauge("rbak.freshness.fresh", 1 if found.get("fresh") else 0, tags=tags)
