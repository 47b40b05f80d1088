"""An encrypted location refuses every object it did not seal for that key, each with the error that says why.

The conformance suite (``test_conformance.py``) runs every backend through the decorator; here the stored bytes are
altered underneath it, on a memory location (the envelope is the same on every backend).
"""

from __future__ import annotations

import uuid

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import StorageError, open_storage
from airflow_rbak.storage.encrypted import (
    MARKER_KEY,
    OVERHEAD,
    DamagedObjectError,
    EncryptionError,
    KeyRequiredError,
    MisplacedObjectError,
    NotEncryptedError,
    UnknownKeyError,
    WrongKeyError,
)
from airflow_rbak.storage.keyring import Keyring, new_key_text, parse_keyring

BODY = b'{"body": "card 4111 1111 1111 1111"}' * 10
K1, K2, OTHER_K1 = new_key_text("k1"), new_key_text("k2"), new_key_text("k1")


@pytest.fixture
def url() -> str:
    return f"memory://encrypted-{uuid.uuid4().hex}"


def _written(url: str, keys: str, key: str = "backups/b1/segment-0.rbak", data: bytes = BODY) -> None:
    open_storage(url, keyring=parse_keyring(keys)).put(key, data)


def _raw(url: str, key: str) -> bytes:
    return open_storage(url, keyring=None).inner.get(key)  # underneath the unkeyed guard: the stored bytes


def _replace_raw(url: str, key: str, data: bytes) -> None:
    open_storage(url, keyring=None).inner.put(key, data)


def test_given_a_sealed_object_then_its_stored_bytes_hold_no_plaintext_and_its_size_is_the_plain_one(url):
    _written(url, K1)

    stored = _raw(url, "backups/b1/segment-0.rbak")
    opened = open_storage(url, keyring=parse_keyring(K1))

    assert b"4111" not in stored and len(stored) == len(BODY) + OVERHEAD
    assert opened.get("backups/b1/segment-0.rbak") == BODY
    assert [(i.key, i.size) for i in opened.list()] == [("backups/b1/segment-0.rbak", len(BODY))]


@pytest.mark.parametrize("position", [0, 7, 20, 60, -20, -1])  # magic, key id, key check, nonce, body, tag
def test_given_a_tampered_byte_when_read_then_refused_naming_the_object(url, position):
    _written(url, K1)
    stored = bytearray(_raw(url, "backups/b1/segment-0.rbak"))
    stored[position] ^= 0x01
    _replace_raw(url, "backups/b1/segment-0.rbak", bytes(stored))

    with pytest.raises(EncryptionError) as caught:
        open_storage(url, keyring=parse_keyring(K1)).get("backups/b1/segment-0.rbak")

    assert caught.value.key == "backups/b1/segment-0.rbak" and "backups/b1/segment-0.rbak" in str(caught.value)
    if position not in (0, 7, 20):  # the magic, the key id and the key check are told apart below
        assert isinstance(caught.value, DamagedObjectError) and "damaged" in str(caught.value)


@pytest.mark.parametrize("keep", [0, 5, 40, OVERHEAD - 1, OVERHEAD + 10, len(BODY) + OVERHEAD - 1])
def test_given_a_truncated_object_when_read_then_damaged_naming_it(url, keep):
    _written(url, K1)
    _replace_raw(url, "backups/b1/segment-0.rbak", _raw(url, "backups/b1/segment-0.rbak")[:keep])

    with pytest.raises(DamagedObjectError, match="backups/b1/segment-0.rbak.*(truncated|altered or truncated)"):
        open_storage(url, keyring=parse_keyring(K1)).get("backups/b1/segment-0.rbak")


def test_given_two_objects_swapped_when_read_then_each_is_refused_as_sealed_for_another(url):
    _written(url, K1, "backups/b1/manifest.json", b'{"queues": ["orders"]}')
    _written(url, K1, "backups/b2/manifest.json", b'{"queues": []}')
    first, second = _raw(url, "backups/b1/manifest.json"), _raw(url, "backups/b2/manifest.json")
    _replace_raw(url, "backups/b1/manifest.json", second)
    _replace_raw(url, "backups/b2/manifest.json", first)

    storage = open_storage(url, keyring=parse_keyring(K1))
    for key in ("backups/b1/manifest.json", "backups/b2/manifest.json"):
        with pytest.raises(MisplacedObjectError, match=f"{key}: damaged: sealed for another object"):
            storage.get(key)


def test_given_a_wrong_key_under_the_same_id_when_read_then_wrong_key_not_damaged(url):
    _written(url, K1)

    with pytest.raises(WrongKeyError, match="wrong key") as caught:
        open_storage(url, keyring=parse_keyring(OTHER_K1)).get("backups/b1/segment-0.rbak")

    assert not isinstance(caught.value, DamagedObjectError) and caught.value.key_id == "k1"


