"""Retiring an encryption key at a location: what it sealed is pinned, so that afterwards it opens that and nothing more.

Rotation (a new key in front) stops a key sealing through this tool, but whoever holds the old key can still seal an
object the location accepts. Retirement closes that: :func:`retire_key` reads every object sealed with the key,
authenticates it, and writes a record (``_state/retired-keys/{id}.json``, sealed with the current writing key and
bound to the location) holding each one's key and the SHA-256 of its stored envelope. Once the keyring marks the key
retired (``id:base64:retired``), :class:`~airflow_rbak.storage.encrypted.EncryptedStorage` opens an object sealed
with it only when the record pins those exact bytes at that key; the record itself cannot be forged or extended with
the retired key. A location without an identity cannot retire a key (its record could be copied to a location that
shares the keys): copy it with ``rbak copy`` to a new location, which re-seals everything with the current key.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.encrypted import HEADER, EncryptedStorage, EncryptionError, open_sealed, sealed_key_id
from airflow_rbak.storage.encryption_records import MARKER_KEY, retirement_key, retirement_record


@dataclass
class Retirement:
    """What :func:`retire_key` pinned, and each object sealed with the key that failed to open (named, not pinned)."""

    key_id: str
    record: str
    pinned: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        text = f"retired key {self.key_id}: pinned {self.pinned} object(s) in {self.record}"
        return text + (f"; {len(self.refused)} failed to open and are not pinned" if self.refused else "")


def retire_key(storage: EncryptedStorage, key_id: str, *, now_ms: int | None = None) -> Retirement:
    """Pin every object ``key_id`` sealed at ``storage``'s location, in a record sealed with the writing key.

    Refused (``ConfigurationError``, nothing written) for the writing key, a key the keyring lacks, a location without
    an identity, or a key already retired there (its record is never replaced).
    """
    location_id = storage.location_id
    if key_id not in storage.keyring.ids:
        raise ConfigurationError(f"cannot retire key {key_id!r}: the keyring lacks it (it holds "
                                 f"{', '.join(storage.keyring.ids)})")
    if key_id == storage.keyring.writer[0]:
        raise ConfigurationError(f"cannot retire key {key_id!r}: it is the writing key; put the new key in front first")
    if location_id is None:
        raise ConfigurationError(f"cannot retire key {key_id!r} at {storage.url}: the location has no identity (its "
                                 "marker predates them); rbak copy its backups to a new encrypted location, which "
                                 "re-seals them with the writing key, and drop the old key with the old location")
    record = retirement_key(key_id)
    done = Retirement(key_id, record)
    pins: dict[str, str] = {}
    for info in storage.inner.list():
        if info.key == MARKER_KEY or sealed_key_id(storage.inner.get_range(info.key, 0, HEADER)) != key_id:
            continue
        try:
            data = storage.inner.get(info.key)
            open_sealed(storage.keyring, info.key, data, location_id, storage.url)
        except EncryptionError as exc:  # damaged or planted: never pinned, and the rest are pinned still
            done.refused[info.key] = str(exc)
            continue
        pins[info.key] = hashlib.sha256(data).hexdigest()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if not storage.put_if_absent(record, retirement_record(key_id, location_id, now_ms, pins)):
        raise ConfigurationError(f"key {key_id!r} is already retired at {storage.url} ({record}); its record is kept")
    done.pinned = len(pins)
    return done
