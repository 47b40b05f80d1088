"""What every operator that touches the backup storage shares: its credentials from ``storage_conn_id``, its
encryption keys from ``encryption_conn_id``."""

from __future__ import annotations

from typing import Any

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.hooks.encryption import connection_keyring
from airflow_rbak.hooks.storage import connection_credentials
from airflow_rbak.operators.access import refuse_unlisted_params
from airflow_rbak.storage.credentials import use_credentials
from airflow_rbak.storage.keyring import use_keyring


class StorageConnectionMixin:
    """While the task runs (``pre_execute`` to ``post_execute``), its storage uses the ``storage_conn_id`` connection.

    The task's storage clients and the Spark jobs it submits (in a private properties file, never a command line)
    take the connection's credentials; the task process's environment is left as it is. ``None`` (``[rbak]
    storage_conn_id`` unset): each cloud's own chain. Each task hands in its own, so a task that failed before
    ``post_execute`` leaves nothing another task would use. Before that, a run whose params name a location or
    connection the ``[rbak]`` allowlists leave out fails (:func:`refuse_unlisted_params`). The same way, the
    ``encryption_conn_id`` connection's keys (else ``[rbak] encryption_conn_id``'s; unset: a plain location) seal
    every object the task and its Spark jobs store and open every object they read (``storage/encrypted.py``).
    """

    def __init__(self, *, storage_conn_id: str | None = None, encryption_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id
        self.encryption_conn_id = encryption_conn_id

    def pre_execute(self, context: Any) -> None:
        refuse_unlisted_params(context.get("params"))  # before any credentials or I/O (docs/security.md)
        conn_id = self.storage_conn_id if self.storage_conn_id is not None else rbak_settings().storage_conn_id()
        use_credentials(connection_credentials(conn_id))
        keys_id = self.encryption_conn_id if self.encryption_conn_id is not None else rbak_settings().encryption_conn_id()
        use_keyring(connection_keyring(keys_id))
        super().pre_execute(context)  # type: ignore[misc]

    def post_execute(self, context: Any, result: Any = None) -> None:
        use_credentials(None)
        use_keyring(None)
        super().post_execute(context, result)  # type: ignore[misc]
