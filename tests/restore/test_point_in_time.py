"""Must show 2: three timed waves; a window covering only the middle wave restores exactly that wave.

Capture here takes a fraction of a second, so all records of a backup would
carry nearly the same ``backed_up_at``. The capture clock is therefore set
to when each wave would have been captured by a backup running alongside
the publishers (two hours apart): the backup itself, its segments (which
rotate hourly) and the restore are all real.
"""

from __future__ import annotations

import types
from datetime import datetime, timezone

import pytest

from airflow_rbak.capture import queue_run as capture_module  # where a capture stamps backed_up_at
from airflow_rbak.capture import stream_capture as stream_capture_module
from airflow_rbak.restore import RestoreRequest, RestoreRun
from tests.restore.helpers import backup, body_of, declare, publish, read_queue

pytestmark = pytest.mark.broker

WAVES = (40, 50, 30)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WAVE_GAP = 2 * 3600.0
QUEUES = {"orders": "classic", "events": "stream"}


def wave_clock() -> types.SimpleNamespace:
    """A ``time`` module stand-in: call n (one per captured message) returns message n's wave time."""
    calls = [0]
    real = __import__("time")

    def fake_time() -> float:
        n = calls[0] % sum(WAVES)
        calls[0] += 1
        wave = 0 if n < WAVES[0] else (1 if n < WAVES[0] + WAVES[1] else 2)
        return T0 + wave * WAVE_GAP + n / 1000

    return types.SimpleNamespace(time=fake_time, monotonic=real.monotonic, sleep=real.sleep, perf_counter=real.perf_counter)


def test_a_window_over_the_middle_wave_restores_exactly_that_wave(broker, vhost, target_vhost, tmp_path, monkeypatch):
    declare(broker.connection, vhost, QUEUES)
    start = 0
    for count in WAVES:
        for name, queue_type in QUEUES.items():
            publish(broker.connection, vhost, name, start, count, decimal=queue_type != "stream")
        start += count
    monkeypatch.setattr(capture_module, "time", wave_clock())
    monkeypatch.setattr(stream_capture_module, "time", wave_clock())
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "pit-1", vhost)
    monkeypatch.undo()
    wave2 = T0 + WAVE_GAP
    settings = RestoreRequest(
        location, backup_id="pit-1", vhosts=[vhost], vhost_map={vhost: target_vhost}, restore_definitions=True,
        time_window_start=datetime.fromtimestamp(wave2 - 1800, timezone.utc).isoformat(),  # ISO 8601 start
        time_window_end=int((wave2 + 1800) * 1000),  # epoch ms end
        checkpoint_state=str(tmp_path / "restore.db"),
    )

    report = RestoreRun(broker.connection, settings).run()

    assert report.planned == report.published == 2 * WAVES[1]
    # one segment per wave and queue: every one is read (records need not be in time order), four hold none in the window
    assert (report.segments_verified, report.segments_outside_window) == (6, 4)
    middle = range(WAVES[0], WAVES[0] + WAVES[1])
    for name, queue_type in QUEUES.items():
        restored = read_queue(broker.connection, target_vhost, name, queue_type, WAVES[1])
        assert [m[0] for m in restored] == [body_of(i, 300) for i in middle], name
        assert [m[1][7] for m in restored] == [f"m-{i}" for i in middle], name
