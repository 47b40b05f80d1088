"""The Spark operators: their job's arguments, the spark-submit options they pass on, package shipping, the
report's summary as XCom (a real spark-submit), and a failed submit's message."""

from __future__ import annotations

import pytest

pytest.importorskip("airflow.providers.apache.spark")

from airflow.sdk.exceptions import AirflowException  # noqa: E402

from airflow_rbak.exceptions import ConfigurationError  # noqa: E402
from airflow_rbak.operators.segments import RbakBackupSegmentsOperator  # noqa: E402
from airflow_rbak.operators.spark import (  # noqa: E402
    RbakCompactSegmentsOperator,
    RbakVerifyBackupOperator,
)
from airflow_rbak.segments import stages  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests import fake_spark_submit  # noqa: E402
from tests.repository.sample import build_sample_backup  # noqa: E402


def test_operators_pass_their_options_and_template_the_location():
    encode = RbakBackupSegmentsOperator(task_id="e", storage_url="file:///b", backup_id="{{ ds }}",
                                        queues=[{"vhost": "/", "name": "q", "queue_type": "quorum"}],
                                        segment_work={"segment_max_bytes": 10, "verify": "quick", "compact_below_bytes": 7})
    compact = RbakCompactSegmentsOperator(task_id="c", storage_url="file:///b", backup_id="b", threshold_bytes=5)
    verify = RbakVerifyBackupOperator(task_id="v", storage_url="file:///b", backup_id="b", sample_percent=5)
    assert {"storage_url", "backup_id", "queues", "captures", "segment_work", "conn_id", "spark_options"} <= set(
        encode.template_fields)
    encode._work, _ = stages.work_from(encode.segment_work)
    encode._spark_refs = [stages.er.QueueRef("/", "q", "quorum")]
    args = encode.job_arguments()
    assert args[args.index("--queues-json") + 1] == '[{"vhost":"/","name":"q","queue_type":"quorum"}]'
    assert args[args.index("--segment-max-bytes") + 1] == "10" and args[args.index("--verify") + 1] == "quick"
    assert args[args.index("--compact-below-bytes") + 1] == "7"
    assert compact.job_arguments()[:2] == ["--threshold-bytes", "5"] and "--lock-owner" not in compact.job_arguments()
    assert verify.job_arguments() == ["--sample-percent", "5"]
    assert encode.conn_id == "spark_default" and encode.spark_options == {"name": "rbak-encode"}


def test_the_dags_steps_take_the_spark_connection_as_conn_id():
    encode = RbakBackupSegmentsOperator(task_id="e", storage_url="file:///b", backup_id="b", conn_id="{{ params.spark_conn_id }}")
    verify = RbakVerifyBackupOperator(task_id="v", storage_url="file:///b", backup_id="b", conn_id="{{ params.spark_conn_id }}")

    assert encode.conn_id == verify.conn_id == "{{ params.spark_conn_id }}"
    assert "conn_id" in encode.template_fields and "conn_id" in verify.template_fields


@pytest.mark.parametrize("options", [{"executor_memory": "1g", "conn_id": "x"}, {"master": "local[2]"}])
def test_spark_options_are_the_hooks_arguments_but_the_connection(options):
    with pytest.raises(ConfigurationError, match="not SparkSubmitHook arguments"):
        RbakVerifyBackupOperator(task_id="v", storage_url="file:///b", backup_id="b", spark_options=options)


def test_a_failed_submit_passes_every_option_on_and_says_there_is_no_report(tmp_path, monkeypatch):
    # Given a spark-submit that fails, and an operator with spark-submit options and job arguments of its own
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    fake = fake_spark_submit.install(tmp_path, monkeypatch, exit_code=3)
    operator = RbakVerifyBackupOperator(
        task_id="verify", storage_url=(tmp_path / "store").as_uri(), backup_id="b1", sample_percent=5,
        package_cache_dir=str(tmp_path / "zips"), default_master="local[2]",
        spark_options={**fake.options, "executor_memory": "1g", "py_files": "mine.zip", "application_args": ["--extra"]})

    # When it runs
    with pytest.raises(AirflowException, match="RBAK report: none") as failed:
        operator.execute({})

    # Then spark-submit got the options as given, and the job's arguments in order;
    # the error names the report key it looked for
    args = fake.seen()["args"]
    assert fake.option("--master") == ["local[2]"] and fake.option("--executor-memory") == ["1g"]
    assert fake.option("--name") == ["rbak-verify"]
    assert fake.option("--py-files") == ["mine.zip"]  # a local master runs the installed package: nothing added
    job = args.index(next(a for a in args if a.endswith("airflow_rbak/segments/jobs/verify_segments.py")))
    assert args[job + 1:] == ["--storage-url", operator.storage_url, "--backup-id", "b1", "--report-key", operator.report_key,
                              "--sample-percent", "5", "--extra"]
    assert operator.report_key and operator.report_key in str(failed.value)


def test_on_kill_goes_to_the_running_hook():
    operator = RbakVerifyBackupOperator(task_id="v", storage_url="file:///b", backup_id="b")
    operator.on_kill()  # nothing submitted yet: nothing to stop

    class Hook:
        killed = False

        def on_kill(self):
            self.killed = True

    operator.spark_hook = hook = Hook()  # type: ignore[assignment]
    operator.on_kill()

    assert hook.killed


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
    assert not (tmp_path / "zips").exists()  # a local master ships nothing: its workers run this interpreter
    (build,) = summary["executor_codec"]
    assert build["speedups"] is True  # the installed package, C accelerator included
