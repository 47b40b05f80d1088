"""``rbak`` on an encrypted location: the commands read it with its keys, say plainly when they have none, and
``rbak export --decrypt`` writes a plain copy that a reader written from the format alone reads."""

from __future__ import annotations

import json
import os
import subprocess

from airflow_rbak.storage import open_storage
from airflow_rbak.storage.keyring import KEYRING_ENV, new_key_text, parse_keyring
from tests.cli.test_cli import RBAK
from tests.codec.independent_reader import read_segment
from tests.repository.sample import build_sample_backup

KEYS = new_key_text("k1")


def rbak_keyed(*args: str, keys: str | None = KEYS) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != KEYRING_ENV}
    if keys is not None:
        env[KEYRING_ENV] = keys
    return subprocess.run([*RBAK, *args], capture_output=True, text=True, timeout=120, env=env)


def test_an_encrypted_location_validates_with_its_key_and_says_it_needs_one_without(tmp_path):
    location = (tmp_path / "encrypted").as_uri()
    build_sample_backup(open_storage(location, keyring=parse_keyring(KEYS)))

    keyed = rbak_keyed("validate", "--path", location, "--backup-id", "sample-1", "--deep")
    unkeyed = rbak_keyed("validate", "--path", location, "--backup-id", "latest", keys=None)
    wrong = rbak_keyed("validate", "--path", location, "--backup-id", "sample-1", keys=new_key_text("k2"))

    assert keyed.returncode == 0, keyed.stderr
    assert unkeyed.returncode == 2 and "is an encrypted location" in unkeyed.stderr and "needs its encryption key" \
        in unkeyed.stderr
    assert wrong.returncode == 2 and "wrong key: sealed with key id 'k1', which the keyring lacks" in wrong.stderr


def test_export_decrypt_writes_a_plain_copy_any_rbak_reader_reads_and_names_a_damaged_object(tmp_path):
    # Given an encrypted backup, one of whose segments has been altered underneath the decorator
    location = (tmp_path / "encrypted").as_uri()
    encrypted = open_storage(location, keyring=parse_keyring(KEYS))
    manifest = build_sample_backup(encrypted)
    keys = sorted(i.key for i in encrypted.list())
    segments = [k for k in keys if "/segment-" in k]
    damaged = segments[0]
    raw = bytearray(open_storage(location, keyring=None).inner.get(damaged))
    raw[-1] ^= 1
    open_storage(location, keyring=None).inner.put(damaged, bytes(raw))
    target = (tmp_path / "plain").as_uri()

    # When it is exported decrypted
    done = rbak_keyed("--format", "json", "export", "--decrypt", "--path", location, "--to", target)

    # Then every other object is copied as plain RBAK bytes, and the damaged one is named, not copied
    result = json.loads(done.stdout)
    plain = open_storage(target, keyring=None)
    assert done.returncode == 1, done.stderr
    assert list(result["refused"]) == [damaged] and "damaged" in result["refused"][damaged]
    assert sorted(i.key for i in plain.list()) == [k for k in keys if k != damaged]
    records = sum(len(read_segment(plain.get(k))[1]) for k in segments[1:])
    assert records > 0 and manifest.total_segments == len(segments)
    assert json.loads(plain.get(f"{manifest.backup_id}/manifest.json"))["backup_id"] == "sample-1"
