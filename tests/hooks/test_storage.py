"""RbakStorageHook: an aws, wasb or google_cloud_platform connection (AIRFLOW_CONN_* JSON) becomes storage credentials."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.hooks.storage import RbakStorageHook
from airflow_rbak.storage.credentials import AzureCredentials, GcsCredentials, S3Session


def connection(monkeypatch, conn_type: str, **fields) -> RbakStorageHook:
    monkeypatch.setenv("AIRFLOW_CONN_RBAK_STORE", json.dumps({"conn_type": conn_type, **fields}))
    return RbakStorageHook("rbak_store")


def test_an_aws_connection_gives_the_amazon_providers_session_with_its_endpoint_and_region(monkeypatch):
    hook = connection(monkeypatch, "aws", login="AKID", password="s3cr3t",
                      extra={"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9"})

    found = hook.get_conn()

    assert isinstance(found, S3Session) and (found.endpoint_url, found.region) == ("http://127.0.0.1:9", "eu-west-1")
    assert found.environment() == {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
                                   "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-west-1"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [({"extra": {"connection_string": "AccountName=acct1;AccountKey=k"}},
      AzureCredentials(connection_string="AccountName=acct1;AccountKey=k")),
     ({"login": "acct1", "password": "k"}, AzureCredentials(account="acct1", account_key="k")),
     ({"login": "acct1", "extra": {"sas_token": "?sv=1&sig=s"}}, AzureCredentials(account="acct1", sas_token="sv=1&sig=s"))],
    ids=["connection string", "account key", "sas token"],
)
def test_a_wasb_connection_gives_its_connection_string_key_or_sas(monkeypatch, fields, expected):
    assert connection(monkeypatch, "wasb", **fields).get_conn() == expected


def test_a_wasb_connection_without_a_secret_says_what_it_needs(monkeypatch):
    with pytest.raises(ConfigurationError, match="no connection string, account key or SAS token"):
        connection(monkeypatch, "wasb", login="acct1").get_conn()


def test_a_google_connection_gives_its_key_file_from_the_extra_or_the_path(monkeypatch, tmp_path):
    key = {"type": "service_account", "private_key": "pk"}
    path = tmp_path / "key.json"
    path.write_text(json.dumps(key))

    from_dict = connection(monkeypatch, "google_cloud_platform", extra={"keyfile_dict": key}).get_conn()
    from_path = connection(monkeypatch, "google_cloud_platform", extra={"key_path": str(path)}).get_conn()
    neither = connection(monkeypatch, "google_cloud_platform", extra={}).get_conn()

    assert from_dict == from_path == GcsCredentials(json.dumps(key)) and neither is None


def test_a_connection_of_another_type_is_refused(monkeypatch):
    with pytest.raises(ConfigurationError, match="use one of: aws, wasb, google_cloud_platform"):
        connection(monkeypatch, "postgres").get_conn()
