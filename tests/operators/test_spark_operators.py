"""The Spark operators and their hook: local default master, package shipping, summary as XCom."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("airflow.providers.apache.spark")

from airflow_rbak.hooks.spark import RbakSparkSubmitHook, local_python_env  # noqa: E402
from airflow_rbak.operators.spark import (  # noqa: E402
    RbakCompactSegmentsOperator,
    RbakEncodeSegmentsOperator,
    RbakVerifyBackupOperator,
)
from airflow_rbak.segments.shipping import build_package_zip  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.backup.sample import build_sample_backup  # noqa: E402


def test_without_a_connection_the_master_is_local_and_python_is_this_one(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    hook = RbakSparkSubmitHook(conn_id="spark_default", application_args=["--x"])
    command = hook._build_spark_submit_command("job.py")
    assert command[:3] == ["spark-submit", "--master", "local[*]"] and command[-2:] == ["job.py", "--x"]
    assert hook._env_vars["PYSPARK_PYTHON"] in (sys.executable, os.environ.get("PYSPARK_PYTHON"))


def test_a_configured_connection_wins(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://cluster", "port": 7077}')
    hook = RbakSparkSubmitHook(conn_id="spark_default")
    assert hook._connection["master"] == "spark://cluster:7077"
    assert not (hook._env_vars or {})


def test_local_python_env_puts_the_interpreter_first():
    env = local_python_env("/opt/venv/bin/python", {"PATH": "/usr/bin"})
    assert env == {"PYSPARK_PYTHON": "/opt/venv/bin/python", "PYSPARK_DRIVER_PYTHON": "/opt/venv/bin/python",
                   "PATH": "/opt/venv/bin:/usr/bin"}


def test_operators_pass_their_options_and_template_the_location():
    encode = RbakEncodeSegmentsOperator(task_id="e", storage_url="file:///b", backup_id="{{ ds }}", segment_max_bytes=10,
                                        queues=[{"vhost": "/", "name": "q", "queue_type": "quorum"}], write_manifest=True)
    compact = RbakCompactSegmentsOperator(task_id="c", storage_url="file:///b", backup_id="b", threshold_bytes=5)
    verify = RbakVerifyBackupOperator(task_id="v", storage_url="file:///b", backup_id="b", sample_percent=5)
    assert {"storage_url", "backup_id", "queues"} <= set(encode.template_fields)
    assert encode.job_arguments()[-3:] == ["--queues-json", '[{"vhost":"/","name":"q","queue_type":"quorum"}]', "--write-manifest"]
    assert "--segment-max-bytes" in encode.job_arguments() and "--write-manifest" in encode.job_arguments()
    assert compact.job_arguments()[:2] == ["--threshold-bytes", "5"]
    assert verify.job_arguments() == ["--sample-percent", "5"]
    assert encode.application.endswith("airflow_rbak/segments/jobs/backup_segments.py")


def test_package_zip_is_cached_and_importable_on_its_own(tmp_path):
    path = build_package_zip(tmp_path)
    assert build_package_zip(tmp_path) == path
    names = zipfile.ZipFile(path).namelist()
    assert "airflow_rbak/codec/segment.py" in names and "airflow_rbak/segments/jobs/verify_segments.py" in names
    assert not any("__pycache__" in n for n in names)
    probe = "import airflow_rbak.segments.jobs.verify_segments, airflow_rbak; print(airflow_rbak.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith(path)


@pytest.mark.spark
def test_verify_operator_runs_spark_submit_and_returns_the_summary(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::FutureWarning")
    url = (tmp_path / "store").as_uri()
    manifest = build_sample_backup(open_storage(url))
    operator = RbakVerifyBackupOperator(task_id="verify", storage_url=url, backup_id="sample-1",
                                        package_cache_dir=str(tmp_path / "zips"), default_master="local[2]")

    summary = operator.execute({})

    assert summary["ok"] and summary["segments_checked"] == manifest.total_segments
    assert summary["report_key"].startswith("sample-1/reports/verify-")
    assert operator.py_files.endswith(".zip") and os.path.isfile(operator.py_files)
