"""Encryption at rest as a storage decorator, as restic wraps its backends: every object sealed with AES-256-GCM.

Each object of an encrypted location is one envelope (byte layout: docs/format.md, "Encrypted locations")::

    magic "RBAKENC" | version 1 | cipher 1 (AES-256-GCM) | key id (16, NUL-padded) | key check (8)
    | object digest (8) | nonce (12) | ciphertext | tag (16)

The associated data is the header and the object's storage key, so an object moved or copied to another key fails
like an edited one. The key check (:func:`~airflow_rbak.storage.keyring.key_check`) tells a wrong key from damage; the
object digest (8 bytes of the storage key's SHA-256) tells a swapped object from an edited one. Neither is trusted:
only the tag is, and any failure is refused. The RBAK bytes inside are exactly those of a plain location.

What an unkeyed reader sees: the object names, their sizes (each plain size plus :data:`OVERHEAD`), their times, the key
id each object was sealed with, and the marker object :data:`MARKER_KEY`. A location is encrypted or not: the first
keyed write marks an empty location, a keyed writer refuses a location holding plain objects, and an unkeyed writer
refuses a marked one (:class:`UnkeyedStorage`), each with a typed error naming the location.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from airflow_rbak.storage.atomic import atomic_write
from airflow_rbak.storage.base import (
    ForwardsImmutability,
    ObjectInfo,
    ObjectNotFoundError,
    Storage,
    StorageError,
    check_range,
)
from airflow_rbak.storage.keyring import Keyring, key_check

MAGIC = b"RBAKENC"
VERSION = 1
CIPHER_AES_256_GCM = 1
_ID, _CHECK, _DIGEST, _NONCE, TAG = 16, 8, 8, 12, 16
HEADER = len(MAGIC) + 2 + _ID + _CHECK + _DIGEST + _NONCE
#: Bytes an envelope adds to the object it seals.
OVERHEAD = HEADER + TAG
#: The plain marker object at the root of an encrypted location (hidden from keyed listings).
MARKER_KEY = "rbak-encryption.json"
MARKER = json.dumps({"format": "rbak-encryption-v1", "cipher": "AES-256-GCM",
                     "note": "every other object here is sealed; see docs/operations.md, Encryption at rest"},
                    sort_keys=True).encode()


class EncryptionError(StorageError):
    """An object of an encrypted location cannot be opened or written; ``key`` names it (or the marker)."""


class DamagedObjectError(EncryptionError):
    """The object fails authentication: altered or truncated (the key is right). Final: reading again will not help."""


class MisplacedObjectError(DamagedObjectError):
    """The object was sealed for another storage key: swapped or copied in from elsewhere."""


class WrongKeyError(EncryptionError):
    """The object was sealed with a key this keyring does not hold under that id; ``key_id`` names it."""

    def __init__(self, message: str, key: str, key_id: str) -> None:
        super().__init__(message, key)
        self.key_id = key_id


class UnknownKeyError(WrongKeyError):
    """The object's key id is not in the keyring at all (a key dropped too early after a rotation, or another
    location's)."""


class NotEncryptedError(EncryptionError):
    """A plain object in a location opened with a key: the location is not encrypted, or the object was planted."""


class KeyRequiredError(EncryptionError):
    """An encrypted location opened without a key: says so rather than reporting the sealed bytes as damaged."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()[:_DIGEST]


def _aead(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only encrypted locations need cryptography

    return AESGCM(key)


def seal(keyring: Keyring, key: str, data: bytes) -> bytes:
    """The envelope of ``data`` for the storage key ``key``, sealed with the keyring's writing key."""
    key_id, secret = keyring.writer
    header = (MAGIC + bytes((VERSION, CIPHER_AES_256_GCM)) + key_id.encode().ljust(_ID, b"\0") + key_check(secret)
              + _digest(key) + os.urandom(_NONCE))
    return header + _aead(secret).encrypt(header[-_NONCE:], bytes(data), header + key.encode())


def is_sealed(data: bytes) -> bool:
    """Whether ``data`` starts as an envelope does (a hint for unkeyed readers, not a check)."""
    return bytes(data[: len(MAGIC)]) == MAGIC


