"""Sealed state: an object opens only under the key that sealed it, at the key it was sealed for, for its purpose."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from airflow_rbak.codec.bounded_json import JsonLimits
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.settings import RbakSettings
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import (
    KEY_FILE_NAME,
    StateSeal,
    UntrustedStateError,
    default_seal,
    resolve_state_key,
)

SEAL = StateSeal(b"k" * 32)
BODY = {"next_ordinal": 7, "completed": False, "names": ["orders", "é"]}


def reason(action) -> str:
    with pytest.raises(UntrustedStateError) as refused:
        action()
    return refused.value.reason


def test_a_sealed_body_opens_as_it_was_written_in_every_location(location):
    storage = open_storage(location)

    SEAL.write(storage, "restore-progress", "b1/state/p.json", BODY)

    assert SEAL.read(storage, "restore-progress", "b1/state/p.json") == BODY
    assert SEAL.read(storage, "restore-progress", "b1/state/absent.json") is None


def test_an_edited_body_fails_its_mac():
    envelope = json.loads(SEAL.seal("restore-progress", "a.json", BODY))
    envelope["body"]["next_ordinal"] = 10**6

    assert reason(lambda: SEAL.open("restore-progress", "a.json", json.dumps(envelope).encode())).startswith("bad MAC")


def test_a_second_body_key_cannot_smuggle_another_body():
    sealed = SEAL.seal("restore-progress", "a.json", BODY).decode()
    doubled = sealed[:-1] + ', "body": {"next_ordinal": 999999, "completed": true}}'

    assert "names the key 'body' more than once" in reason(lambda: SEAL.open("restore-progress", "a.json", doubled.encode()))


def test_an_object_copied_to_another_key_or_read_for_another_purpose_fails(location):
    storage = open_storage(location)
    SEAL.write(storage, "restore-progress", "b1/state/a/progress.json", BODY)
    storage.put("b1/state/b/progress.json", storage.get("b1/state/a/progress.json"))

    moved = reason(lambda: SEAL.read(storage, "restore-progress", "b1/state/b/progress.json"))
    other_purpose = reason(lambda: SEAL.read(storage, "capture-progress", "b1/state/a/progress.json"))

    assert moved.startswith("sealed for another key ('b1/state/a/progress.json')")
    assert other_purpose.startswith("sealed for another purpose ('restore-progress')")


def test_an_object_sealed_with_another_key_fails():
    other = StateSeal(b"o" * 32).seal("restore-progress", "a.json", BODY)

    assert reason(lambda: SEAL.open("restore-progress", "a.json", other)).startswith("bad MAC")


@pytest.mark.parametrize(("data", "expected"), [
    (b"not json at all", "not JSON"),
    (b'{"next_ordinal": NaN}', "not JSON"),
    (json.dumps(BODY).encode(), "no seal"),  # what an older version wrote, or a planted plain object
    (b"[1, 2, 3]", "no seal"),
])
def test_unparseable_or_unsealed_objects_fail_naming_why(data, expected):
    with pytest.raises(UntrustedStateError) as refused:
        SEAL.open("restore-progress", "b1/x.json", data)

    assert refused.value.reason.startswith(expected)
    assert refused.value.key == "b1/x.json" and str(refused.value).startswith("b1/x.json is not trusted state: ")
    assert isinstance(refused.value, RbakError)


def test_an_object_over_the_byte_cap_is_refused_before_it_is_read_and_one_over_the_value_cap_before_it_is_parsed(
        location):
    storage = open_storage(location)
    storage.put("b1/big.json", b"[" + b"{}," * 400_000 + b"{}]")
    small = JsonLimits(max_bytes=1024, max_values=100, what="a state object")

    over_bytes = reason(lambda: SEAL.read(storage, "restore-progress", "b1/big.json", small))
    over_values = reason(lambda: SEAL.read(storage, "restore-progress", "b1/big.json"))

    assert over_bytes == f"{storage.stat('b1/big.json').size} bytes, over the 1024 bytes a state object may hold; not read"
    assert over_values.startswith("not JSON within its caps") and "JSON values, over the 200000" in over_values


def test_the_key_never_shows():
    key = b"very-secret-state-key-0123456789"

    assert key.decode() not in repr(StateSeal(key)) + str(SEAL.seal("p", "k", {}))


def test_key_resolution_prefers_state_key_then_fernet_key_then_the_key_file(tmp_path):
    key_file = tmp_path / KEY_FILE_NAME

    assert resolve_state_key("s" * 40, "fernet", key_file) == b"s" * 40
    derived = resolve_state_key(None, "fernet-new,fernet-old", key_file)
    assert derived == resolve_state_key("", "fernet-new", key_file) != resolve_state_key(None, "fernet-old", key_file)
    assert not key_file.exists()
    with pytest.raises(ConfigurationError, match="at least 32 characters"):
        resolve_state_key("short", None, key_file)


def test_the_key_file_is_created_once_private_and_then_reused(tmp_path):
    key_file = tmp_path / "home" / KEY_FILE_NAME

    first = resolve_state_key(None, None, key_file)
    second = resolve_state_key(None, "", key_file)

    assert first == second and len(first) == 64
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600


def test_settings_and_the_default_seal_resolve_the_same_key(tmp_path):
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__FERNET_KEY": "a-fernet-key"}
    from_settings = RbakSettings(lambda option: None, environ={}).state_seal("a-fernet-key")
    sealed = from_settings.seal("p", "k.json", BODY)

    assert default_seal(env).open("p", "k.json", sealed) == BODY
    assert not Path(tmp_path, KEY_FILE_NAME).exists()
