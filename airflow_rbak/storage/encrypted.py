"""Encryption at rest as a storage decorator, as restic wraps its backends: every object sealed with AES-256-GCM.

Each object of an encrypted location is one envelope (byte layout: docs/format.md, "Encrypted locations")::

    magic "RBAKENC" | version | cipher 1 (AES-256-GCM) | key id (16, NUL-padded) | key check (8)
    | digests (8) | nonce (12) | ciphertext | tag (16)

A location whose marker holds an identity (every location marked since issue 51,
:mod:`~airflow_rbak.storage.encryption_records`) writes and reads envelope version 2, whose associated data is the
header, the location's identity and the object's storage key: an object moved to another key, or copied to another
location that shares the keys (a second copy, by design), fails there like an edited one, and only a copy that
re-seals (``rbak copy``) moves it. Its digests are 4 bytes of the identity's SHA-256 and 4 of the storage key's,
which tell a misplaced object from an edited one and name the location. A location whose marker has no identity
(written before) stays on version 1, whose associated data is the header and the storage key (its digests: 8 bytes
of the storage key's SHA-256), and is read and written as before; each refuses the other's envelopes.

The key check (:func:`~airflow_rbak.storage.keyring.key_check`) tells a wrong key from damage. None of the header is
trusted: only the tag is, and any failure is refused. A retired key (``storage/keyring.py``) opens only the objects
its retirement record pinned by the SHA-256 of their stored bytes, so a leaked retired key forges nothing.

What an unkeyed reader sees: the object names, their sizes (each plain size plus :data:`OVERHEAD`), their times, the key
id each object was sealed with, and the marker object :data:`MARKER_KEY` with the identity. A location is encrypted or
not: the first keyed write marks an empty location, a keyed writer refuses a location holding plain objects, and an
unkeyed writer refuses a marked one (:class:`UnkeyedStorage`), each with a typed error naming the location.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from airflow_rbak.codec.errors import CodecError
from airflow_rbak.storage.atomic import atomic_write
from airflow_rbak.storage.base import (
    ObjectInfo,
    ObjectNotFoundError,
    ObjectTooLargeError,
    Storage,
    StorageError,
    check_range,
    read_bounded,
)
from airflow_rbak.storage.encryption_records import (
    MARKER_KEY,
    MAX_MARKER_BYTES,
    marker_identity,
    new_marker,
    retirement_key,
    retirement_pins,
)
from airflow_rbak.storage.forwarding import ForwardingStorage
from airflow_rbak.storage.keyring import Keyring, key_check

__all__ = ["MARKER_KEY"]

MAGIC = b"RBAKENC"
#: Envelope versions: 1 binds the storage key (locations marked without an identity), 2 the location's identity too.
UNBOUND, BOUND = 1, 2
VERSION = BOUND
CIPHER_AES_256_GCM = 1
_ID, _CHECK, _DIGEST, _NONCE, TAG = 16, 8, 8, 12, 16
HEADER = len(MAGIC) + 2 + _ID + _CHECK + _DIGEST + _NONCE
#: Bytes an envelope adds to the object it seals (the same for both versions).
OVERHEAD = HEADER + TAG


class EncryptionError(StorageError):
    """An object of an encrypted location cannot be opened or written; ``key`` names it (or the marker)."""


class DamagedObjectError(EncryptionError):
    """The object fails authentication: altered or truncated (the key is right). Final: reading again will not help."""


class MisplacedObjectError(DamagedObjectError):
    """The object was sealed for another storage key: swapped or copied in from elsewhere."""


class ForeignLocationError(MisplacedObjectError):
    """The object was sealed for another location (or for none): copied in without re-sealing."""


class UnpinnedObjectError(DamagedObjectError):
    """The object is sealed with a retired key but is not one its retirement record pinned: forged or replaced."""


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


class BadMarkerError(DamagedObjectError):
    """The location's encryption marker is not one (edited, or another tool's): nothing is read or written."""


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _digests(key: str, location_id: str | None) -> bytes:
    return _sha(key)[:_DIGEST] if location_id is None else _sha(location_id)[:4] + _sha(key)[:4]


def _associated(header: bytes, key: str, location_id: str | None) -> bytes:
    return header + (b"" if location_id is None else location_id.encode()) + key.encode()


def _aead(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # only encrypted locations need cryptography

    return AESGCM(key)


def seal(keyring: Keyring, key: str, data: bytes, location_id: str | None = None) -> bytes:
    """The envelope of ``data`` for the storage key ``key`` (and the location ``location_id``: version 2; None:
    version 1, for a location without an identity), sealed with the keyring's writing key."""
    key_id, secret = keyring.writer
    version = UNBOUND if location_id is None else BOUND
    header = (MAGIC + bytes((version, CIPHER_AES_256_GCM)) + key_id.encode().ljust(_ID, b"\0") + key_check(secret)
              + _digests(key, location_id) + os.urandom(_NONCE))
    return header + _aead(secret).encrypt(header[-_NONCE:], bytes(data), _associated(header, key, location_id))


