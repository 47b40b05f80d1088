"""A Spark standalone master and worker from the venv's ``spark-class``, as a cluster node without the project.

The daemons run with no virtualenv on ``PATH``, no ``PYSPARK_PYTHON`` and no storage credentials: what a cluster
node that has only Java, Python and Spark sees. Ports are free loopback ports chosen at start.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

CLUSTER_FOLDERS: dict[str, Path] = {}
BARE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))  # the interpreter the venv was made from


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports: all held at once while chosen, so no two are the same port (Spark's
    daemons move a taken web UI port to the next one, and the master's UI would then answer on another's)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def bare_env(**extra: str) -> dict[str, str]:
    """No virtualenv on PATH, no PYSPARK_PYTHON: what a cluster node that has only Java, Python and Spark sees."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "JAVA_HOME", "TMPDIR")}
    return {**keep, "PATH": "/usr/local/bin:/usr/bin:/bin", "SPARK_HOME": os.path.dirname(pyspark.__file__),
            "SPARK_LOCAL_IP": "127.0.0.1", "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true", **extra}


@contextlib.contextmanager
def standalone_cluster(folder: Path) -> Iterator[str]:
    """A standalone master and one worker from the venv's spark-class, on free loopback ports; yields the master URL."""
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    port, ui, worker_ui = free_ports(3)
    env = bare_env(SPARK_LOG_DIR=str(folder), SPARK_WORKER_DIR=str(folder / "work"))
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(port), "--webui-port", str(ui)], env=env, stdout=(folder / "master.log").open("wb"),
                              stderr=subprocess.STDOUT)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--cores", "2", "--memory", "2g", "--host", "127.0.0.1", "--webui-port", str(worker_ui),
                               "--work-dir", str(folder / "work")], env=env,
                              stdout=(folder / "worker.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
                    if json.loads(reply.read()).get("aliveworkers", 0) >= 1:
                        break
            except (OSError, ValueError):  # not up yet, or another daemon's page while the ports settle
                pass
            assert time.monotonic() < deadline, (folder / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        CLUSTER_FOLDERS[f"spark://127.0.0.1:{port}"] = folder
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in (worker, master):
            process.terminate()
            process.wait(timeout=60)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory) -> Iterator[str]:
    """The session's standalone cluster (:func:`standalone_cluster`)."""
    if shutil.which("java") is None:
        pytest.skip("a Spark cluster needs java")
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as master:
        yield master


def spark_logs(master: str) -> list[Path]:
    """Every file the cluster wrote: its daemons' logs and each executor's stdout and stderr."""
    return [p for p in CLUSTER_FOLDERS[master].rglob("*") if p.is_file() and p.suffix not in (".gz", ".zip", ".so")
            and "rbakenv" not in p.parts]


