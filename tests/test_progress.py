"""Progress lines of long captures: messages, MB, rates and ETA, sampled from the stored checkpoints."""

from __future__ import annotations

import logging

from airflow_rbak.capture.checkpoints import CaptureCheckpoints, QueueProgress
from airflow_rbak.progress import ProgressReporter, checkpoint_sampler, format_progress
from airflow_rbak.storage import open_storage


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


def test_the_sampler_reads_the_stored_checkpoint_and_tolerates_its_absence():
    storage = open_storage("memory://")
    sample = checkpoint_sampler(CaptureCheckpoints(storage, "b"), "b", "/", "orders")
    assert sample() is None

    # When the capture (another store, as in the task: the engine's own) stores a checkpoint
    CaptureCheckpoints(storage, "b").save(QueueProgress("b", "/", "orders", "classic", 10, staged_records=7, staged_bytes=700))

    assert sample() == (7, 700)


def test_the_reporter_logs_a_last_line_when_the_work_ends_however_short(caplog):
    with caplog.at_level(logging.INFO), ProgressReporter("q", lambda: (3, 3_000), 3, interval=3600) as reporter:
        pass

    assert reporter.lines == [reporter.lines[-1]] and reporter.lines[-1].startswith("q: 3/3 messages")


def test_a_restore_line_counts_messages_only_when_bytes_are_not_counted():
    assert format_progress("v/orders", 500, None, 2_000, 1.0) == "v/orders: 500/2,000 messages, 500 msg/s, ETA 3s"