def open_sealed(keyring: Keyring, key: str, data: bytes) -> bytes:
    """The plain bytes of the envelope stored at ``key``; a typed :class:`EncryptionError` naming it otherwise."""
    if not is_sealed(data):
        if len(data) < len(MAGIC) and MAGIC.startswith(bytes(data)):
            raise DamagedObjectError(f"{key}: truncated ({len(data)} bytes, shorter than an envelope's header)", key)
        raise NotEncryptedError(f"{key}: not encrypted, but its location is opened with an encryption key (a plain "
                                "location, or an object planted in an encrypted one); not read", key)
    if len(data) < OVERHEAD:
        raise DamagedObjectError(f"{key}: truncated ({len(data)} bytes, shorter than an envelope)", key)
    version, cipher = data[len(MAGIC)], data[len(MAGIC) + 1]
    if version != VERSION or cipher != CIPHER_AES_256_GCM:
        raise DamagedObjectError(f"{key}: envelope version {version}, cipher {cipher} unknown to this reader "
                                 "(damaged, or written by a newer airflow-rbak)", key)
    at = len(MAGIC) + 2
    key_id = bytes(data[at : at + _ID]).rstrip(b"\0").decode("ascii", "replace")
    check, digest = bytes(data[at + _ID : at + _ID + _CHECK]), bytes(data[at + _ID + _CHECK : HEADER - _NONCE])
    secret = keyring.key(key_id)
    if secret is None:
        raise UnknownKeyError(f"{key}: wrong key: sealed with key id {key_id!r}, which the keyring lacks (it holds "
                              f"{', '.join(keyring.ids)}); add that key to read it", key, key_id)
    if key_check(secret) != check:
        raise WrongKeyError(f"{key}: wrong key: sealed with another key named {key_id!r} than the keyring's", key, key_id)
    if digest != _digest(key):
        raise MisplacedObjectError(f"{key}: damaged: sealed for another object (swapped or copied here); not read", key)
    return _authenticated(secret, key, data)


