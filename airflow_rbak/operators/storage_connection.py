"""What every operator that touches the backup storage shares: its credentials from ``storage_conn_id``."""

from __future__ import annotations

from typing import Any

from airflow_rbak.dag_defaults import default_storage_conn_id
from airflow_rbak.hooks.storage import use_storage_connection


class StorageConnectionMixin:
    """Before ``execute``, export the ``storage_conn_id`` connection's S3 credentials to the task's process.

    The task's storage clients and the ``spark-submit`` it starts (an inherited environment, never a command-line
    argument) then use them. ``None`` (``$RBAK_STORAGE_CONN_ID`` unset): the environment's own credentials.
    """

    def __init__(self, *, storage_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id if storage_conn_id is not None else default_storage_conn_id()

    def pre_execute(self, context: Any) -> None:
        use_storage_connection(self.storage_conn_id)
        super().pre_execute(context)  # type: ignore[misc]
