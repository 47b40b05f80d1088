"""RbakEncryptionHook: a connection's password (AIRFLOW_CONN_* JSON) becomes the location's keyring; an operator hands
it to the task's storage from pre_execute to post_execute, and its errors never repeat a key."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.hooks.encryption import connection_keyring, encryption_connection
from airflow_rbak.storage import EncryptedStorage, open_storage
from airflow_rbak.storage.keyring import current_keyring, new_key_text

KEYS = f"{new_key_text('k2')},{new_key_text('k1')}"


def _connection(monkeypatch, **fields) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_RBAK_KEYS", json.dumps({"conn_type": "generic", **fields}))


def test_a_connection_password_gives_the_keyring_the_first_key_writing(monkeypatch):
    _connection(monkeypatch, password=KEYS)

    ring = connection_keyring("rbak_keys")

    assert ring is not None and ring.ids == ("k2", "k1") and ring.to_text() == KEYS
    assert connection_keyring(None) is None


def test_a_key_marked_retired_in_the_password_is_retired_in_the_keyring_and_handed_on_so(monkeypatch):
    _connection(monkeypatch, password=f"{KEYS}:retired")

    ring = connection_keyring("rbak_keys")

    assert ring is not None and ring.retired == {"k1"} and ring.writer[0] == "k2"
    assert ring.to_text() == f"{KEYS}:retired" and "retired=['k1']" in repr(ring)  # what Spark executors receive


@pytest.mark.parametrize("password, says", [(None, "has no password"), ("k1:QUJD", "must be 32 bytes"),
                                            (f"{KEYS.split(',')[0]}:retired", "cannot be retired")])
def test_a_connection_without_usable_keys_names_itself_and_no_key(monkeypatch, password, says):
    _connection(monkeypatch, **({"password": password} if password else {}))

    with pytest.raises(ConfigurationError, match=f"encryption connection 'rbak_keys'.*{says}|{says}"):
        connection_keyring("rbak_keys")


def test_inside_the_block_every_storage_opened_is_encrypted_and_after_it_none(monkeypatch):
    _connection(monkeypatch, password=KEYS)
    monkeypatch.delenv("RBAK_ENCRYPTION_KEYS", raising=False)

    with encryption_connection("rbak_keys"):
        inside = open_storage("memory://hooks-encryption")
    after = open_storage("memory://hooks-encryption-2")

    assert isinstance(inside, EncryptedStorage) and not isinstance(after, EncryptedStorage)
    assert current_keyring() is None
