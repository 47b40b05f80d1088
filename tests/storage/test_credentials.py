"""S3 credentials handed over through the environment: complete pairs only, secrets never in ``repr``."""

from __future__ import annotations

import os

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.credentials import S3Credentials, export_credentials


def test_the_secret_parts_stay_out_of_repr():
    creds = S3Credentials("AKID", "very-secret", session_token="tok-secret", endpoint_url="http://127.0.0.1:9", region="r")

    assert "very-secret" not in repr(creds) and "tok-secret" not in repr(creds) and "AKID" in repr(creds)


def test_a_key_without_its_secret_is_refused():
    with pytest.raises(ConfigurationError, match="both"):
        S3Credentials("AKID", "")


def test_exported_credentials_replace_the_environments_and_drop_a_stale_session_token(monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "stale")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "old")

    export_credentials(S3Credentials("AKID", "s3cr3t", endpoint_url="http://127.0.0.1:9"))

    assert (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]) == ("AKID", "s3cr3t")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert "AWS_SESSION_TOKEN" not in os.environ and "AWS_DEFAULT_REGION" not in os.environ


def test_no_credentials_leave_the_environment_alone(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")

    export_credentials(None)

    assert os.environ["AWS_ACCESS_KEY_ID"] == "env-key"
