"""The names and values the operators hand to Airflow's Stats (the real StatsD path is tests/dags' DAG runs)."""

from __future__ import annotations

import pytest

from airflow_rbak.operators import metrics


class RecordingStats:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def incr(self, name: str, count: float = 1, tags: object = None) -> None:
        self.calls.append(("incr", name, count))

    def timing(self, name: str, value: float, tags: object = None) -> None:
        self.calls.append(("timing", name, value))

    def gauge(self, name: str, value: float, tags: object = None) -> None:
        self.calls.append(("gauge", name, value))


@pytest.fixture
def stats(monkeypatch) -> RecordingStats:
    recorder = RecordingStats()
    monkeypatch.setattr(metrics, "_stats", lambda: recorder)
    return recorder


def test_a_queue_name_becomes_characters_statsd_names_may_hold():
    assert metrics.queue_key("/", "eu/returns.v2") == "_.eu_returns_v2"


def test_a_capture_counts_its_messages_bytes_and_time_per_queue(stats):
    metrics.captured({"vhost": "prod", "queue": "orders", "messages": 5, "bytes": 900, "duration_s": 0.25, "left_out": None})

    assert stats.calls == [("incr", "rbak.backup.queue.messages.prod.orders", 5),
                           ("incr", "rbak.backup.queue.bytes.prod.orders", 900),
                           ("timing", "rbak.backup.queue.duration.prod.orders", 250.0)]


def test_a_queue_a_retry_found_done_and_a_dry_run_count_nothing(stats):
    metrics.captured({"vhost": "prod", "queue": "orders", "messages": 5, "bytes": 900, "duration_s": 0.0,
                      "left_out": None, "skipped_completed": True})
    metrics.published({"target_vhost": "v", "target_queue": "q", "published": 3, "dry_run": True})
    metrics.restore_reported({"dry_run": True, "published": 3, "unroutable": 0})

    assert stats.calls == []
