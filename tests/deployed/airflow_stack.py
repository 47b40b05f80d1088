"""Airflow as deployed, on one machine: scheduler (LocalExecutor), dag-processor and api-server as separate
processes on SQLite, driven only through the ``airflow`` CLI, as a user drives it (FIELD-NOTES' recipe)."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.dags.airflow_env import VENV_BIN, airflow_env, run
from tests.spark_cluster import free_port

DEADLINE_S = 600.0


class AirflowStack:
    """The three Airflow processes of one AIRFLOW_HOME; ``stop`` ends exactly them."""

    def __init__(self, home: Path, **extra_env: str) -> None:
        port = free_port()
        self.env = airflow_env(
            home, AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__PARALLELISM="8",
            AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}", AIRFLOW__API__HOST="127.0.0.1", AIRFLOW__API__PORT=str(port),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
            AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(16), **extra_env)
        self.home, self.port = home, port
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        done = self.cli("db", "migrate")
        assert done.returncode == 0, done.stderr[-3000:]
        for name, args in (("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(self.port)]),
                           ("scheduler", ["scheduler"]), ("dag-processor", ["dag-processor"])):
            log = (self.home / f"{name}.out").open("wb")
            self.processes.append(subprocess.Popen([str(VENV_BIN / "airflow"), *args], env=self.env, stdout=log,
                                                   stderr=subprocess.STDOUT, cwd=self.home))

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([str(VENV_BIN / "airflow"), *args], self.env)

    def wait_for_dag(self, dag_id: str) -> None:
        """Until the dag-processor has parsed ``dag_id``; then unpause it."""
        deadline = time.monotonic() + DEADLINE_S
        while dag_id not in self.cli("dags", "list", "-o", "json").stdout:
            assert time.monotonic() < deadline, f"{dag_id} never parsed"
            time.sleep(2)
        assert self.cli("dags", "unpause", dag_id).returncode == 0

    def trigger_and_wait(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Trigger a run as a user does (CLI) and wait for its final state; return it."""
        run_id = f"manual__{dag_id}__{secrets.token_hex(4)}"
        done = self.cli("dags", "trigger", dag_id, "-r", run_id, "-c", json.dumps(conf))
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + DEADLINE_S
        while True:
            lines = [line for line in self.cli("dags", "list-runs", dag_id, "-o", "json").stdout.splitlines()
                     if line.startswith("[")]
            state = next((r["state"] for r in (json.loads(lines[-1]) if lines else []) if r["run_id"] == run_id), None)
            if state in ("success", "failed"):
                return state
            assert time.monotonic() < deadline, f"{dag_id} run {run_id} still {state}"
            time.sleep(3)

    def task_times(self, dag_id: str) -> dict[str, tuple[float, float]]:
        """Each task instance's (start, end) in epoch seconds, by ``task[map_index]``, for the latest run."""
        done = run([str(VENV_BIN / "python"), "-c", _TIMES, dag_id], self.env, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return {k: tuple(v) for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


_TIMES = r"""
import json, sys
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    run = s.query(DagRun).filter(DagRun.dag_id == sys.argv[1]).order_by(DagRun.id.desc()).first()
    tis = s.query(TaskInstance).filter(TaskInstance.dag_id == sys.argv[1], TaskInstance.run_id == run.run_id)
    print(json.dumps({f"{t.task_id}[{t.map_index}]": [t.start_date.timestamp(), t.end_date.timestamp()]
                      for t in tis if t.start_date and t.end_date}))
"""
