"""A Spark standalone cluster whose executors run a Python with none of the project's dependencies, and no storage
credentials, encodes a backup on loopback S3: the hook ships the codec, its dependencies and its C accelerator as an
environment archive, and the task's S3 credentials in a private properties file (never on a command line); the
job's report says which codec build ran there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import orjson
import pytest

from airflow_rbak.segments.shipping import job_script
from airflow_rbak.storage import open_storage
from tests.reliability.secrets import CommandLines
from tests.spark_cluster import BARE_PYTHON, spark_cluster, spark_logs  # noqa: F401 - spark_cluster is a fixture
from tests.spark_jobs.staging import read_queue_independently, stage_queue


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
    from airflow_rbak.hooks.spark import submit_hook
    from airflow_rbak.segments.shipping import build_executor_env

    # When the encode job is submitted to the cluster through the hook
    options = {"application_args": ["--storage-url", url, "--backup-id", "b1", "--report-key", "b1/reports/e.json"]}
    with CommandLines() as lines, submit_hook("spark_cluster", options,
                                              executor_env=lambda: build_executor_env(tmp_path / "cache")) as hook:
        hook.submit(job_script("backup_segments"))

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
