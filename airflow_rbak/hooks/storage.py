"""The backup storage's credentials from an Airflow connection: type ``aws``, ``wasb`` or ``google_cloud_platform``.

Read through the hook layer's public ``get_connection``, with the fields the Amazon, Microsoft Azure and Google
providers define (those providers need not be installed). Airflow masks a connection's password in task logs once
it is read this way; the extras that hold secrets here are registered with the masker too. Without a
``storage_conn_id``, each cloud's own chain (environment, profile, role, managed identity) is used.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.credentials import (
    AzureCredentials,
    GcsCredentials,
    S3Credentials,
    StorageCredentials,
    export_credentials,
)

_CONN_TYPES = ("aws", "wasb", "google_cloud_platform")


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
        extra = conn.extra_dejson or {}
        if conn.conn_type == "wasb":
            return _azure(conn.login, conn.password, extra, self.storage_conn_id)
        if conn.conn_type == "google_cloud_platform":
            return _google(extra, self.storage_conn_id)
        if conn.conn_type != "aws":
            raise ConfigurationError(f"storage connection {self.storage_conn_id!r} is of type {conn.conn_type!r}; "
                                     f"use one of: {', '.join(_CONN_TYPES)}")
        return S3Credentials(access_key_id=conn.login or "", secret_access_key=conn.password or "",
                             session_token=extra.get("aws_session_token"), endpoint_url=extra.get("endpoint_url"),
                             region=extra.get("region_name"))


def _extra(extra: dict[str, Any], conn_type: str, name: str) -> Any:
    """An extra as the provider's form stores it: bare, or prefixed ``extra__<type>__`` by older forms."""
    return extra.get(name) or extra.get(f"extra__{conn_type}__{name}")


def _azure(login: str | None, password: str | None, extra: dict[str, Any], conn_id: str) -> AzureCredentials:
    """A ``wasb`` connection: its connection string, else account (login) and key (password), else a SAS token."""
    _mask(extra, "wasb", ("connection_string", "sas_token", "shared_access_key"))
    connection_string = _extra(extra, "wasb", "connection_string")
    if connection_string:
        return AzureCredentials(connection_string=connection_string)
    key = password or _extra(extra, "wasb", "shared_access_key")
    if key:
        return AzureCredentials(account=login or None, account_key=key)
    sas = _extra(extra, "wasb", "sas_token")
    if sas:
        return AzureCredentials(account=login or None, sas_token=sas)
    raise ConfigurationError(f"wasb connection {conn_id!r} holds no connection string, account key or SAS token; "
                             "for a managed identity or service principal leave storage_conn_id unset and install "
                             "azure-identity")


def _google(extra: dict[str, Any], conn_id: str) -> GcsCredentials | None:
    """A ``google_cloud_platform`` connection: its key file's JSON (``keyfile_dict``) or the file ``key_path`` names."""
    _mask(extra, "google_cloud_platform", ("keyfile_dict",))
    keyfile = _extra(extra, "google_cloud_platform", "keyfile_dict")
    if keyfile:
        return GcsCredentials(keyfile if isinstance(keyfile, str) else json.dumps(keyfile))
    path = _extra(extra, "google_cloud_platform", "key_path")
    if not path:
        return None
    try:
        with open(path) as handle:
            content = handle.read()
    except OSError as error:
        raise ConfigurationError(f"google_cloud_platform connection {conn_id!r}: cannot read its key_path "
                                 f"({error.strerror})") from None
    _mask_value(content)
    return GcsCredentials(content)


def _mask(extra: dict[str, Any], conn_type: str, names: tuple[str, ...]) -> None:
    """Register the extras that hold secrets with Airflow's log masker (it masks only the password by itself)."""
    for name in names:
        value = _extra(extra, conn_type, name)
        if value:
            _mask_value(value if isinstance(value, str) else json.dumps(value))


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


def use_storage_connection(storage_conn_id: str | None) -> None:
    """Export the connection's credentials for this task's storage clients and its spark-submit (None: keep the
    environment's)."""
    if storage_conn_id:
        export_credentials(RbakStorageHook(str(storage_conn_id)).get_conn())
