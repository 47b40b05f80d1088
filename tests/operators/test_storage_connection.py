"""An operator's storage through an ``aws`` connection that holds only a role: the task assumes it on top of the
worker's own identity, its S3 work and its Spark job's are the role's, and its process environment is untouched."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("airflow.providers.amazon")

from airflow_rbak.operators.spark import RbakVerifyBackupOperator  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from airflow_rbak.storage.credentials import current_credentials  # noqa: E402
from tests.aws_role import iam_enforced, role_identity, worker_environment  # noqa: E402
from tests.repository.sample import build_sample_backup  # noqa: E402


@pytest.mark.s3
@pytest.mark.spark
def test_a_role_only_connection_verifies_on_s3_through_spark_and_leaves_the_environment_alone(
        s3_server, s3_storage_url, tmp_path, monkeypatch):
    # Given a backup on S3, a worker whose own keys may only assume a role, and a connection holding only that role
    manifest = build_sample_backup(open_storage(s3_storage_url))
    identity = role_identity(s3_server)
    for name, value in worker_environment(dict(os.environ), identity).items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AIRFLOW_CONN_SPARK_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_RBAK_ROLE", identity.connection(s3_server))
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::FutureWarning")
    operator = RbakVerifyBackupOperator(task_id="verify", storage_url=s3_storage_url, backup_id="sample-1",
                                        storage_conn_id="rbak_role", default_master="local[2]")
    before = dict(os.environ)

    # When the task runs as Airflow runs it (pre_execute, execute, post_execute) while moto checks every request
    with iam_enforced(s3_server):
        operator.pre_execute({})
        during = dict(os.environ)
        handed = current_credentials()
        summary = operator.execute({})
        operator.post_execute({}, summary)

    # Then the Spark job read every segment as the role, and the environment was the same throughout
    assert summary["ok"] and summary["segments_checked"] == manifest.total_segments
    assert handed is not None and handed.environment()["AWS_ACCESS_KEY_ID"] != identity.worker_env["AWS_ACCESS_KEY_ID"]
    assert dict(os.environ) == during == before
    assert current_credentials() is None
