"""The names, values and tags the operators hand to Airflow's Stats (the real StatsD path is tests/dags' DAG runs)."""

from __future__ import annotations

import re

import pytest

from airflow_rbak.operators import metrics

LOCATION = "s3://rbak-backups/nightly?region=eu-west-1&endpoint=https://minio.internal:9000&path_style=true"


class RecordingStats:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float, dict[str, str]]] = []

    def incr(self, name: str, count: float = 1, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("incr", name, count, tags or {}))

    def timing(self, name: str, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("timing", name, value, tags or {}))

    def gauge(self, name: str, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("gauge", name, value, tags or {}))


@pytest.fixture
def stats(monkeypatch) -> RecordingStats:
    recorder = RecordingStats()
    monkeypatch.setattr(metrics, "_stats", lambda: recorder)
    return recorder


def test_a_location_is_tagged_by_scheme_bucket_and_path_without_its_query():
    assert metrics.location_tag(LOCATION) == "s3/rbak-backups/nightly"
    assert metrics.location_tag("file:///var/backups/rabbit") == "file/var/backups/rabbit"
    assert metrics.location_tag("s3://AKIA:secret@bucket/p") == "s3/bucket/p"
    assert metrics.location_tag("memory://") == "memory"


def test_tag_values_keep_to_what_airflow_lets_through_and_stay_distinct_when_cut():
    long_a, long_b = "q" * 100 + "a", "q" * 100 + "b"
    assert metrics.tag_value("/") == "/" and metrics.tag_value("eu returns,v=2") == "eu_returns_v_2"
    assert len(metrics.tag_value(long_a)) == metrics.MAX_TAG and metrics.tag_value(long_a) != metrics.tag_value(long_b)
    assert re.fullmatch(r"[A-Za-z0-9_./-]+", metrics.tag_value(long_a))
    # every name with its three longest tags fits Airflow's 250 characters for a tagged StatsD name
    longest = max(metrics.METRICS, key=len)
    assert len(f"airflow.{longest}" + "".join(f",{t}={'x' * metrics.MAX_TAG}" for t in ("location", "vhost", "queue"))) <= 250


def test_a_capture_counts_its_messages_bytes_and_time_under_fixed_names_tagged_with_location_and_queue(stats):
    metrics.captured({"vhost": "/", "queue": "eu/returns", "messages": 5, "bytes": 900, "duration_s": 0.25,
                      "left_out": None}, LOCATION)

    tags = {"location": "s3/rbak-backups/nightly", "vhost": "/", "queue": "eu/returns"}
    assert stats.calls == [("incr", "rbak.backup.queue.messages", 5, tags), ("incr", "rbak.backup.queue.bytes", 900, tags),
                           ("timing", "rbak.backup.queue.duration", 250.0, tags)]


def test_a_complete_backup_sends_its_totals_and_completion_for_its_location(stats):
    metrics.backup_completed({"storage_url": LOCATION, "total_messages": 7, "total_bytes": 70, "duration_s": 2,
                              "completed_at": 1_700_000_000_000})

    assert {(kind, name, value) for kind, name, value, _ in stats.calls} == {
        ("incr", "rbak.backup.complete", 1), ("incr", "rbak.backup.messages", 7), ("incr", "rbak.backup.bytes", 70),
        ("timing", "rbak.backup.duration", 2000), ("gauge", "rbak.backup.last_complete", 1_700_000_000)}
    assert all(tags == {"location": "s3/rbak-backups/nightly"} for *_, tags in stats.calls)


def test_freshness_sends_the_age_in_seconds_and_whether_it_is_fresh_and_only_that_without_a_backup(stats):
    metrics.freshness_measured({"storage_url": LOCATION, "age_hours": 30.5, "fresh": False})
    metrics.freshness_measured({"storage_url": "file:///empty", "age_hours": None, "fresh": False})

    assert stats.calls == [("gauge", "rbak.freshness.age", 109_800.0, {"location": "s3/rbak-backups/nightly"}),
                           ("gauge", "rbak.freshness.fresh", 0, {"location": "s3/rbak-backups/nightly"}),
                           ("gauge", "rbak.freshness.fresh", 0, {"location": "file/empty"})]


def test_a_queue_a_retry_found_done_and_a_dry_run_count_nothing(stats):
    metrics.captured({"vhost": "prod", "queue": "orders", "messages": 5, "bytes": 900, "duration_s": 0.0,
                      "left_out": None, "skipped_completed": True}, LOCATION)
    metrics.published({"target_vhost": "v", "target_queue": "q", "published": 3, "dry_run": True}, LOCATION)
    metrics.restore_reported({"dry_run": True, "published": 3, "unroutable": 0}, LOCATION)

    assert stats.calls == []


def test_the_docs_table_is_the_metrics_table():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "airflow.md").read_text()
    rows = re.findall(r"^\| `(rbak\.[a-z_.]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", docs, re.MULTILINE)
    assert {name: (kind.strip(), tuple(t.strip(" `") for t in tags.split(",")), meaning.strip())
            for name, kind, tags, meaning in rows} == metrics.METRICS
