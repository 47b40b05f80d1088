"""A storage backend on Azure Blob Storage (or Azurite), through azure-storage-blob.

Credentials come from the environment (:class:`~airflow_rbak.storage.locations.azure.AzureCredentials`: a connection
string, an account key or a SAS token; an Airflow ``wasb`` connection's, handed in, come first), else from azure-identity's
default chain when it is installed; never from the storage URL. Conditional writes use ETags (``If-None-Match: *``,
``If-Match``), so the backup lock holds as it does on S3. Error messages never quote the SDK's own text, which can
hold a request URL and with it a SAS signature.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ExponentialRetry

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
from airflow_rbak.storage.locations.azure import AzureCredentials, AzureStorageConfig, parse_connection_string

_CHANGED_CODES = frozenset({"ConditionNotMet", "BlobAlreadyExists", "BlobNotFound", "LeaseIdMissing"})
_HINT = ("set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or "
         "AZURE_STORAGE_SAS_TOKEN, use a wasb connection (storage_conn_id), or install azure-identity")


class AzureBlobStorage(CloudStorage):
    """Objects live at ``<prefix>/<key>`` in one container; keys are reported relative to the prefix."""

    def __init__(self, config: AzureStorageConfig, *, connect_timeout: float = 10.0, read_timeout: float = 60.0,
                 list_page_size: int | None = None, client: Any = None,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__(config, config.container)
        self._page_size = list_page_size
        service = client or _make_client(config, credential_environment() if environ is None else environ,
                                         connect_timeout, read_timeout)
        self._container = service.get_container_client(config.container)

    def immutability(self) -> Immutability:
        """Not claimed: rbak neither sets nor reads Azure immutability policies, and the emulator the tests
        run does not enforce them, so nothing of it is tested (docs/operations.md#immutable-backups)."""
        return Immutability(backend="AzureBlobStorage", immutable=False,
                            summary="not claimed: rbak neither sets nor reads Azure immutability policies "
                                    "(version-level WORM, time-based retention); "
                                    "set on the storage account, they protect what they lock without rbak")

    def check_location(self) -> None:
        """The container must exist (an empty prefix is just empty)."""
        with self._errors("read", None):
            self._container.get_container_properties()

    def put(self, key: str, data: bytes) -> None:
        """One Put Blob, or staged blocks committed at once above the SDK's single-put size: both atomic."""
        with self._errors("write", key):
            self._blob(key).upload_blob(bytes(data), overwrite=True, max_concurrency=4)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Upload with ``If-None-Match: *``: Azure refuses it when the blob exists."""
        return self._conditional("write", key, lambda: self._blob(key).upload_blob(bytes(data), overwrite=False))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream a local file up in blocks, committed at once."""
        with open(path, "rb") as source, self._errors("write", key):
            self._blob(key).upload_blob(source, length=os.fstat(source.fileno()).st_size, overwrite=True,
                                        max_concurrency=4)

    def get(self, key: str) -> bytes:
        """Download the whole blob."""
        with self._errors("read", key):
            return bytes(self._blob(key).download_blob(max_concurrency=4).readall())

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The blob and its ETag, from one download."""
        with self._errors("read", key):
            download = self._blob(key).download_blob()
            return bytes(download.readall()), str(download.properties.etag)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Upload with ``If-Match: <ETag>``: refused (412) when the blob changed or is gone."""
        return self._conditional("write", key, lambda: self._blob(key).upload_blob(
            bytes(data), overwrite=True, etag=tag, match_condition=MatchConditions.IfNotModified))

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete with ``If-Match: <ETag>``: refused when the blob changed, nothing to do when it is gone."""
        return self._conditional("write", key, lambda: self._blob(key).delete_blob(
            etag=tag, match_condition=MatchConditions.IfNotModified))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Fetch only the bytes asked for with a ranged Get Blob."""
        check_range(offset, length)
        if length == 0:
            self.stat(key)
            return b""
        try:
            with self._errors("read", key):
                return bytes(self._blob(key).download_blob(offset=offset, length=length).readall())
        except StorageError as error:
            if _code(error.__cause__) == "InvalidRange":  # at or past the end (an empty blob has no range at all)
                return b""
            raise

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Stream the blob into ``path``, replacing it only once the download is complete."""
        with self._errors("read", key), atomic_write(path) as handle:
            self._blob(key).download_blob(max_concurrency=4).readinto(handle)

    def stat(self, key: str) -> ObjectInfo:
        """Ask Get Blob Properties for the size."""
        with self._errors("stat", key):
            return ObjectInfo(key, int(self._blob(key).get_blob_properties().size))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Page through List Blobs and yield keys sorted, relative to the storage prefix."""
        check_prefix(prefix)
        found: list[ObjectInfo] = []
        with self._errors("list", None, prefix):
            for item in self._container.list_blobs(name_starts_with=self._base + prefix,
                                                   results_per_page=self._page_size):
                key = item.name[len(self._base):]
                with contextlib.suppress(StorageError):
                    found.append(ObjectInfo(check_key(key), int(item.size)))
        found.sort(key=lambda info: info.key)
        yield from found

    def delete(self, key: str) -> None:
        """Delete Blob (with any snapshots); a missing blob is no error."""
        with contextlib.suppress(ObjectNotFoundError), self._errors("delete", key):
            self._blob(key).delete_blob(delete_snapshots="include")

    def _blob(self, key: str) -> Any:
        return self._container.get_blob_client(self._base + check_key(key))

    def _conditional(self, action: str, key: str, call: Any) -> bool:
        """Run a conditional call: False when its condition failed (changed, present, or gone)."""
        try:
            with self._errors(action, key):
                call()
        except ObjectNotFoundError:
            return False
        except StorageError as error:
            if isinstance(error, MissingLocationError) or _code(error.__cause__) not in _CHANGED_CODES:
                raise
            return False
        return True

    scheme = "azure"

    def _translate(self, error: Exception, action: str, key: str | None, prefix: str) -> StorageError | None:
        if isinstance(error, HttpResponseError):
            return self._response_error(error, action, key, prefix)
        if isinstance(error, (ServiceRequestError, ServiceResponseError)):
            return TransientStorageError(f"cannot {action} {self._where(key, prefix)}: "
                                         f"{type(error).__name__} (no answer from the service)", key)
        if isinstance(error, AzureError):
            return StorageError(f"cannot {action} {self._where(key, prefix)}: {type(error).__name__}", key)
        return None

    def _response_error(self, error: HttpResponseError, action: str, key: str | None, prefix: str) -> StorageError:
        code, status, where = _code(error), error.status_code or 0, self._where(key, prefix)
        if code == "ContainerNotFound":
            return MissingLocationError(
                f"Azure container {self.config.container!r} does not exist ({where}); check the storage URL", key)
        if isinstance(error, ResourceNotFoundError) and action in ("read", "stat", "delete"):
            return ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
        if isinstance(error, (ResourceExistsError, ResourceModifiedError)):
            return StorageError(f"cannot {action} {where}: {code} (HTTP {status})", key)
        if isinstance(error, ClientAuthenticationError) or status in (401, 403):
            return StorageError(f"access denied to {action} {where} ({code or status}): check the credentials "
                                f"and the account's access rules; {_HINT}", key)
        if status >= 500 or status in (408, 429):
            return TransientStorageError(f"cannot {action} {where}: {code} (HTTP {status})", key)
        return StorageError(f"cannot {action} {where}: {code} (HTTP {status})", key)


def _code(error: BaseException | None) -> str:
    """The Azure error code of an SDK error ('' for anything else)."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _make_client(config: AzureStorageConfig, environ: Mapping[str, str], connect_timeout: float,
                 read_timeout: float) -> BlobServiceClient:
    """A service client for the account, with bounded timeouts and a short retry of its own."""
    credentials = AzureCredentials.from_environment(environ)
    settings = parse_connection_string(credentials.connection_string) if credentials and credentials.connection_string else {}
    account = config.account or settings.get("AccountName") or (credentials.account if credentials else None)
    if config.account and settings.get("AccountName") not in (None, config.account):
        raise ConfigurationError(f"{config.url} names account {config.account!r} but the connection string another")
    endpoint = config.endpoint or settings.get("BlobEndpoint")
    if not endpoint:
        if not account:
            raise ConfigurationError(f"{config.url} names no Azure storage account: add ?account=NAME, or set "
                                     "AZURE_STORAGE_ACCOUNT or a connection string")
        suffix = settings.get("EndpointSuffix", "core.windows.net")
        endpoint = f"{settings.get('DefaultEndpointsProtocol', 'https')}://{account}.blob.{suffix}"
    return BlobServiceClient(endpoint.rstrip("/"), credential=_credential(credentials, settings, account),
                             retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=2),
                             connection_timeout=connect_timeout, read_timeout=read_timeout)


def _credential(credentials: AzureCredentials | None, settings: Mapping[str, str], account: str | None) -> Any:
    """What the SDK authenticates with: a shared key, a SAS token, or azure-identity's default chain."""
    key = settings.get("AccountKey") or (credentials.account_key if credentials else None)
    if key:
        if not account:
            raise ConfigurationError("an Azure account key needs the account name (AccountName or ?account=)")
        return {"account_name": account, "account_key": key}
    sas = settings.get("SharedAccessSignature") or (credentials.sas_token if credentials else None)
    if sas:
        return sas
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise ConfigurationError(f"no Azure storage credentials: {_HINT}") from None
    return DefaultAzureCredential()
