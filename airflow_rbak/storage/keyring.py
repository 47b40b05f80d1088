"""The encryption keys of a location: several keys by id, the first one writes, every one reads.

Rotation adds a key in front (``k2:...,k1:...``): new objects are sealed with ``k2``, objects sealed with ``k1`` stay
readable as long as ``k1`` is listed, and nothing is rewritten. Rotation is not revocation: ``k1`` still opens (and
could seal) anything. **Retiring** it does that (``k2:...,k1:...:retired``, after ``rbak keys retire``): a retired
key opens only the objects its retirement record pinned (``storage/key_retirement.py``) and never seals. The text
form is the one a connection's password holds (``hooks/encryption.py``) and the ``RBAK_ENCRYPTION_KEYS`` variable
holds (the ``rbak`` command without Airflow, Spark executors): ``id:base64-key`` entries separated by commas, each key
32 random bytes (AES-256), a retired one's followed by ``:retired``.

As with storage credentials (``storage/credentials.py``), the Airflow face resolves the keys and hands them in for as
long as a task runs (:func:`use_keyring`); every storage the process opens meanwhile is encrypted with them. Nothing
here logs a key, and keys are left out of every ``repr`` and error.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from airflow_rbak.exceptions import ConfigurationError

#: The variable the keys are handed on in (to Spark executors; for ``rbak`` without Airflow).
KEYRING_ENV = "RBAK_ENCRYPTION_KEYS"
KEY_BYTES = 32
#: A key id: what the envelope stores in its 16-byte field, so a user can name keys (``2026-11``, ``prod-a``).
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,16}")
_CHECK_LABEL = b"rbak encryption key check v1"
#: What follows a retired key's entry in the text form.
RETIRED_SUFFIX = ":retired"


@dataclass(frozen=True)
class Keyring:
    """Keys by id, newest first: the first seals, any of them opens (a retired one only what its record pinned)."""

    keys: tuple[tuple[str, bytes], ...] = field(repr=False)
    #: The ids of retired keys (``id:base64:retired``): never the writing key.
    retired: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigurationError("an encryption keyring needs at least one key")
        seen: set[str] = set()
        for key_id, key in self.keys:
            if not KEY_ID_PATTERN.fullmatch(key_id):
                raise ConfigurationError(f"encryption key id {key_id[:40]!r} must be 1 to 16 of A-Z a-z 0-9 . _ -")
            if key_id in seen:
                raise ConfigurationError(f"encryption key id {key_id!r} is listed twice")
            if len(key) != KEY_BYTES:
                raise ConfigurationError(f"encryption key {key_id!r} must be {KEY_BYTES} bytes (base64 of 32 random "
                                         f"bytes), not {len(key)}")
            seen.add(key_id)
        if self.keys[0][0] in self.retired:
            raise ConfigurationError(f"encryption key {self.keys[0][0]!r} writes (it is listed first), so it cannot be "
                                     "retired: put the new key in front")
        if unknown := sorted(self.retired - seen):
            raise ConfigurationError(f"retired encryption key id(s) {', '.join(unknown)} not in the keyring")

    def __repr__(self) -> str:
        retired = f", retired={sorted(self.retired)!r}" if self.retired else ""
        return f"Keyring(ids={self.ids!r}{retired}, keys=<hidden>)"

    @property
    def ids(self) -> tuple[str, ...]:
        """The key ids, the writing one first (not secret: they are stored in every envelope)."""
        return tuple(key_id for key_id, _ in self.keys)

    @property
    def writer(self) -> tuple[str, bytes]:
        """The id and key new objects are sealed with."""
        return self.keys[0]

    def key(self, key_id: str) -> bytes | None:
        """The key with this id; None when the keyring lacks it."""
        return next((key for kid, key in self.keys if kid == key_id), None)

    def to_text(self) -> str:
        """The ``id:base64`` form :func:`parse_keyring` reads (secret: never log it)."""
        return ",".join(f"{kid}:{base64.b64encode(key).decode()}{RETIRED_SUFFIX if kid in self.retired else ''}"
                        for kid, key in self.keys)

    def environment(self) -> dict[str, str]:
        """The variable that hands these keys on (secret: never log it)."""
        return {KEYRING_ENV: self.to_text()}


def key_check(key: bytes) -> bytes:
    """Eight bytes that tell one key from another without revealing it (stored in each envelope): so a wrong key
    is told from a damaged object."""
    return hmac.new(key, _CHECK_LABEL, hashlib.sha256).digest()[:8]


def parse_keyring(text: str, source: str = KEYRING_ENV) -> Keyring:
    """The keyring ``text`` holds: ``id:base64-key`` entries, comma-separated, the writing key first, a retired
    key's entry ending ``:retired``.

    ``source`` names where the text came from in errors, which never repeat a key.
    """
    keys, retired = [], set()
    for entry in filter(None, (e.strip() for e in text.split(","))):
        if entry.endswith(RETIRED_SUFFIX):
            entry = entry[: -len(RETIRED_SUFFIX)]
            retired.add(entry.partition(":")[0].strip())
        key_id, sep, encoded = entry.partition(":")
        if not sep:
            raise ConfigurationError(f"{source}: each encryption key is written id:base64-key")
        try:
            key = base64.b64decode(encoded.strip().replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{source}: encryption key {key_id.strip()[:40]!r} is not base64") from None
        keys.append((key_id.strip(), key))
    try:
        return Keyring(tuple(keys), frozenset(retired))
    except ConfigurationError as error:
        raise ConfigurationError(f"{source}: {error}") from None


def new_key_text(key_id: str) -> str:
    """A fresh ``id:base64`` entry of 32 random bytes, for a connection's password or ``RBAK_ENCRYPTION_KEYS``."""
    return Keyring(((key_id, os.urandom(KEY_BYTES)),)).to_text()


_current: Keyring | None = None
_current_lock = threading.Lock()


def use_keyring(keyring: Keyring | None) -> Keyring | None:
    """Hand ``keyring`` in until the next call (None: only ``RBAK_ENCRYPTION_KEYS``); return the one it replaces."""
    global _current
    with _current_lock:
        previous, _current = _current, keyring
    return previous


@contextlib.contextmanager
def storage_keyring(keyring: Keyring | None) -> Iterator[None]:
    """Every storage this process opens inside the block is encrypted with ``keyring`` (process-wide, as a task's
    helper threads open storage too); the previous keyring is back when the block ends."""
    previous = use_keyring(keyring)
    try:
        yield
    finally:
        use_keyring(previous)


def current_keyring(environ: Mapping[str, str] | None = None) -> Keyring | None:
    """The keyring handed in (:func:`use_keyring`), else the one ``RBAK_ENCRYPTION_KEYS`` holds, else None."""
    if _current is not None:
        return _current
    text = (os.environ if environ is None else environ).get(KEYRING_ENV, "")
    return parse_keyring(text) if text.strip() else None
