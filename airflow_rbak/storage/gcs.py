"""A storage backend on Google Cloud Storage (or an emulator), through google-cloud-storage.

Credentials come from ``RBAK_GCS_KEYFILE_JSON`` (a key file's content; an Airflow ``google_cloud_platform``
connection's, handed in, comes first), else Google's application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, the
metadata server); never from the storage URL. A plain ``http://`` endpoint is an emulator, reached anonymously so
that no token travels unencrypted. Conditional writes use generation preconditions (``ifGenerationMatch=0`` to
create, ``=<generation>`` to replace or delete), so the backup lock holds as it does on S3.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import google.auth
import requests
from google.api_core import exceptions as api
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError, RefreshError, TransportError
from google.cloud import storage as gcs
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse
from google.cloud.storage.retry import DEFAULT_RETRY

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
from airflow_rbak.storage.credentials import credential_environment
from airflow_rbak.storage.locations.gcs import GCS_KEYFILE_ENV, GcsStorageConfig

_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
_HINT = (f"set {GCS_KEYFILE_ENV} (a key file's JSON) or GOOGLE_APPLICATION_CREDENTIALS, use a "
         "google_cloud_platform connection (storage_conn_id), or run with a service account")
_TRANSIENT = (requests.ConnectionError, requests.Timeout, TransportError, DataCorruption, api.RetryError,
              api.TooManyRequests, api.ServerError)
_OCTETS = "application/octet-stream"
#: The client's own retries stop after this many seconds (its default is two minutes); the retrying wrapper around
#: every storage goes on from there, counting attempts.
CLIENT_RETRY_SECONDS = 10.0


class GcsStorage(CloudStorage):
    """Objects live at ``<prefix>/<key>`` in one bucket; keys are reported relative to the prefix."""

    def __init__(self, config: GcsStorageConfig, *, connect_timeout: float = 10.0, read_timeout: float = 60.0,
                 list_page_size: int | None = None, client: Any = None,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config, config.bucket)
        self._page_size = list_page_size
        self._timeout = (connect_timeout, read_timeout)
        self._retry = DEFAULT_RETRY.with_timeout(CLIENT_RETRY_SECONDS)
        self._client = client or _make_client(config, credential_environment() if environ is None else environ)
        self._bucket = self._client.bucket(config.bucket)
        self._bucket_known = False

    def immutability(self) -> Immutability:
        """Not claimed: rbak neither sets nor reads GCS retention policies or holds, and the emulator the tests
        run does not enforce them, so nothing of it is tested (docs/operations.md#immutable-backups)."""
        return Immutability(backend="GcsStorage", immutable=False,
                            summary="not claimed: rbak neither sets nor reads GCS retention policies, object retention or holds; "
                                    "set on the storage account, they protect what they lock without rbak")

    def check_location(self) -> None:
        """The bucket must exist (an empty prefix is just empty)."""
        with self._errors("read", None):
            self._bucket.reload(timeout=self._timeout, retry=self._retry)
        self._bucket_known = True

    def put(self, key: str, data: bytes) -> None:
        """One upload; GCS shows the object only once it is complete."""
        with self._errors("write", key):
            self._blob(key).upload_from_string(bytes(data), content_type=_OCTETS, timeout=self._timeout, retry=self._retry)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Upload with ``ifGenerationMatch=0``: GCS refuses it (412) when the object exists."""
        return self._conditional("write", key, lambda: self._blob(key).upload_from_string(
            bytes(data), content_type=_OCTETS, if_generation_match=0, timeout=self._timeout, retry=self._retry))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream a local file up (in a resumable upload when it is large)."""
        with self._errors("write", key):
            self._blob(key).upload_from_filename(os.fspath(path), content_type=_OCTETS, timeout=self._timeout, retry=self._retry)

    def get(self, key: str) -> bytes:
        """Download the whole object (checked against its CRC32C)."""
        with self._errors("read", key):
            return bytes(self._blob(key).download_as_bytes(timeout=self._timeout, retry=self._retry))

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The object and its generation, from one download's headers."""
        blob = self._blob(key)
        with self._errors("read", key):
            data = blob.download_as_bytes(timeout=self._timeout, retry=self._retry)
        return bytes(data), str(blob.generation)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Upload with ``ifGenerationMatch=<generation>``: refused when the object changed or is gone."""
        generation = _generation(tag)
        return generation is not None and self._conditional("write", key, lambda: self._blob(key).upload_from_string(
            bytes(data), content_type=_OCTETS, if_generation_match=generation, timeout=self._timeout, retry=self._retry))

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete with ``ifGenerationMatch=<generation>``: refused when the object changed, False when gone."""
        generation = _generation(tag)
        return generation is not None and self._conditional("write", key, lambda: self._blob(key).delete(
            if_generation_match=generation, timeout=self._timeout, retry=self._retry))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Fetch only the bytes asked for with an HTTP Range request."""
        check_range(offset, length)
        if length == 0:
            self.stat(key)
            return b""
        try:
            with self._errors("read", key):
                return bytes(self._blob(key).download_as_bytes(start=offset, end=offset + length - 1,
                                                               timeout=self._timeout, retry=self._retry))
        except StorageError as error:
            if isinstance(error.__cause__, api.RequestRangeNotSatisfiable):  # at or past the end
                return b""
            raise

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream the object into ``path``, replacing it only once the download is complete."""
        with self._errors("read", key), atomic_write(path) as handle:
            self._blob(key).download_to_file(handle, timeout=self._timeout, retry=self._retry)

    def stat(self, key: str) -> ObjectInfo:
        """Ask the object's metadata for its size."""
        blob = self._blob(key)
        with self._errors("stat", key):
            blob.reload(timeout=self._timeout, retry=self._retry)
        return ObjectInfo(key, int(blob.size or 0))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Page through the object listing and yield keys sorted, relative to the storage prefix."""
        check_prefix(prefix)
        found: list[ObjectInfo] = []
        with self._errors("list", None, prefix):
            for blob in self._client.list_blobs(self._bucket, prefix=self._base + prefix, page_size=self._page_size,
                                                timeout=self._timeout, retry=self._retry):
                with contextlib.suppress(StorageError):
                    found.append(ObjectInfo(check_key(blob.name[len(self._base):]), int(blob.size or 0)))
        found.sort(key=lambda info: info.key)
        yield from found

    def delete(self, key: str) -> None:
        """Delete the object; a missing one is no error."""
        with contextlib.suppress(ObjectNotFoundError), self._errors("delete", key):
            self._blob(key).delete(timeout=self._timeout, retry=self._retry)

    def _blob(self, key: str) -> Any:
        return self._bucket.blob(self._base + check_key(key))

    def _conditional(self, action: str, key: str, call: Any) -> bool:
        """Run a call with a generation precondition: False when it failed (present, changed or gone)."""
        try:
            with self._errors(action, key):
                call()
        except MissingLocationError:
            raise
        except StorageError as error:
            if isinstance(error.__cause__, (api.PreconditionFailed, api.NotFound)):
                return False
            raise
        return True

    scheme = "gcs"

    def _translate(self, error: Exception, action: str, key: str | None, prefix: str) -> StorageError | None:
        where = self._where(key, prefix)
        if isinstance(error, api.NotFound):
            if key is None or not self._bucket_exists():
                return MissingLocationError(
                    f"GCS bucket {self.config.bucket!r} does not exist ({where}); check the storage URL", key)
            if action in ("read", "stat", "delete"):
                return ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
            return StorageError(f"cannot {action} {where}: not found (HTTP 404)", key)
        if isinstance(error, _TRANSIENT):
            return TransientStorageError(f"cannot {action} {where}: {type(error).__name__}", key)
        if isinstance(error, (api.Forbidden, api.Unauthorized, RefreshError, DefaultCredentialsError)):
            return StorageError(f"access denied to {action} {where} ({type(error).__name__}): check the "
                                f"credentials and the bucket's permissions; {_HINT}", key)
        if isinstance(error, api.GoogleAPICallError):
            return StorageError(f"cannot {action} {where}: {type(error).__name__} (HTTP {error.code})", key)
        if isinstance(error, (GoogleAuthError, InvalidResponse)):
            return StorageError(f"cannot {action} {where}: {type(error).__name__}", key)
        return None

    def _bucket_exists(self) -> bool:
        """Check the bucket once, since a missing bucket answers 404 like a missing object."""
        if self._bucket_known:
            return True
        try:
            self._bucket.reload(timeout=self._timeout, retry=self._retry)
        except api.NotFound:
            return False
        except (api.GoogleAPICallError, *_TRANSIENT, GoogleAuthError):
            return True  # cannot tell now; the not-found answer stands
        self._bucket_known = True
        return True


def _generation(tag: str) -> int | None:
    """The generation a tag from :meth:`GcsStorage.read_tagged` names (None for a tag of something else)."""
    return int(tag) if tag.isdigit() else None


def _make_client(config: GcsStorageConfig, environ: Mapping[str, str]) -> gcs.Client:
    """A client with the credentials the environment gives (none for an ``http://`` emulator)."""
    options = {"api_endpoint": config.endpoint} if config.endpoint else None
    if config.endpoint and config.endpoint.startswith("http://"):
        return gcs.Client(project=None, credentials=AnonymousCredentials(), client_options=options)
    keyfile = environ.get(GCS_KEYFILE_ENV)
    try:
        if keyfile:
            credentials, project = google.auth.load_credentials_from_dict(json.loads(keyfile), scopes=_SCOPES)
        else:
            credentials, project = google.auth.default(scopes=_SCOPES)
    except ValueError:
        raise ConfigurationError(f"{GCS_KEYFILE_ENV} is not a Google key file's JSON") from None
    except DefaultCredentialsError:
        raise ConfigurationError(f"no Google credentials for {config.url}: {_HINT}") from None
    return gcs.Client(project=project, credentials=credentials, client_options=options)
