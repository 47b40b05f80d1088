"""The backup storage's credentials from an Airflow connection (type ``aws``, as the Amazon provider defines it).

Read through the hook layer's public ``get_connection``: login = access key id, password = secret access key,
extra ``endpoint_url``, ``region_name`` and ``aws_session_token``. Airflow masks a connection's password in task
logs once it is read this way. Without a ``storage_conn_id``, boto3's own chain (environment, profile, role) is used.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.storage.credentials import S3Credentials, export_credentials


class RbakStorageHook(BaseHook):
    """S3 credentials and endpoint of one Airflow connection."""

    conn_name_attr = "storage_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "RBAK storage (S3)"

    def __init__(self, storage_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> S3Credentials:
        """The connection's credentials (raises ``ConfigurationError`` when it lacks the key pair)."""
        conn = self.get_connection(self.storage_conn_id)
        extra = conn.extra_dejson or {}
        return S3Credentials(access_key_id=conn.login or "", secret_access_key=conn.password or "",
                             session_token=extra.get("aws_session_token"), endpoint_url=extra.get("endpoint_url"),
                             region=extra.get("region_name"))


def use_storage_connection(storage_conn_id: str | None) -> None:
    """Export the connection's credentials for this task's storage clients and its spark-submit (None: keep the
    environment's)."""
    if storage_conn_id:
        export_credentials(RbakStorageHook(str(storage_conn_id)).get_conn())