def is_sealed(data: bytes) -> bool:
    """Whether ``data`` starts as an envelope does (a hint for unkeyed readers, not a check)."""
    return bytes(data[: len(MAGIC)]) == MAGIC


def sealed_key_id(data: bytes) -> str:
    """The key id an envelope names (unauthenticated: a hint until it is opened)."""
    at = len(MAGIC) + 2
    return bytes(data[at : at + _ID]).rstrip(b"\0").decode("ascii", "replace")


def open_sealed(keyring: Keyring, key: str, data: bytes, location_id: str | None = None,
                where: str = "this location") -> bytes:
    """The plain bytes of the envelope stored at ``key`` in the location ``where`` (whose identity is
    ``location_id``, None for none); a typed :class:`EncryptionError` naming the object otherwise."""
    if not is_sealed(data):
        if len(data) < len(MAGIC) and MAGIC.startswith(bytes(data)):
            raise DamagedObjectError(f"{key}: truncated ({len(data)} bytes, shorter than an envelope's header)", key)
        raise NotEncryptedError(f"{key}: not encrypted, but its location is opened with an encryption key (a plain "
                                "location, or an object planted in an encrypted one); not read", key)
    if len(data) < OVERHEAD:
        raise DamagedObjectError(f"{key}: truncated ({len(data)} bytes, shorter than an envelope)", key)
    version, cipher = data[len(MAGIC)], data[len(MAGIC) + 1]
    if version not in (UNBOUND, BOUND) or cipher != CIPHER_AES_256_GCM:
        raise DamagedObjectError(f"{key}: envelope version {version}, cipher {cipher} unknown to this reader "
                                 "(damaged, or written by a newer airflow-rbak)", key)
    _check_location(key, version, bytes(data[HEADER - _NONCE - _DIGEST : HEADER - _NONCE]), location_id, where)
    key_id = sealed_key_id(data)
    at = len(MAGIC) + 2 + _ID
    check, digest = bytes(data[at : at + _CHECK]), bytes(data[at + _CHECK : HEADER - _NONCE])
    secret = keyring.key(key_id)
    if secret is None:
        raise UnknownKeyError(f"{key}: wrong key: sealed with key id {key_id!r}, which the keyring lacks (it holds "
                              f"{', '.join(keyring.ids)}); add that key to read it", key, key_id)
    if key_check(secret) != check:
        raise WrongKeyError(f"{key}: wrong key: sealed with another key named {key_id!r} than the keyring's", key, key_id)
    if digest != _digests(key, location_id):
        raise MisplacedObjectError(f"{key}: damaged: sealed for another object (swapped or copied here); not read", key)
    return _authenticated(secret, key, data, location_id)


def _check_location(key: str, version: int, digests: bytes, location_id: str | None, where: str) -> None:
    """Refuse an envelope sealed for another location than ``where`` (or for none, or for one where it has none)."""
    if location_id is None and version == BOUND:
        raise ForeignLocationError(f"{key}: sealed for a location with an identity, but {where}'s encryption marker "
                                   "names none (copied here from another location without re-sealing, or the marker "
                                   "was replaced); not read", key)
    if location_id is not None and version == UNBOUND:
        raise ForeignLocationError(f"{key}: sealed for no location identity, but {where} is location {location_id} "
                                   "(copied here from an older location without re-sealing); not read", key)
    if location_id is not None and digests[:4] != _sha(location_id)[:4]:
        raise ForeignLocationError(f"{key}: sealed for another location than {where} (location {location_id}): "
                                   "copied here without re-sealing (rbak copy re-seals what it copies); not read", key)


def _authenticated(secret: bytes, key: str, data: bytes, location_id: str | None) -> bytes:
    from cryptography.exceptions import InvalidTag

    header = bytes(data[:HEADER])
    try:  # the ciphertext as a view: a segment is not copied before it is decrypted
        with memoryview(data) as view:
            return _aead(secret).decrypt(header[-_NONCE:], view[HEADER:], _associated(header, key, location_id))
    except InvalidTag:
        raise DamagedObjectError(f"{key}: damaged: fails authentication (altered or truncated); not read",
                                 key) from None


