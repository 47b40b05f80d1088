"""The backup storage's credentials from an Airflow connection of a type a storage backend reads (``aws``, ``wasb``,
``google_cloud_platform``).

An ``aws`` connection goes through the Amazon provider's ``AwsBaseHook`` (the ``amazon`` extra), so it means here
what it means to every Airflow user: keys, ``role_arn`` (assumed on top of the worker's own identity), a profile,
web identity (IRSA), ``region_name`` and ``endpoint_url``; its boto3 session (which renews an assumed role's
credentials) goes to the S3 backend. Any other type is read by the backend that registered it
(``storage/registry.py``; ``wasb`` and ``google_cloud_platform``, with the fields their providers define, which need
not be installed), from the hook layer's public ``get_connection``.
Airflow masks a connection's password in task logs once it is read this way; the extras that hold secrets here are
registered with the masker too. The credentials are handed to the storage layer for the task's duration
(:func:`storage_connection`), never exported to the process's environment. Without a ``storage_conn_id``, each
cloud's own chain (environment, profile, role, managed identity) is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import CURRENT_KEYS, DEFAULT_RETRIES, Keyring, Storage, open_storage
from airflow_rbak.storage.backend import ConnectionFields
from airflow_rbak.storage.credentials import S3Session, StorageCredentials, storage_credentials
from airflow_rbak.storage.registry import backend_for_connection, backends


def _conn_types() -> tuple[str, ...]:
    """Every connection type a registered backend reads."""
    return tuple(t for backend in backends() for t in backend.connection_types)


class RbakStorageHook(BaseHook):
    """Storage credentials (and, for S3, endpoint and region) of one Airflow connection."""

    conn_name_attr = "storage_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "RBAK storage (S3, Azure Blob Storage, GCS)"

    def __init__(self, storage_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> StorageCredentials | None:
        """The connection's credentials; None for a Google connection without a key (application defaults).

        Raises ``ConfigurationError`` when the connection is of another type or lacks what its type needs.
        """
        conn = self.get_connection(self.storage_conn_id)
        conn_type = conn.conn_type or ""
        backend = backend_for_connection(conn_type)
        if backend is None:
            raise ConfigurationError(f"storage connection {self.storage_conn_id!r} is of type {conn_type!r}; "
                                     f"use one of: {', '.join(_conn_types())}")
        if backend.from_connection is None:  # a type an Airflow provider defines: read through that provider's hook
            return aws_session(self.storage_conn_id)
        fields = ConnectionFields(self.storage_conn_id, conn_type, conn.login, conn.password,
                                  conn.extra_dejson or {}, _mask_value)
        credentials: StorageCredentials | None = backend.from_connection(fields)
        return credentials


def aws_session(conn_id: str) -> S3Session:
    """The ``aws`` connection's boto3 session from the Amazon provider's hook, with its S3 endpoint and region."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        raise ConfigurationError(f"storage connection {conn_id!r} is of type aws, which needs the Amazon provider: "
                                 "pip install 'airflow-rbak[amazon]'") from None
    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    session = hook.get_session()
    return S3Session(session, endpoint_url=hook.conn_config.get_service_endpoint_url("s3"),
                     region=hook.conn_region_name or session.region_name)


def _mask_value(value: str) -> None:
    """Mask the value, and each secret inside it when it is a key file (a log line may show its private key alone)."""
    from airflow.sdk.log import mask_secret

    mask_secret(value)
    try:
        parsed = json.loads(value)
    except ValueError:
        return
    if isinstance(parsed, dict):
        mask_secret(parsed)


def connection_credentials(storage_conn_id: str | None) -> StorageCredentials | None:
    """The connection's credentials; None for no connection (each cloud's own chain)."""
    return RbakStorageHook(str(storage_conn_id)).get_conn() if storage_conn_id else None


@contextmanager
def storage_connection(storage_conn_id: str | None) -> Iterator[None]:
    """Inside the block, every storage this process opens (and each Spark job it submits) uses the connection's
    credentials; None: each cloud's own chain. The process's environment is left as it is."""
    with storage_credentials(connection_credentials(storage_conn_id)):
        yield


def open_connected_storage(url: str, storage_conn_id: str | None, *, retries: int = DEFAULT_RETRIES,
                           keyring: Keyring | None | str = CURRENT_KEYS) -> Storage:
    """The storage at ``url`` with the connection's credentials (None: each cloud's own chain), for code that runs
    outside an rbak operator (a DAG's own ``@task``, the backups view). Its clients are made here, so they keep the
    credentials after the block that handed them in has ended; ``keyring`` as :func:`open_storage` takes it."""
    with storage_connection(storage_conn_id):
        return open_storage(url, retries=retries, keyring=keyring)
