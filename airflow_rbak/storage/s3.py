"""A storage backend on S3 or an S3-compatible server, through boto3.

Credentials come from the session a caller handed in
(:func:`~airflow_rbak.storage.credentials.storage_credentials`: an Airflow ``aws``
connection's, with its role), else from boto3's usual chain (environment, profile,
instance role), never from the storage URL. botocore retries a little on its own;
:class:`~airflow_rbak.storage.retry.RetryingStorage` retries the rest, so
this module's job is to tell transient failures from final ones.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import boto3
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.loaders import create_loader
from s3transfer.exceptions import RetriesExceededError

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.atomic import atomic_write
from airflow_rbak.storage.base import (
    Immutability,
    MissingLocationError,
    ObjectInfo,
    ObjectNotFoundError,
    StorageError,
    TransientStorageError,
    check_key,
    check_prefix,
    check_range,
)
from airflow_rbak.storage.cloud import CloudStorage
from airflow_rbak.storage.credentials import current_credentials
from airflow_rbak.storage.locations.s3 import S3Session, S3StorageConfig
from airflow_rbak.storage.s3_object_lock import S3ObjectLock

MIB = 1024 * 1024
#: Bodies above this go up in parts; S3 still shows the object only when complete.
DEFAULT_MULTIPART_THRESHOLD = 64 * MIB
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
     "ExpiredToken", "InvalidToken", "AllAccessDisabled", "AccountProblem"}
)
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
     "RequestThrottled", "RequestLimitExceeded", "TooManyRequestsException",
     "BandwidthLimitExceeded", "RequestTimeout", "RequestTimeoutException",
     "InternalError", "ServiceUnavailable", "PriorRequestNotComplete"}
)
# Parsed service models are immutable; sharing them makes a new client ~5x cheaper.
_SHARED_LOADER = create_loader()
_CLIENT_LOCK = threading.Lock()
_TRANSIENT_EXCEPTIONS = (
    BotoConnectionError, HTTPClientError, IncompleteReadError, ChecksumError, RetriesExceededError,
)


class S3Storage(CloudStorage):
    """Objects live at ``<prefix>/<key>`` in one bucket; keys are reported relative to the prefix.

    Bucket keys under the prefix that are not valid storage keys (console
    "folder" markers ending in ``/``, ``a//b``) are skipped by :meth:`list`.
    """

    def __init__(
        self,
        config: S3StorageConfig,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunksize: int = 16 * MIB,
        list_page_size: int | None = None,
        client: Any = None,
    ) -> None:
        if multipart_chunksize < 5 * MIB or multipart_threshold < multipart_chunksize:
            raise ConfigurationError(
                "S3 parts must be at least 5 MiB and the multipart threshold at least one part"
            )
        super().__init__(config, config.bucket)
        self.bucket = config.bucket
        self._bucket_known = False
        self._encryption = config.encryption_args  # every write asks for it: S3 encrypts per object
        self._pagination = {"PageSize": list_page_size} if list_page_size else {}
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=4,
        )
        self._client = client or _make_client(config, connect_timeout, read_timeout, max_attempts)
        self.object_lock = S3ObjectLock(self)

    def _write_args(self, key: str) -> dict[str, Any]:
        """What every write asks S3 for: the encryption, and the Object Lock when ``key`` is a backup's content.

        With ``object_lock`` in the URL the first write checks that the bucket can lock, so a run on a bucket
        that cannot is refused before it writes anything.
        """
        self.object_lock.require_enabled()
        return {**self._encryption, **self.object_lock.put_args(key)}

    def immutability(self) -> Immutability:
        """What the bucket's Object Lock and the URL's ``object_lock`` lock (:mod:`~airflow_rbak.storage.s3_object_lock`)."""
        return self.object_lock.immutability()

    def locked_until(self, prefix: str, now: datetime) -> dict[str, datetime]:
        """The keys under ``prefix`` with a version S3 still refuses to delete, and until when."""
        return self.object_lock.locked_until(prefix, now)

    def hidden_keys(self, prefix: str) -> tuple[str, ...]:
        """Keys under ``prefix`` whose latest version is a delete marker (none on an unversioned bucket)."""
        if self.object_lock.bucket_config()["versioning"] == "Disabled":
            return ()
        return self.object_lock.hidden_keys(prefix)

    def purge(self, key: str) -> bool:
        """Every version of ``key`` deleted, or hidden where the credential may not delete versions."""
        if self.object_lock.bucket_config()["versioning"] == "Disabled":
            self.delete(key)
            return True
        return self.object_lock.purge(key)

    def check_location(self) -> None:
        """The bucket must exist (a prefix is no object on S3: an empty one is just empty)."""
        with self._errors("read", None):
            self._client.head_bucket(Bucket=self.bucket)
        self._bucket_known = True

    def put(self, key: str, data: bytes) -> None:
        """Upload in one PutObject, or in parts above the threshold; both appear atomically."""
        full = self._full_key(key)
        with self._errors("write", key):
            if len(data) <= self._transfer.multipart_threshold:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, **self._write_args(key))
            else:
                self._client.upload_fileobj(io.BytesIO(data), self.bucket, full, Config=self._transfer,
                                            ExtraArgs=self._write_args(key))
        if len(data) > self._transfer.multipart_threshold:
            self.object_lock.check_written(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """One PutObject with ``If-None-Match: *``: S3 refuses it (412) when the key exists.

        Needs a server with conditional writes (AWS S3 since 2024-08, recent MinIO,
        moto 5); a server that ignores the header overwrites, which the caller's
        read-back then detects for all but a narrow race.
        """
        full = self._full_key(key)
        try:
            with self._errors("write", key):
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*",
                                        **self._write_args(key))
        except StorageError as error:
            code = _error_code(error.__cause__)
            if code == "PreconditionFailed":
                return False
            if code == "ConditionalRequestConflict":  # a racing conditional write is in flight: ask again
                raise TransientStorageError(f"conditional write of {self._where(key)} conflicted; retry", key) from error
            raise
        return True

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream a local file up, in parts when it is large."""
        full = self._full_key(key)
        with open(path, "rb") as source, self._errors("write", key):
            self._client.upload_fileobj(source, self.bucket, full, Config=self._transfer, ExtraArgs=self._write_args(key))
        self.object_lock.check_written(key)

    def get(self, key: str) -> bytes:
        """Download the whole object; a broken-off body counts as transient."""
        full = self._full_key(key)
        with self._errors("read", key):
            body = self._client.get_object(Bucket=self.bucket, Key=full)["Body"]
            with contextlib.closing(body):
                return body.read()

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The object and its ETag, from one GET."""
        with self._errors("read", key):
            response = self._client.get_object(Bucket=self.bucket, Key=self._full_key(key))
            with contextlib.closing(response["Body"]) as body:
                return body.read(), response["ETag"]

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """One PutObject with ``If-Match: <ETag>``: S3 refuses it (412) when the object changed."""
        return self._if_match("write", key, lambda: self._client.put_object(
            Bucket=self.bucket, Key=self._full_key(key), Body=data, IfMatch=tag, **self._write_args(key)))

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """One DeleteObject with ``If-Match: <ETag>`` (a server that ignores it deletes unconditionally)."""
        return self._if_match("write", key, lambda: self._client.delete_object(
            Bucket=self.bucket, Key=self._full_key(key), IfMatch=tag))

    def _if_match(self, action: str, key: str, call: Any) -> bool:
        try:
            with self._errors(action, key):
                call()
        except ObjectNotFoundError:
            return False
        except StorageError as error:
            if _error_code(error.__cause__) in ("PreconditionFailed", "412", "ConditionalRequestConflict", *_NOT_FOUND_CODES):
                return False  # changed, being changed, or gone
            raise
        return True

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Fetch only the bytes asked for with an HTTP Range request."""
        check_range(offset, length)
        full = self._full_key(key)
        if length == 0:
            self.stat(key)
            return b""
        byte_range = f"bytes={offset}-{offset + length - 1}"
        try:
            with self._errors("read", key):
                body = self._client.get_object(Bucket=self.bucket, Key=full, Range=byte_range)["Body"]
                with contextlib.closing(body):
                    return body.read()
        except StorageError as error:
            if _error_code(error.__cause__) == "InvalidRange":  # offset at or past the end
                return b""
            raise

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream the object into ``path``, replacing it only once the download is complete."""
        full = self._full_key(key)
        with self._errors("read", key), atomic_write(path) as handle:
            self._client.download_fileobj(self.bucket, full, handle, Config=self._transfer)

    def stat(self, key: str) -> ObjectInfo:
        """Ask HeadObject for the size."""
        full = self._full_key(key)
        with self._errors("stat", key):
            response = self._client.head_object(Bucket=self.bucket, Key=full)
        return ObjectInfo(key, int(response["ContentLength"]))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Page through ListObjectsV2 and yield keys sorted, relative to the storage prefix."""
        check_prefix(prefix)
        found: list[ObjectInfo] = []
        with self._errors("list", None, prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._base + prefix, PaginationConfig=self._pagination
            )
            for page in pages:
                found.extend(self._page_objects(page))
        found.sort(key=lambda info: info.key)
        yield from found

    def delete(self, key: str) -> None:
        """DeleteObject, which S3 already treats as a success for a missing key."""
        full = self._full_key(key)
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=full)

    def _page_objects(self, page: dict[str, Any]) -> Iterator[ObjectInfo]:
        for item in page.get("Contents", ()):
            key = item["Key"][len(self._base):]
            try:
                check_key(key)
            except StorageError:
                continue
            yield ObjectInfo(key, int(item["Size"]))

    def _full_key(self, key: str) -> str:
        return self._base + check_key(key)

    scheme = "s3"

    def _translate(self, error: Exception, action: str, key: str | None, prefix: str) -> StorageError | None:
        if isinstance(error, ClientError):
            return self._client_error(error, action, key, prefix)
        if isinstance(error, _TRANSIENT_EXCEPTIONS):
            return TransientStorageError(f"cannot {action} {self._where(key, prefix)}: {error}", key)
        if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
            return StorageError(f"cannot {action} {self._where(key, prefix)}: {error}; set AWS_ACCESS_KEY_ID "
                                "and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with an instance role", key)
        if isinstance(error, BotoCoreError):
            return StorageError(f"cannot {action} {self._where(key, prefix)}: {error}", key)
        return None

    def _client_error(
        self, error: ClientError, action: str, key: str | None, prefix: str
    ) -> StorageError:
        """Pick the storage error for an S3 error response."""
        code = _error_code(error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        where = self._where(key, prefix)
        # HEAD answers a bare 404 for a missing bucket too; a wrong bucket must not read as "no backup".
        if code == "NoSuchBucket" or (code in ("404", "NotFound") and not self._bucket_exists()):
            return MissingLocationError(
                f"S3 bucket {self.bucket!r} does not exist ({where}); check the storage URL", key
            )
        if code in _NOT_FOUND_CODES and action in ("read", "stat"):
            return ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
        if code in _DENIED_CODES or status == 403:
            return StorageError(
                f"access denied to {action} {where} ({code}): check the credentials and the "
                "bucket policy (S3 also answers 403 for a missing key when s3:ListBucket is not granted)",
                key,
            )
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            return TransientStorageError(f"cannot {action} {where}: {code} (HTTP {status})", key)
        detail = error.response.get("Error", {}).get("Message") or code
        return StorageError(f"cannot {action} {where}: {code}: {detail}", key)

    def _bucket_exists(self) -> bool:
        """Check the bucket once, since a HEAD on a missing bucket looks like a missing key."""
        if self._bucket_known:
            return True
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            if _error_code(error) in ("404", "NoSuchBucket", "NotFound"):
                return False
        except BotoCoreError:
            return True  # cannot tell now; the not-found answer stands
        self._bucket_known = True
        return True


def _error_code(error: BaseException | None) -> str:
    """Return the S3 error code of a ClientError ('' for anything else)."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def _make_client(
    config: S3StorageConfig, connect_timeout: float, read_timeout: float, max_attempts: int
) -> Any:
    """Create a client with bounded timeouts and few retries of its own.

    Each storage gets its own session, so credentials are resolved afresh
    (boto3's default session would pin the first ones it found), unless a caller handed one in: then its
    client, with the URL's endpoint and region first and the session's connection's next.
    """
    handed = current_credentials()
    session = handed if isinstance(handed, S3Session) else None
    endpoint = config.endpoint or (session.endpoint_url if session else None)
    region = config.region or (session.region if session else None)
    # S3-compatible servers vary in support for the CRC trailers botocore sends by
    # default since 1.36; send checksums only where required there (RBAK
    # segments carry their own CRC and SHA-256).
    checksums = "when_required" if endpoint else "when_supported"
    botocore_config = Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        s3={"addressing_style": "path" if config.path_style else "auto"},
        request_checksum_calculation=checksums,
        response_checksum_validation=checksums,
    )
    try:
        with _CLIENT_LOCK:
            if session is not None:
                return session.session.client("s3", region_name=region, endpoint_url=endpoint, config=botocore_config)
            core = botocore.session.get_session()
            core.register_component("data_loader", _SHARED_LOADER)
            return boto3.session.Session(botocore_session=core).client(
                "s3", region_name=region, endpoint_url=endpoint, config=botocore_config
            )
    except BotoCoreError as error:
        raise ConfigurationError(f"cannot set up S3 client for {config.url}: {error}") from error
