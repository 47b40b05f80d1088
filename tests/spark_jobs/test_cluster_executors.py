"""A Spark standalone cluster whose executors run a Python with none of the project's dependencies, and no storage
credentials, encodes a backup on loopback S3: the hook ships the codec, its dependencies and its C accelerator as an
environment archive, and the task's S3 credentials in a private properties file (never on a command line); the
job's report says which codec build ran there."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import pyspark
from airflow_rbak.spark_package import job_script
from airflow_rbak.storage import open_storage
from tests.reliability.secrets import CommandLines
from tests.spark_jobs.staging import read_queue_independently, stage_queue

CLUSTER_FOLDERS: dict[str, Path] = {}
BARE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))  # the interpreter the venv was made from


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_env(**extra: str) -> dict[str, str]:
    """No virtualenv on PATH, no PYSPARK_PYTHON: what a cluster node that has only Java, Python and Spark sees."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "JAVA_HOME", "TMPDIR")}
    return {**keep, "PATH": "/usr/local/bin:/usr/bin:/bin", "SPARK_HOME": os.path.dirname(pyspark.__file__),
            "SPARK_LOCAL_IP": "127.0.0.1", "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true", **extra}


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[str]:
    """A standalone master and one worker from the venv's spark-class, on free loopback ports."""
    if shutil.which("java") is None:
        pytest.skip("a Spark cluster needs java")
    folder = tmp_path_factory.mktemp("spark-cluster")
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    port, ui = free_port(), free_port()
    env = bare_env(SPARK_LOG_DIR=str(folder), SPARK_WORKER_DIR=str(folder / "work"))
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(port), "--webui-port", str(ui)], env=env, stdout=(folder / "master.log").open("wb"),
                              stderr=subprocess.STDOUT)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--cores", "2", "--memory", "2g", "--host", "127.0.0.1", "--webui-port", str(free_port()),
                               "--work-dir", str(folder / "work")], env=env,
                              stdout=(folder / "worker.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
                    if json.loads(reply.read()).get("aliveworkers", 0) >= 1:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (folder / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        CLUSTER_FOLDERS[f"spark://127.0.0.1:{port}"] = folder
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in (worker, master):
            process.terminate()
            process.wait(timeout=60)


def spark_logs(master: str) -> list[Path]:
    """Every file the cluster wrote: its daemons' logs and each executor's stdout and stderr."""
    return [p for p in CLUSTER_FOLDERS[master].rglob("*") if p.is_file() and p.suffix not in (".gz", ".zip", ".so")
            and "rbakenv" not in p.parts]


@pytest.mark.spark
def test_bare_executors_encode_on_s3_with_the_shipped_codec_and_credentials_and_say_so(
    spark_cluster, tmp_path, monkeypatch, s3_storage_url
):
    # Given executors whose Python lacks the project's dependencies and whose environment has no S3 credentials,
    # a task whose environment has them (as a storage connection exports them), and a queue staged on S3
    assert subprocess.run([str(BARE_PYTHON), "-c", "import zstandard"], capture_output=True).returncode != 0
    secret = f"rbak-s3-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    url = s3_storage_url
    staged = stage_queue(open_storage(url), "b1", "/", "orders", 3000, chunk_records=700)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", "host": spark_cluster}))
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    from airflow_rbak.hooks.spark import RbakSparkSubmitHook
    from airflow_rbak.spark_env import build_executor_env

    # When the encode job is submitted to the cluster through the hook
    hook = RbakSparkSubmitHook(conn_id="spark_cluster", executor_env=lambda: build_executor_env(tmp_path / "cache"),
                               application_args=["--storage-url", url, "--backup-id", "b1", "--report-key", "b1/reports/e.json"])
    with CommandLines() as lines:
        hook.submit(job_script("encode_segments"))

    # Then the queue is encoded in capture order, and the report names the build the executors ran: the shipped one,
    # with the C accelerator
    report = orjson.loads(open_storage(url).get("b1/reports/e.json"))
    (build,) = report["summary"]["executor_codec"]
    assert build["speedups"] is True and "/rbakenv/" in build["executable"], build
    _, records = read_queue_independently(open_storage(url), "b1", "/", "orders")
    assert records == [json.loads(raw) for raw in staged]
    # and the secret was on no process's command line, nor in the report or the cluster's logs
    assert any(b"spark-submit" in line for line in lines.seen) or any(b"SparkSubmit" in line for line in lines.seen)
    assert [line for line in lines.seen if secret.encode() in line] == []
    assert secret not in json.dumps(report)
    assert [p for p in spark_logs(spark_cluster) if secret in p.read_text(errors="replace")] == []