class EncryptedStorage(ForwardingStorage):
    """Wrap a backend so every object is sealed on the way in and authenticated on the way out.

    Sizes from ``stat`` and ``list`` are the plain sizes (stored minus :data:`OVERHEAD`), so readers that cap an
    object by its size work unchanged. Ranged reads fetch and open the whole object (an envelope is authenticated
    whole); the project's ranged reads are bounded whole reads of small objects. The location's identity is read from
    its marker once, before the first object is opened or sealed.
    """

    def __init__(self, inner: Storage, keyring: Keyring) -> None:
        super().__init__(inner)
        self.keyring = keyring
        self._marked = False
        self._marking = threading.Lock()
        self._identity: tuple[str | None] | None = None  # (location id or None,) once a marker was read
        self._pins: dict[str, dict[str, str]] = {}
        self._loading = threading.local()

    def __repr__(self) -> str:
        return f"EncryptedStorage({self.inner!r}, key ids={self.keyring.ids!r})"

    @property
    def location_id(self) -> str | None:
        """The identity this location's marker holds; None for a marker without one (or no marker yet)."""
        with self._marking:
            return self._read_identity()

    def _read_identity(self) -> str | None:
        if self._identity is None:
            try:
                self._identity = (marker_identity(read_bounded(self.inner, MARKER_KEY, MAX_MARKER_BYTES, "a marker")),)
            except ObjectNotFoundError:
                return None  # not remembered: a writer may mark the location next
            except (ObjectTooLargeError, ValueError) as exc:
                raise BadMarkerError(f"{self.url}: its encryption marker {MARKER_KEY} is not one ({exc}): nothing is "
                                     "read or written until it is restored", MARKER_KEY) from None
        return self._identity[0]

    def _mark(self) -> str | None:
        """Before the first write: mark an empty location encrypted, with a new identity; refuse one holding plain
        objects. The location's identity (None for a marker written before identities)."""
        with self._marking:
            if self._marked:
                return self._read_identity()
            if not self.inner.exists(MARKER_KEY):
                plain = next((i.key for i in self.inner.list() if i.key != MARKER_KEY), None)
                if plain is not None:
                    raise NotEncryptedError(f"{self.url} holds unencrypted objects ({plain}, ...): a location is "
                                            "encrypted from its first object or never; write encrypted backups to a new "
                                            "location (rbak export copies a location)", plain)
                marker, _ = new_marker()
                self.inner.put_if_absent(MARKER_KEY, marker)  # another writer's marker, if it won, is the one read
            self._marked = True
            return self._read_identity()

    def _open(self, key: str, data: bytes) -> bytes:
        location_id = self.location_id
        plain = open_sealed(self.keyring, key, data, location_id, self.url)
        key_id = sealed_key_id(data)
        if key_id in self.keyring.retired:  # authenticated under it: now, was it sealed before the retirement?
            pinned = self._retired_pins(key_id, location_id).get(key)
            found = hashlib.sha256(data).hexdigest()
            if pinned != found:
                raise UnpinnedObjectError(
                    f"{key}: sealed with the retired key {key_id!r} but not as its retirement pinned it at {self.url} "
                    f"({'not listed' if pinned is None else f'SHA-256 {found}, pinned {pinned}'}): forged or "
                    "replaced after the key was retired; not read", key)
        return plain

    def _retired_pins(self, key_id: str, location_id: str | None) -> dict[str, str]:
        """The objects the retired ``key_id`` may still open here, from its record (sealed with another key)."""
        if key_id in self._pins:
            return self._pins[key_id]
        record = retirement_key(key_id)
        loading: set[str] = self._loading.__dict__.setdefault("ids", set())
        if key_id in loading or location_id is None:
            why = ("the location has no identity to bind a retirement to" if location_id is None
                   else "its record is sealed with a retired key whose record it pins")
            raise UnpinnedObjectError(f"{record}: the retired key {key_id!r} opens nothing at {self.url}: {why}", record)
        loading.add(key_id)
        try:
            data = self.inner.get(record)
            if sealed_key_id(data) == key_id:
                raise UnpinnedObjectError(f"{record}: sealed with the key it retires; not read", record)
            pins = retirement_pins(self._open(record, data), key_id, location_id, record)
        except ObjectNotFoundError:
            raise UnpinnedObjectError(f"{record}: the keyring retires key {key_id!r}, but {self.url} holds no retirement "
                                      "record for it (rbak keys retire writes one), so it opens nothing here", record) from None
        except (ValueError, CodecError) as exc:
            raise UnpinnedObjectError(f"{record}: not a retirement record of key {key_id!r} here ({exc})", record) from None
        finally:
            loading.discard(key_id)
        self._pins[key_id] = pins
        return pins

    def put(self, key: str, data: bytes) -> None:
        """Seal and store."""
        location_id = self._mark()
        self.inner.put(key, seal(self.keyring, key, data, location_id))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Seal and create only if absent."""
        location_id = self._mark()
        return self.inner.put_if_absent(key, seal(self.keyring, key, data, location_id))

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Seal a local file (read whole: an envelope is sealed whole) and store it."""
        with open(path, "rb") as source:
            self.put(key, source.read())

    def get(self, key: str) -> bytes:
        """Read and open."""
        return self._open(key, self.inner.get(key))

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
        return self._open(key, data), tag

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Seal and replace if the stored object still carries ``tag``."""
        location_id = self._mark()
        return self.inner.replace_if_unchanged(key, seal(self.keyring, key, data, location_id), tag)

    def stat(self, key: str) -> ObjectInfo:
        """The plain size, from the stored one."""
        if key == MARKER_KEY:
            raise ObjectNotFoundError(f"{key}: the encryption marker is not an object of the location", key)
        return _plain(self.inner.stat(key))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects with their plain sizes, without the marker."""
        return (_plain(i) for i in self.inner.list(prefix) if i.key != MARKER_KEY)


def _plain(info: ObjectInfo) -> ObjectInfo:
    return ObjectInfo(info.key, max(0, info.size - OVERHEAD))