def test_given_a_key_id_the_keyring_lacks_when_read_then_it_names_the_missing_id(url):
    _written(url, K1)

    with pytest.raises(UnknownKeyError, match="sealed with key id 'k1', which the keyring lacks \\(it holds k2\\)"):
        open_storage(url, keyring=parse_keyring(K2)).get("backups/b1/segment-0.rbak")


def test_given_a_rotated_key_then_new_objects_use_it_and_old_ones_read_without_rewriting(url):
    _written(url, K1, "backups/old/manifest.json", b"old")
    old_stored = _raw(url, "backups/old/manifest.json")

    rotated = open_storage(url, keyring=parse_keyring(f"{K2},{K1}"))
    rotated.put("backups/new/manifest.json", b"new")

    assert rotated.get("backups/old/manifest.json") == b"old" and rotated.get("backups/new/manifest.json") == b"new"
    assert _raw(url, "backups/old/manifest.json") == old_stored  # not rewritten
    assert _raw(url, "backups/new/manifest.json")[7 + 2 : 7 + 2 + 2] == b"k2"  # the key id each envelope names
    with pytest.raises(UnknownKeyError, match="key id 'k2'"):
        open_storage(url, keyring=parse_keyring(K1)).get("backups/new/manifest.json")


def test_given_an_encrypted_location_when_read_or_written_without_a_key_then_key_required_not_damaged(url):
    _written(url, K1)
    unkeyed = open_storage(url, keyring=None)

    with pytest.raises(KeyRequiredError, match=f"{url} is an encrypted location .* needs its encryption key"):
        unkeyed.get("backups/b1/segment-0.rbak")
    with pytest.raises(KeyRequiredError):
        unkeyed.put("backups/b2/manifest.json", b"{}")
    # What an unkeyed reader sees: names, sizes (plain + the envelope's overhead) and the marker
    assert [(i.key, i.size) for i in unkeyed.list()] == [("backups/b1/segment-0.rbak", len(BODY) + OVERHEAD),
                                                       (MARKER_KEY, len(_raw(url, MARKER_KEY)))]


def test_given_a_plain_object_planted_in_an_encrypted_location_when_read_then_not_encrypted(url):
    _written(url, K1)
    _replace_raw(url, "backups/b1/checkpoint.json", b'{"resume_after": 999}')

    with pytest.raises(NotEncryptedError, match="backups/b1/checkpoint.json: not encrypted"):
        open_storage(url, keyring=parse_keyring(K1)).get("backups/b1/checkpoint.json")


def test_given_a_plain_location_when_written_with_a_key_then_refused_and_nothing_is_written(url):
    open_storage(url, keyring=None).put("backups/b1/manifest.json", b"{}")

    with pytest.raises(NotEncryptedError, match="holds unencrypted objects .*backups/b1/manifest.json"):
        open_storage(url, keyring=parse_keyring(K1)).put("backups/b2/manifest.json", b"{}")

    assert [i.key for i in open_storage(url, keyring=None).list()] == ["backups/b1/manifest.json"]


def test_every_encryption_error_is_a_storage_error_and_no_message_holds_a_key(url):
    ring = parse_keyring(K1)
    _written(url, K1)
    messages = []
    for keys in (OTHER_K1, K2):
        try:
            open_storage(url, keyring=parse_keyring(keys)).get("backups/b1/segment-0.rbak")
        except StorageError as error:
            messages.append(str(error) + repr(error))
    secret = K1.split(":")[1]
    assert len(messages) == 2 and not any(secret in m for m in messages)
    assert secret not in repr(ring) and secret not in repr(open_storage(url, keyring=ring))


@pytest.mark.parametrize("text, says", [
    ("k1", "id:base64-key"), ("k1:not base64!", "not base64"), ("k1:" + "QUJD", "must be 32 bytes"),
    (f"{K1},{K1}", "listed twice"), ("a/b:" + K1.split(':')[1], "must be 1 to 16"), ("", "at least one key"),
])
def test_given_a_malformed_keyring_then_configuration_error_never_repeating_a_key(text, says):
    with pytest.raises(ConfigurationError, match=says) as caught:
        parse_keyring(text)
    assert K1.split(":")[1] not in str(caught.value)


def test_keyring_round_trips_through_its_text_form():
    ring = parse_keyring(f"{K2},{K1}")

    assert parse_keyring(ring.to_text()) == ring and ring.ids == ("k2", "k1") and isinstance(ring, Keyring)
