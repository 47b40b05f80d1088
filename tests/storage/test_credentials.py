"""S3 credentials handed over through the environment: complete pairs only, secrets never in ``repr``."""

from __future__ import annotations

import os

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.credentials import AzureCredentials, GcsCredentials, S3Credentials, export_credentials


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


def test_azure_and_gcs_secrets_stay_out_of_repr():
    azure = AzureCredentials(connection_string="AccountName=acct1;AccountKey=very-secret")
    gcs = GcsCredentials('{"type": "service_account", "private_key": "very-secret"}')

    assert "very-secret" not in repr(azure) + repr(gcs)


def test_exporting_azure_credentials_replaces_only_the_azure_variables(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=old;AccountKey=old")

    export_credentials(AzureCredentials(account="acct1", account_key="k3y"))

    assert (os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_KEY"]) == ("acct1", "k3y")
    assert "AZURE_STORAGE_CONNECTION_STRING" not in os.environ and os.environ["AWS_ACCESS_KEY_ID"] == "env-key"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "exactly one"), ({"account_key": "k"}, "needs its account name"),
     ({"connection_string": "nonsense"}, "malformed"), ({"connection_string": "AccountKey=k"}, "neither AccountName")],
)
def test_incomplete_or_malformed_azure_credentials_are_refused_without_echoing_them(kwargs, message):
    with pytest.raises(ConfigurationError, match=message) as raised:
        AzureCredentials(**kwargs)

    assert "nonsense" not in str(raised.value)


def test_a_key_file_reaches_the_environment_as_one_line_of_json(monkeypatch):
    export_credentials(GcsCredentials('{\n  "type": "service_account",\n  "private_key": "a\\nb"\n}'))

    assert os.environ["RBAK_GCS_KEYFILE_JSON"] == '{"type":"service_account","private_key":"a\\nb"}'
