"""Storage URL parsing: the accepted forms, and actionable errors for everything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import (
    AzureStorageConfig,
    FileStorage,
    FileStorageConfig,
    GcsStorageConfig,
    MemoryStorage,
    MemoryStorageConfig,
    RetryingStorage,
    S3StorageConfig,
    open_storage,
    parse_storage_url,
)
from airflow_rbak.storage.unkeyed import UnkeyedStorage


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///var/lib/rabbitmq-backup/data", FileStorageConfig("/var/lib/rabbitmq-backup/data")),
        ("file://localhost/srv/rbak", FileStorageConfig("/srv/rbak")),
        ("file:///srv/my%20backups/", FileStorageConfig("/srv/my backups")),
        ("/srv/rbak/../plain", FileStorageConfig("/srv/plain")),
        ("s3://my-bucket", S3StorageConfig("my-bucket")),
        ("s3://my-bucket?region=us-east-1", S3StorageConfig("my-bucket", region="us-east-1")),
        ("s3://my-bucket/", S3StorageConfig("my-bucket")),
        ("s3://my-bucket/team/rbak/", S3StorageConfig("my-bucket", prefix="team/rbak")),
        (
            "s3://b.example/p?region=eu-west-3&endpoint=http://127.0.0.1:9000&path_style=true",
            S3StorageConfig("b.example", "p", "eu-west-3", "http://127.0.0.1:9000", True),
        ),
        ("s3://bkt?path_style=FALSE", S3StorageConfig("bkt", path_style=False)),
        ("S3://bkt", S3StorageConfig("bkt")),
        ("memory://", MemoryStorageConfig("")),
        ("azure://backups/rabbit/prod?account=acct1", AzureStorageConfig("backups", "rabbit/prod", "acct1")),
        ("azure://backups?endpoint=http://127.0.0.1:10000/devstoreaccount1",
         AzureStorageConfig("backups", endpoint="http://127.0.0.1:10000/devstoreaccount1")),
        ("gcs://my_bucket.example/prefix/", GcsStorageConfig("my_bucket.example", "prefix")),
        ("gcs://bucket?endpoint=http://127.0.0.1:4443", GcsStorageConfig("bucket", endpoint="http://127.0.0.1:4443")),
        ("memory://shared-1", MemoryStorageConfig("shared-1")),
    ],
)
def test_given_a_supported_url_when_parsed_then_the_config_holds_its_parts(url: str, expected: object) -> None:
    assert parse_storage_url(url) == expected


def test_given_a_relative_path_when_parsed_then_it_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert parse_storage_url("backups/here") == FileStorageConfig(str(tmp_path / "backups" / "here"))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("ftp://host/x", "unknown storage URL scheme 'ftp'"),
        ("azure://myaccount.blob.core.windows.net/", "Azure URL has no container"),
        ("azure://backups?account=My_Account", "invalid Azure storage account"),
        ("azure://backups?acount=x", "unknown Azure URL parameter(s) acount"),
        ("azure://backups/a/../b", "invalid Azure blob prefix"),
        ("azure:///prefix", "Azure URL has no container"),
        ("azure://backups?endpoint=127.0.0.1:10000", "expected http(s)://host[:port]"),
        ("gcs://My_Bucket", "invalid GCS bucket name"),
        ("gcs://bucket?region=x", "unknown GCS URL parameter(s) region"),
        ("gcs://bucket/a//b", "invalid GCS object prefix"),
        ("gcs://bucket?endpoint=http://h:1&endpoint=http://h:2", "'endpoint' is repeated"),
        ("file://relative/path", "needs three slashes"),
        ("file://", "no path"),
        ("file:///x?mode=1", "takes no parameters"),
        ("file:///x#frag", "fragment"),
        ("memory://name/extra", "takes only a name"),
        ("memory://bad name", "invalid memory store name"),
        ("memory://?x=1", "takes no parameters"),
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("s3://My_Bucket", "invalid S3 bucket name"),
        ("s3://ab", "invalid S3 bucket name"),
        ("s3://bucket:9000", "invalid S3 bucket name"),
        ("s3://bucket/a//b", "invalid S3 key prefix"),
        ("s3://bucket/a/../b", "invalid S3 key prefix"),
        ("s3://bucket?regoin=us-east-1", "unknown S3 URL parameter(s) regoin"),
        ("s3://bucket?region=us-east-1&region=eu-west-1", "'region' is repeated"),
        ("s3://bucket?region=US_EAST", "invalid S3 region"),
        ("s3://bucket?path_style=maybe", "path_style must be true or false"),
        ("s3://bucket?endpoint=localhost:9000", "expected http(s)://host[:port]"),
        ("s3://bucket?endpoint=http://host:notaport", "invalid port"),
    ],
)
def test_given_a_bad_url_when_parsed_then_configuration_error_says_what_to_fix(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_storage_url(url)

    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIAEXAMPLE:hunter2@bucket/prefix",
        "s3://bucket?endpoint=http://minio:hunter2@127.0.0.1:9000",
        "s3://bucket?endpoint=http%3A%2F%2Fminio%3Ahunter2%40127.0.0.1%3A9000&oops=1",
        "ftp://user:hunter2@host/x",
        "s3://AKIAEXAMPLE:hun/ter2@bucket/prefix",
        "s3://AKIAEXAMPLE:hun?ter2@bucket/prefix",
        "s3://AKIAEXAMPLE:hun#ter2@bucket/prefix",
        "s3://AKIAEXAMPLE:hun@ter2@bucket/prefix",
        "s3://AKIAEXAMPLE@bucket/hunter2",
        "file://user:hun/ter2@localhost/srv/backups",
        "memory://user:hunter2@name",
        "s3://bucket?endpoint=http%3A%2F%2Fminio%3Ahun%2Fter2%40127.0.0.1%3A9000",
    ],
)
def test_given_credentials_in_a_url_when_parsed_then_refused_without_echoing_the_secret(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_storage_url(url)

    message = str(raised.value)
    assert not any(part in message for part in ("hunter2", "hun", "ter2", "AKIAEXAMPLE", "bucket/prefix"))
    assert "must not hold credentials" in message and "aws" in message and "AWS credential chain" in message


@pytest.mark.parametrize("url", ["s3://bucket/with%40at", "file:///srv/user%40host/backups", "/srv/user@host/backups"])
def test_given_an_at_sign_written_as_percent_40_or_in_a_plain_path_when_parsed_then_accepted(url: str) -> None:
    assert "@" in (parse_storage_url(url).prefix if url.startswith("s3") else parse_storage_url(url).path)


def test_given_a_parsed_s3_url_when_logged_then_url_round_trips_and_has_only_public_parts() -> None:
    url = "s3://bkt/a/b?region=us-east-1&endpoint=http://127.0.0.1:9000&path_style=true"

    config = parse_storage_url(url)

    assert config.url == url
    assert parse_storage_url(config.url) == config


def test_given_a_file_path_with_a_space_when_logged_then_url_round_trips() -> None:
    config = parse_storage_url("/srv/my backups")

    assert config.url == "file:///srv/my%20backups"
    assert parse_storage_url(config.url) == config


def test_given_each_scheme_when_opened_then_the_backend_matches_and_retries_wrap_it(tmp_path: Path) -> None:
    file_storage = open_storage(f"file://{tmp_path}", retries=2)
    memory_storage = open_storage("memory://", retries=0)

    assert isinstance(file_storage, UnkeyedStorage)  # no key: an encrypted location would say it needs one
    assert isinstance(file_storage.inner, RetryingStorage)
    assert isinstance(file_storage.inner.inner, FileStorage)
    assert file_storage.inner.retries == 2
    assert file_storage.url == f"file://{tmp_path}"
    assert isinstance(memory_storage, UnkeyedStorage)
    assert isinstance(memory_storage.inner, RetryingStorage)
    assert isinstance(memory_storage.inner.inner, MemoryStorage)


def test_given_an_s3_url_when_opened_then_no_network_io_happens_yet() -> None:
    """Opening must not contact the endpoint: a closed port still opens fine."""
    storage = open_storage("s3://bucket/p?region=us-east-1&endpoint=http://127.0.0.1:1")

    assert storage.url == "s3://bucket/p?region=us-east-1&endpoint=http://127.0.0.1:1"


def test_given_a_config_built_in_code_when_invalid_then_configuration_error_at_construction() -> None:
    with pytest.raises(ConfigurationError):
        FileStorageConfig("relative")
    with pytest.raises(ConfigurationError):
        S3StorageConfig("bucket", endpoint="ftp://x")
    assert os.path.isabs(FileStorageConfig("/a/./b/").path)


@pytest.mark.parametrize(
    "url",
    ["azure://backups?sv=2024-01-01&sig=hunter2", "azure://backups?endpoint=http://127.0.0.1:1/acct?sig%3Dhunter2",
     "gcs://bucket?X-Goog-Signature=hunter2", "azure://acct:hunter2@backups/x"],
)
def test_given_a_signature_in_an_azure_or_gcs_url_when_parsed_then_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_storage_url(url)

    assert "hunter2" not in str(raised.value) and "must not" in str(raised.value)


@pytest.mark.parametrize("url", ["azure://backups/rabbit%20prod?account=acct1&endpoint=http://127.0.0.1:10000/acct1",
                                 "gcs://bucket/a/b?endpoint=http://127.0.0.1:4443"])
def test_given_an_azure_or_gcs_config_when_its_url_is_parsed_again_then_it_is_the_same(url: str) -> None:
    config = parse_storage_url(url)

    assert parse_storage_url(config.url) == config


@pytest.mark.parametrize(("url", "container", "prefix", "account"), [
    ("azure://myaccount.blob.core.windows.net/backups", "backups", "", "myaccount"),
    ("azure://myaccount.blob.core.windows.net/backups/prod/daily", "backups", "prod/daily", "myaccount"),
    ("azure://backups/prod?account=myaccount", "backups", "prod", "myaccount"),
    ("azure://backups/prod", "backups", "prod", None),
])
def test_an_azure_location_in_the_specifications_form_or_ours_names_the_same_container(url, container, prefix, account):
    config = parse_storage_url(url)
    assert (config.container, config.prefix, config.account) == (container, prefix, account)
    assert parse_storage_url(config.url) == config


def test_an_azure_url_naming_two_accounts_is_refused():
    with pytest.raises(ConfigurationError, match="names account 'one' in its host and 'two'"):
        parse_storage_url("azure://one.blob.core.windows.net/backups?account=two")
