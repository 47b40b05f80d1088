"""Storage backends for RBAK backups: one interface, several places to keep bytes.

``open_storage(url)`` is the usual entry point. The cloud backends are imported
only when needed, so using file or memory storage does not pay for boto3, and
the Azure and GCS client libraries are optional extras (``airflow-rbak[azure]``,
``airflow-rbak[gcs]``). Which backends exist is the registry's (``storage/registry.py``): each registers its
scheme once, and ``open_backend`` asks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from airflow_rbak.storage.base import (
    InvalidKeyError,
    MissingLocationError,
    ObjectInfo,
    ObjectNotFoundError,
    Storage,
    StorageError,
    TransientStorageError,
    check_key,
    check_prefix,
)
from airflow_rbak.storage.encrypted import EncryptedStorage
from airflow_rbak.storage.file import FileStorage
from airflow_rbak.storage.keyring import Keyring, current_keyring
from airflow_rbak.storage.memory import MemoryStorage
from airflow_rbak.storage.registry import open_backend
from airflow_rbak.storage.retry import DEFAULT_RETRIES, RetryingStorage
from airflow_rbak.storage.unkeyed import UnkeyedStorage
from airflow_rbak.storage.url import (
    AzureStorageConfig,
    FileStorageConfig,
    GcsStorageConfig,
    MemoryStorageConfig,
    S3StorageConfig,
    StorageConfig,
    parse_storage_url,
)

if TYPE_CHECKING:
    from airflow_rbak.storage.s3 import S3Storage

__all__ = [
    "CURRENT_KEYS",
    "DEFAULT_RETRIES",
    "AzureStorageConfig",
    "EncryptedStorage",
    "FileStorage",
    "FileStorageConfig",
    "GcsStorageConfig",
    "InvalidKeyError",
    "Keyring",
    "MemoryStorage",
    "MemoryStorageConfig",
    "MissingLocationError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "RetryingStorage",
    "S3Storage",
    "S3StorageConfig",
    "Storage",
    "StorageConfig",
    "StorageError",
    "TransientStorageError",
    "check_key",
    "check_prefix",
    "open_backend",
    "open_storage",
    "parse_storage_url",
]


#: ``open_storage``'s default keyring: the one handed in for the running task, else ``RBAK_ENCRYPTION_KEYS``.
CURRENT_KEYS: Final = "current"


def open_storage(url: str, *, retries: int = DEFAULT_RETRIES, keyring: Keyring | None | str = CURRENT_KEYS) -> Storage:
    """Open the backend a URL names, wrapped so transient failures are retried, and encrypted when there is a key.

    ``retries`` is how many times one call may be retried after its first
    attempt (0 disables retrying). ``keyring``: the keys to seal and open
    objects with (``storage/encrypted.py``); None opens the location
    unkeyed, where an encrypted location's objects are refused as needing
    a key; the default takes the keyring handed in for the running task
    (``storage/keyring.py``). Bad URLs raise ``ConfigurationError`` here,
    before any I/O.
    """
    retrying = RetryingStorage(open_backend(parse_storage_url(url)), retries=retries)
    keys = current_keyring() if keyring == CURRENT_KEYS else keyring
    if isinstance(keys, Keyring):
        return EncryptedStorage(retrying, keys)
    return UnkeyedStorage(retrying)


def __getattr__(name: str) -> Any:
    """Import ``S3Storage`` (and with it boto3) only when someone asks for it."""
    if name == "S3Storage":
        from airflow_rbak.storage.s3 import S3Storage

        return S3Storage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
