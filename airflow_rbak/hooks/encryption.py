"""A location's encryption keys from an Airflow connection (or a secrets backend through it).

The connection (any type; ``generic`` is the usual one) holds the keyring in its password: ``id:base64-key``
entries, comma-separated, the writing key first (``storage/keyring.py``). Airflow masks a connection's password in
task logs once it is read; the keys are handed to the storage layer for the task's duration
(:func:`encryption_connection`), to Spark jobs in the private properties file the storage credentials travel in, and
never to XCom, a report or a command line. A KMS data key is not supported yet: keep the keyring in a secrets
backend (Vault, AWS Secrets Manager, ...) behind the connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.keyring import Keyring, parse_keyring, storage_keyring


class RbakEncryptionHook(BaseHook):
    """The encryption keyring one Airflow connection's password holds."""

    conn_name_attr = "encryption_conn_id"
    default_conn_name = "rbak_encryption"
    conn_type = "generic"
    hook_name = "RBAK encryption keys"

    def __init__(self, encryption_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.encryption_conn_id = encryption_conn_id

    def get_conn(self) -> Keyring:
        """The connection's keyring; ``ConfigurationError`` (naming the connection, never a key) when it has none."""
        conn = self.get_connection(self.encryption_conn_id)
        if not conn.password:
            raise ConfigurationError(f"encryption connection {self.encryption_conn_id!r} has no password: it must "
                                     "hold the keys as id:base64-key, comma-separated, the writing key first")
        return parse_keyring(conn.password, f"encryption connection {self.encryption_conn_id!r}")


def connection_keyring(encryption_conn_id: str | None) -> Keyring | None:
    """The connection's keyring; None for no connection (the location is not encrypted)."""
    return RbakEncryptionHook(str(encryption_conn_id)).get_conn() if encryption_conn_id else None


@contextmanager
def encryption_connection(encryption_conn_id: str | None) -> Iterator[None]:
    """Inside the block, every storage this process opens (and each Spark job it submits) is encrypted with the
    connection's keys; None: only ``RBAK_ENCRYPTION_KEYS``, if set."""
    with storage_keyring(connection_keyring(encryption_conn_id)):
        yield
