"""S3 server-side encryption: every object the backend writes asks S3 to encrypt it (SSE-S3 or SSE-KMS).

Checked against the loopback moto server through real boto3: each way of
writing (one PutObject, a multipart upload, a conditional put, a file upload)
yields an object whose HEAD reports the encryption asked for, and for KMS the key.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import S3Storage, parse_storage_url

MIB = 1024 * 1024
pytestmark = pytest.mark.s3


def write_every_way(storage: S3Storage, tmp_path) -> list[str]:
    """One object per write path; returns their keys."""
    storage.put("small", b"x" * 100)
    storage.put("large", b"y" * (11 * MIB))  # above the threshold: a multipart upload
    assert storage.put_if_absent("lock", b"{}")
    path = tmp_path / "f"
    path.write_bytes(b"z" * 1000)
    storage.put_file("file", path)
    return ["small", "large", "lock", "file"]


@pytest.mark.parametrize("sse", ["s3", "kms"])
def test_every_write_is_encrypted_at_rest_as_the_url_asks(s3_server: str, s3_client: Any, s3_bucket: str, sse, tmp_path):
    # Given a storage URL asking for SSE-S3, or SSE-KMS with a key of its own
    key_id = None
    url = f"s3://{s3_bucket}/enc?endpoint={s3_server}&path_style=true&sse={sse}"
    if sse == "kms":
        kms = boto3.session.Session().client("kms", endpoint_url=s3_server, region_name=s3_client.meta.region_name)
        key_id = kms.create_key(Description="rbak test")["KeyMetadata"]["KeyId"]
        url += f"&sse_kms_key_id={key_id}"
    storage = S3Storage(parse_storage_url(url), multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    # When objects are written every way the backend writes
    keys = write_every_way(storage, tmp_path)
    # Then S3 reports each one encrypted with the algorithm (and key) asked for, and they read back
    for key in keys:
        head = s3_client.head_object(Bucket=s3_bucket, Key=f"enc/{key}")
        assert head["ServerSideEncryption"] == {"s3": "AES256", "kms": "aws:kms"}[sse], key
        if key_id:
            assert key_id in head["SSEKMSKeyId"], key
    assert storage.get("small") == b"x" * 100 and len(storage.get("large")) == 11 * MIB
    # and the URL says so, so the location names its encryption wherever it is shown
    assert f"sse={sse}" in storage.url


def test_encryption_options_are_checked_at_construction():
    assert parse_storage_url("s3://b-1/p?sse=kms&sse_kms_key_id=k-1").encryption_args == {
        "ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k-1"}
    assert parse_storage_url("s3://b-1/p").encryption_args == {}
    with pytest.raises(ConfigurationError, match="use s3 \\(SSE-S3\\) or kms"):
        parse_storage_url("s3://b-1/p?sse=aes")
    with pytest.raises(ConfigurationError, match="needs sse=kms"):
        parse_storage_url("s3://b-1/p?sse=s3&sse_kms_key_id=k-1")
