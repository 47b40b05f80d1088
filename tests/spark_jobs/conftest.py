"""Fixtures for the Spark job tests: a real ``spark-submit`` with this interpreter, and job runners."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from airflow_rbak.storage import open_storage

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs real spark-submit jobs (about 10 s of JVM start-up each)")


def spark_env() -> dict[str, str]:
    """This interpreter for spark-submit and its workers, and its bin/ first on PATH."""
    bin_dir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONWARNINGS": "ignore::FutureWarning",
    }


@dataclass
class JobRun:
    """One finished spark-submit: exit code, stdout, stderr and the report it stored."""

    returncode: int
    stdout: str
    stderr: str
    report_key: str | None
    report: dict[str, Any] | None


def submit(job: str, storage_url: str, backup_id: str, *args: str, master: str = "local[2]") -> JobRun:
    """Run ``spark-submit --master MASTER spark_jobs/<job>.py`` as a user would, and load its report."""
    command = ["spark-submit", "--master", master, str(REPO / "spark_jobs" / f"{job}.py"),
               "--storage-url", storage_url, "--backup-id", backup_id, *args]
    done = subprocess.run(command, capture_output=True, text=True, env=spark_env(), cwd=REPO, timeout=300)
    lines = done.stdout.strip().splitlines()
    key = lines[-1] if lines and "/reports/" in lines[-1] else None
    report = orjson.loads(open_storage(storage_url).get(key)) if key else None
    return JobRun(done.returncode, done.stdout, done.stderr[-4000:], key, report)


@pytest.fixture(scope="session")
def spark_submit_available() -> None:
    env = spark_env()
    if shutil.which("spark-submit", path=env["PATH"]) is None:
        pytest.skip("spark-submit is not installed (pip install pyspark)")
