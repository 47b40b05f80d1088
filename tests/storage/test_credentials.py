"""Storage credentials handed in to the storage layer: used by the backends, handed on to Spark as variables, the
process's environment never changed, secrets never in ``repr``."""

from __future__ import annotations

import os

import boto3
import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.credentials import (
    AzureCredentials,
    GcsCredentials,
    S3Session,
    credential_environment,
    credentials_from_environment,
    current_credentials,
    handed_on,
    storage_credentials,
)


def s3_session(token: str | None = "tok-secret") -> S3Session:
    session = boto3.session.Session(aws_access_key_id="AKID", aws_secret_access_key="very-secret",
                                    aws_session_token=token, region_name="eu-west-1")
    return S3Session(session, endpoint_url="http://127.0.0.1:9")


def test_the_secret_parts_stay_out_of_repr():
    assert "very-secret" not in repr(s3_session()) and "tok-secret" not in repr(s3_session())


def test_an_s3_session_hands_on_its_credentials_frozen_and_reads_back_from_them():
    handed = s3_session().environment()

    assert handed == {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "very-secret", "AWS_SESSION_TOKEN": "tok-secret",
                      "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-west-1"}
    again = credentials_from_environment(handed)
    assert isinstance(again, S3Session) and again.environment() == handed


def test_a_session_without_credentials_is_refused_when_handed_on(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    with pytest.raises(ConfigurationError, match="no credentials"):
        S3Session(boto3.session.Session()).environment()


def test_handed_in_credentials_last_for_the_block_and_never_touch_the_environment(monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=old;AccountKey=old")
    before = dict(os.environ)
    azure = AzureCredentials(account="acct1", account_key="k3y")

    with storage_credentials(azure):
        seen = dict(credential_environment())
        inside = (current_credentials(), handed_on())

    assert dict(os.environ) == before and current_credentials() is None
    assert (seen["AZURE_STORAGE_ACCOUNT"], seen["AZURE_STORAGE_KEY"]) == ("acct1", "k3y")
    assert "AZURE_STORAGE_CONNECTION_STRING" not in seen
    assert inside == (azure, {"AZURE_STORAGE_ACCOUNT": "acct1", "AZURE_STORAGE_KEY": "k3y"})


def test_without_handed_in_credentials_the_environments_own_are_handed_on(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")

    assert credential_environment() is os.environ
    assert handed_on({"AWS_ACCESS_KEY_ID": "env-key", "HOME": "/root", "AZURE_STORAGE_KEY": ""}) == {"AWS_ACCESS_KEY_ID": "env-key"}


def test_azure_and_gcs_secrets_stay_out_of_repr():
    azure = AzureCredentials(connection_string="AccountName=acct1;AccountKey=very-secret")
    gcs = GcsCredentials('{"type": "service_account", "private_key": "very-secret"}')

    assert "very-secret" not in repr(azure) + repr(gcs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "exactly one"), ({"account_key": "k"}, "needs its account name"),
     ({"connection_string": "nonsense"}, "malformed"), ({"connection_string": "AccountKey=k"}, "neither AccountName")],
)
def test_incomplete_or_malformed_azure_credentials_are_refused_without_echoing_them(kwargs, message):
    with pytest.raises(ConfigurationError, match=message) as raised:
        AzureCredentials(**kwargs)

    assert "nonsense" not in str(raised.value)


def test_a_key_file_is_handed_on_as_one_line_of_json():
    handed = GcsCredentials('{\n  "type": "service_account",\n  "private_key": "a\\nb"\n}').environment()

    assert handed == {"RBAK_GCS_KEYFILE_JSON": '{"type":"service_account","private_key":"a\\nb"}'}
    assert credentials_from_environment(handed) == GcsCredentials(handed["RBAK_GCS_KEYFILE_JSON"])
