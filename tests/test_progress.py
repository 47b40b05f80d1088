"""Progress lines of long captures: messages, MB, rates and ETA, sampled from the checkpoint database."""

from __future__ import annotations

import logging
import sqlite3

from airflow_rbak.progress import ProgressReporter, checkpoint_sampler, format_progress


def test_a_progress_line_has_counts_size_rates_and_eta():
    line = format_progress("v/orders", 12_000, 12_000_000, 20_000, 2.0)

    assert line == "v/orders: 12,000/20,000 messages, 12.0 MB, 6,000 msg/s, 6.0 MB/s, ETA 1s"


def test_no_eta_without_a_target_or_once_done():
    assert "ETA" not in format_progress("q", 10, 10, None, 1.0)
    assert "ETA" not in format_progress("q", 10, 10, 10, 1.0)


def test_the_reporter_logs_while_the_block_runs_and_survives_a_failing_sample(caplog):
    samples = iter([RuntimeError("db locked"), (5, 5_000_000), (10, 10_000_000)])

    def sample():
        value = next(samples, (10, 10_000_000))
        if isinstance(value, Exception):
            raise value
        return value

    with caplog.at_level(logging.INFO), ProgressReporter("q", sample, 10, interval=0.01) as reporter:
        while len(reporter.lines) < 2:
            pass

    assert reporter.lines[0].startswith("q: 5/10 messages, 5.0 MB")
    assert "q: 5/10 messages" in caplog.text


def test_the_sampler_reads_the_checkpoint_database_and_tolerates_its_absence(tmp_path):
    db = tmp_path / "b.offsets.db"
    sample = checkpoint_sampler(db, "b", "/", "orders")
    assert sample() is None
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE queue_progress (backup_id, vhost, queue, staged_records, staged_bytes)")
        conn.execute("INSERT INTO queue_progress VALUES ('b', '/', 'orders', 7, 700)")

    assert sample() == (7, 700)
