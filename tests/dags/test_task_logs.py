"""Must show 3: a capture task's own log shows its progress (messages, MB, rate), and no pika chatter."""

from __future__ import annotations

import re

import pytest

from tests.dags.airflow_env import airflow_env, dags_test
from tests.restore.helpers import declare, publish

COUNT = 12_000  # 5,000 records per staged chunk: three checkpoints, each a progress sample


@pytest.mark.broker
@pytest.mark.spark
def test_the_capture_task_log_shows_progress_lines_and_no_pika_info(broker, vhost, airflow_home, tmp_path):
    # Given a queue deep enough for several checkpoints, and progress lines asked for often
    declare(broker.connection, vhost, {"deep": "classic"})
    publish(broker.connection, vhost, "deep", 0, COUNT, size=64)
    env = airflow_env(airflow_home, RBAK_PROGRESS_INTERVAL="0.2")
    conf = {"storage_url": (tmp_path / "b").as_uri(), "backup_id": "logs-1", "vhosts": [vhost], "verify": "quick",
            "include_definitions": False}

    # When the backup DAG runs
    done = dags_test(env, conf)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]

    # Then the capture task's log holds its progress lines, logged through the task's own logger: at least the last
    # one, which the reporter logs when the capture ends, with the whole count. (``airflow dags test`` in Airflow 3.3
    # writes no files under AIRFLOW_HOME/logs, measured: it prints each task's log records, so they are read there.)
    lines = [line for line in done.stdout.splitlines() if f"{vhost}/deep: " in line]
    assert lines and all("airflow.task.operators.airflow_rbak.operators.backup.RbakCaptureQueueOperator" in line
                         for line in lines), done.stdout[-4000:]
    assert all(re.search(r": [\d,]+/12,000 messages, [\d.]+ MB, [\d,]+ msg/s, [\d.]+ MB/s", line) for line in lines)
    assert "12,000/12,000 messages" in lines[-1]
    assert "pika" not in (done.stdout + done.stderr).lower(), "pika's own INFO lines are kept out of task logs"
