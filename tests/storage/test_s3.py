"""S3Storage specifics: error mapping, timeouts, multipart, prefixes, pagination.

Network tests go through real boto3 over HTTP to the loopback moto server
(``s3_server`` in tests/conftest.py); error-code mapping is checked with
botocore's Stubber, since moto cannot be made to throttle on demand.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from airflow_rbak.storage import (
    ObjectNotFoundError,
    RetryingStorage,
    S3Storage,
    S3StorageConfig,
    Storage,
    StorageError,
    TransientStorageError,
    open_storage,
    parse_storage_url,
)

MIB = 1024 * 1024
pytestmark = pytest.mark.s3


def _s3(url: str, **options: Any) -> S3Storage:
    config = parse_storage_url(url)
    assert isinstance(config, S3StorageConfig)
    return S3Storage(config, **options)


# --- a wrong bucket is an error, not "no backup here" -----------------------------------


@pytest.mark.parametrize(
    "operation",
    [
        lambda s: s.get("manifest.json"),
        lambda s: s.stat("manifest.json"),
        lambda s: s.exists("manifest.json"),
        lambda s: list(s.list()),
        lambda s: s.put("manifest.json", b"{}"),
        lambda s: s.delete("manifest.json"),
        lambda s: s.get_range("manifest.json", 0, 8),
    ],
    ids=["get", "stat", "exists", "list", "put", "delete", "get_range"],
)
def test_given_a_bucket_that_does_not_exist_when_used_then_a_clear_error_names_the_bucket(
    s3_server: str, operation: Callable[[Storage], object]
) -> None:
    storage = open_storage(f"s3://no-such-bucket-rbak/p?endpoint={s3_server}&path_style=true", retries=0)

    with pytest.raises(StorageError) as raised:
        operation(storage)

    assert not isinstance(raised.value, ObjectNotFoundError)
    assert "'no-such-bucket-rbak' does not exist" in str(raised.value)


# --- unreachable or silent endpoints are transient, and bounded -------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_given_an_endpoint_on_a_closed_port_when_read_then_transient_error_after_bounded_retries() -> None:
    sleeps: list[float] = []
    backend = _s3(f"s3://bkt?region=us-east-1&endpoint=http://127.0.0.1:{_free_port()}",
                  connect_timeout=0.5, read_timeout=0.5, max_attempts=1)
    storage = RetryingStorage(backend, retries=2, base_delay=0.01, sleep=sleeps.append)
    started = time.monotonic()

    with pytest.raises(TransientStorageError) as raised:
        storage.get("manifest.json")

    assert time.monotonic() - started < 60  # a hang guard: the bound is the timeouts and attempts above
    assert len(sleeps) == 2  # three attempts in all, then it gives up
    assert "s3://bkt/manifest.json" in str(raised.value)
    assert raised.value.key == "manifest.json"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A port that accepts TCP connections (kernel backlog) but never answers a request."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_given_an_endpoint_that_never_answers_when_read_then_read_timeout_is_transient(silent_endpoint: str) -> None:
    storage = _s3(f"s3://bkt?region=us-east-1&endpoint={silent_endpoint}",
                  connect_timeout=0.5, read_timeout=0.3, max_attempts=1)
    started = time.monotonic()

    with pytest.raises(TransientStorageError):
        storage.stat("k")

    assert time.monotonic() - started < 60  # a hang guard: the bound is the timeouts and attempts above


def test_given_no_credentials_anywhere_when_used_then_storage_error_says_how_to_provide_them(
    s3_storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    storage = _s3(s3_storage_url, max_attempts=1)

    with pytest.raises(StorageError) as raised:
        storage.get("k")

    assert "AWS_ACCESS_KEY_ID" in str(raised.value)


# --- error codes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline_client() -> Any:
    """A client that never reaches a server: every response comes from a Stubber."""
    return boto3.session.Session().client(
        "s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:1",
        aws_access_key_id="x", aws_secret_access_key="y",
    )


@pytest.fixture
def stubbed(offline_client: Any) -> Iterator[tuple[S3Storage, Stubber]]:
    client = offline_client
    with Stubber(client) as stubber:
        yield S3Storage(S3StorageConfig("bkt", "pre"), client=client), stubber


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("SlowDown", 503, TransientStorageError),
        ("InternalError", 500, TransientStorageError),
        ("ServiceUnavailable", 503, TransientStorageError),
        ("RequestTimeout", 400, TransientStorageError),
        ("TooManyRequests", 429, TransientStorageError),
        ("NoSuchKey", 404, ObjectNotFoundError),
        ("AccessDenied", 403, StorageError),
        ("InvalidAccessKeyId", 403, StorageError),
        ("InvalidArgument", 400, StorageError),
    ],
)
def test_given_an_s3_error_response_when_reading_then_it_maps_to_the_matching_storage_error(
    stubbed: tuple[S3Storage, Stubber], code: str, status: int, expected: type[StorageError]
) -> None:
    storage, stubber = stubbed
    stubber.add_client_error("get_object", service_error_code=code, http_status_code=status)

    with pytest.raises(StorageError) as raised:
        storage.get("seg/1")

    assert type(raised.value) is expected
    assert raised.value.key == "seg/1"


def test_given_access_denied_when_writing_then_the_message_names_bucket_key_and_cause(
    stubbed: tuple[S3Storage, Stubber],
) -> None:
    storage, stubber = stubbed
    stubber.add_client_error("put_object", service_error_code="AccessDenied", http_status_code=403)

    with pytest.raises(StorageError) as raised:
        storage.put("seg/1", b"x")

    assert "access denied to write s3://bkt/pre/seg/1" in str(raised.value)


# --- multipart, prefixes, foreign keys, pagination ------------------------------------------


def test_given_a_body_over_the_threshold_when_put_then_it_goes_up_in_parts_and_reads_back_exactly(
    s3_storage_url: str, s3_client: Any, s3_bucket: str
) -> None:
    storage = _s3(s3_storage_url, multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    data = bytes(range(256)) * (11 * MIB // 256) + b"tail"

    storage.put("big", data)

    assert storage.get("big") == data
    etag = s3_client.head_object(Bucket=s3_bucket, Key="backups/big")["ETag"]
    assert etag.strip('"').endswith("-3")  # a multipart ETag: three parts


def test_given_a_large_local_file_when_put_file_then_it_goes_up_in_parts(
    s3_storage_url: str, s3_client: Any, s3_bucket: str, tmp_path: Any
) -> None:
    storage = _s3(s3_storage_url, multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    source = tmp_path / "db.sqlite"
    source.write_bytes(b"\x5a" * (6 * MIB))

    storage.put_file("index/db.sqlite", source)
    storage.get_file("index/db.sqlite", tmp_path / "copy")

    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    etag = s3_client.head_object(Bucket=s3_bucket, Key="backups/index/db.sqlite")["ETag"]
    assert etag.strip('"').endswith("-2")


def test_given_two_prefixes_in_one_bucket_when_listing_then_neither_sees_the_other(
    s3_server: str, s3_bucket: str
) -> None:
    first = _s3(f"s3://{s3_bucket}/team?endpoint={s3_server}&path_style=true")
    second = _s3(f"s3://{s3_bucket}/team2?endpoint={s3_server}&path_style=true")

    first.put("k", b"1")
    second.put("k", b"2")

    assert [i.key for i in first.list()] == ["k"]
    assert first.get("k") == b"1"
    assert second.get("k") == b"2"


def test_given_foreign_objects_under_the_prefix_when_listing_then_only_valid_keys_appear(
    s3_storage_url: str, s3_client: Any, s3_bucket: str
) -> None:
    for key in ["backups/folder/", "backups/a//b", "backups", "backupsx/y", "backups/ok"]:
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"z")

    assert [i.key for i in _s3(s3_storage_url).list()] == ["ok"]


def test_given_more_objects_than_one_page_when_listing_then_every_key_arrives_sorted(
    s3_storage_url: str, s3_client: Any, s3_bucket: str
) -> None:
    """Pages of two keys stand in for S3's 1,000, so following continuation tokens is exercised."""
    keys = [f"seg/{n:02d}" for n in range(7)]
    for key in reversed(keys):
        s3_client.put_object(Bucket=s3_bucket, Key=f"backups/{key}", Body=b"")

    assert [i.key for i in _s3(s3_storage_url, list_page_size=2).list("seg/")] == keys