def _authenticated(secret: bytes, key: str, data: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag

    header = bytes(data[:HEADER])
    try:  # the ciphertext as a view: a segment is not copied before it is decrypted
        with memoryview(data) as view:
            return _aead(secret).decrypt(header[-_NONCE:], view[HEADER:], header + key.encode())
    except InvalidTag:
        raise DamagedObjectError(f"{key}: damaged: fails authentication (altered or truncated); not read",
                                 key) from None


class EncryptedStorage(ForwardsImmutability):
    """Wrap a backend so every object is sealed on the way in and authenticated on the way out.

    Sizes from ``stat`` and ``list`` are the plain sizes (stored minus :data:`OVERHEAD`), so readers that cap an
    object by its size work unchanged. Ranged reads fetch and open the whole object (an envelope is authenticated
    whole); the project's ranged reads are bounded whole reads of small objects.
    """

    def __init__(self, inner: Storage, keyring: Keyring) -> None:
        self.inner = inner
        self.url = inner.url
        self.keyring = keyring
        self._marked = False
        self._marking = threading.Lock()

    def __repr__(self) -> str:
        return f"EncryptedStorage({self.inner!r}, key ids={self.keyring.ids!r})"

    def check_location(self) -> None:
        """Check the location exists."""
        self.inner.check_location()

    def _mark(self) -> None:
        """Before the first write: mark an empty location encrypted; refuse one holding plain objects."""
        with self._marking:
            if self._marked or self.inner.exists(MARKER_KEY):
                self._marked = True
                return
            plain = next((i.key for i in self.inner.list() if i.key != MARKER_KEY), None)
            if plain is not None:
                raise NotEncryptedError(f"{self.url} holds unencrypted objects ({plain}, ...): a location is encrypted "
                                        "from its first object or never; write encrypted backups to a new location "
                                        "(rbak export copies a location)", plain)
            self.inner.put_if_absent(MARKER_KEY, MARKER)
            self._marked = True

    def put(self, key: str, data: bytes) -> None:
        """Seal and store."""
        self._mark()
        self.inner.put(key, seal(self.keyring, key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Seal and create only if absent."""
        self._mark()
        return self.inner.put_if_absent(key, seal(self.keyring, key, data))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Seal a local file (read whole: an envelope is sealed whole) and store it."""
        with open(path, "rb") as source:
            self.put(key, source.read())

    def get(self, key: str) -> bytes:
        """Read and open."""
        return open_sealed(self.keyring, key, self.inner.get(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Read and open the whole object, then cut the range."""
        check_range(offset, length)
        return self.get(key)[offset : offset + length]

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Read and open, then write the local file, replacing it only once complete."""
        data = self.get(key)
        with atomic_write(path) as target:
            target.write(data)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """The opened object and its stored form's tag."""
        data, tag = self.inner.read_tagged(key)
        return open_sealed(self.keyring, key, data), tag

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Seal and replace if the stored object still carries ``tag``."""
        return self.inner.replace_if_unchanged(key, seal(self.keyring, key, data), tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete if unchanged (no bytes to seal)."""
        return self.inner.delete_if_unchanged(key, tag)

    def stat(self, key: str) -> ObjectInfo:
        """The plain size, from the stored one."""
        if key == MARKER_KEY:
            raise ObjectNotFoundError(f"{key}: the encryption marker is not an object of the location", key)
        return _plain(self.inner.stat(key))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects with their plain sizes, without the marker."""
        return (_plain(i) for i in self.inner.list(prefix) if i.key != MARKER_KEY)

    def delete(self, key: str) -> None:
        """Delete."""
        self.inner.delete(key)


def _plain(info: ObjectInfo) -> ObjectInfo:
    return ObjectInfo(info.key, max(0, info.size - OVERHEAD))


class UnkeyedStorage(ForwardsImmutability):
    """Wrap a backend opened without a key, so an encrypted location says it needs one instead of looking damaged.

    A read whose bytes start as an envelope raises :class:`KeyRequiredError`; so does the first write when the
    location carries the marker (one ``stat`` per opened storage that writes). Listing, stat and delete pass through:
    names and sizes are not secret.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.url = inner.url
        self._checked = False

    def __repr__(self) -> str:
        return repr(self.inner)

    def _refuse(self, key: str) -> KeyRequiredError:
        return KeyRequiredError(f"{self.url} is an encrypted location ({key} is sealed): it needs its encryption key "
                                "(encryption_conn_id, [rbak] encryption_conn_id, rbak --encryption-conn-id or "
                                "RBAK_ENCRYPTION_KEYS)", key)

    def _writable(self, key: str) -> None:
        if not self._checked:
            if self.inner.exists(MARKER_KEY):
                raise self._refuse(key)
            self._checked = True

    def _readable(self, key: str, data: bytes) -> bytes:
        if is_sealed(data):
            raise self._refuse(key)
        return data

    def check_location(self) -> None:
        """Check the location exists."""
        self.inner.check_location()

    def put(self, key: str, data: bytes) -> None:
        """Store, unless the location is encrypted."""
        self._writable(key)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create if absent, unless the location is encrypted."""
        self._writable(key)
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store a local file, unless the location is encrypted."""
        self._writable(key)
        self.inner.put_file(key, path)

    def get(self, key: str) -> bytes:
        """Read; a sealed object is refused."""
        return self._readable(key, self.inner.get(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Read a range; one starting at 0 that is sealed is refused."""
        data = self.inner.get_range(key, offset, length)
        return self._readable(key, data) if offset == 0 else data

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download; a sealed object is refused before the local file is touched."""
        data = self.get(key)
        with atomic_write(path) as target:
            target.write(data)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with its tag; a sealed object is refused."""
        data, tag = self.inner.read_tagged(key)
        return self._readable(key, data), tag

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Replace if unchanged, unless the location is encrypted."""
        self._writable(key)
        return self.inner.replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete if unchanged."""
        return self.inner.delete_if_unchanged(key, tag)

    def stat(self, key: str) -> ObjectInfo:
        """Stat."""
        return self.inner.stat(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """List (the marker included: it tells the location is encrypted)."""
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        """Delete."""
        self.inner.delete(key)
