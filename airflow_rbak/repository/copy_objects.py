"""One backup's objects copied to another location: only what its checked manifest lists, created and never replaced.

A source is untrusted: a planted manifest may declare any backup in ``depends_on`` and list that backup's objects
with new bytes (and a new size and SHA-256). So a copy

- lists only keys its manifest may own (:mod:`airflow_rbak.repository.ownership`: its own folder and the bases it
  declares), each with the SHA-256 and size the manifest records (the definitions export, which the manifest
  records no digest of, with the SHA-256 of the source's bytes), refusing the backup before anything is read
  otherwise;
- first reads every one of them the destination already holds, keeping it only when its SHA-256 is the one wanted,
  and otherwise refuses the whole backup before writing anything, naming the key and both digests;
- checks each absent object's source bytes against the manifest and creates it with ``put_if_absent``, so a writer
  racing the copy is never overwritten either (what it wrote is compared as above);
- records every object it created, which is all a refused copy removes: never an object it found there.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from airflow_rbak.codec import BackupManifest, CodecError
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository import chain, ownership
from airflow_rbak.storage.base import ObjectNotFoundError, ObjectTooLargeError, Storage, StorageError, read_bounded

T = TypeVar("T")


class CopyRefusedError(RbakError):
    """One backup cannot be copied (damaged at the source, its manifest not to be trusted, an object at the
    destination with other bytes, or failing validation at the destination)."""


@dataclass(frozen=True)
class WantedObject:
    """An object the manifest lists, as the destination must hold it: ``sha256`` and ``size`` of its bytes."""

    key: str
    sha256: str
    size: int
    data: bytes | None = field(default=None, repr=False)  # already read from the source (the definitions)


@dataclass
class CopiedObjects:
    """What one backup's copy did: the keys it created (all a refusal removes), and what it found there."""

    created: list[str] = field(default_factory=list)
    bytes_created: int = 0
    already_there: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_created(self, key: str, size: int) -> None:
        with self._lock:
            self.created.append(key)
            self.bytes_created += size

    def add_found(self) -> None:
        with self._lock:
            self.already_there += 1


def wanted_objects(source: Storage, manifest: BackupManifest, backup_id: str) -> list[WantedObject]:
    """Every object ``manifest`` lists, each once, with the digest it must have; :class:`CopyRefusedError` when the
    manifest names another backup, lists a key its ownership rules refuse, or one key twice with other digests."""
    if manifest.backup_id != backup_id:
        raise CopyRefusedError(f"{backup_id}/manifest.json names backup {manifest.backup_id!r}; not copied")
    try:
        chain.dependencies(manifest)
    except CodecError as exc:
        raise CopyRefusedError(f"{backup_id}/manifest.json: {exc}") from None
    foreign = ownership.foreign_objects(manifest)
    if foreign:
        key, reason = foreign[0]
        raise CopyRefusedError(f"{key}: {reason} ({len(foreign)} such key(s)); nothing copied")
    wanted: dict[str, WantedObject] = {}
    for segment in (s for q in manifest.queues for s in q.segments):
        _add(wanted, WantedObject(segment.key, segment.checksum, segment.size_bytes))
    if manifest.definitions is not None:
        key = manifest.definitions.key
        data = _read_source(source, key, DEFINITIONS_LIMITS.max_bytes)
        _add(wanted, WantedObject(key, hashlib.sha256(data).hexdigest(), len(data), data))
    return list(wanted.values())


def _add(wanted: dict[str, WantedObject], item: WantedObject) -> None:
    before = wanted.setdefault(item.key, item)
    if (before.sha256, before.size) != (item.sha256, item.size):
        raise CopyRefusedError(f"{item.key}: listed twice, with SHA-256 {before.sha256} and {item.sha256}; not copied")


def copy_wanted(source: Storage, destination: Storage, wanted: Sequence[WantedObject], present: set[str],
                done: CopiedObjects, workers: int) -> None:
    """Check what the destination holds, then create what it lacks; :class:`CopyRefusedError` on the first object
    that cannot be kept or created as wanted (those not yet begun are then not read)."""
    found = _each(workers, [w for w in wanted if w.key in present], lambda w: _kept(destination, w))
    for _, there in found:
        if there:
            done.add_found()
    missing = [w for w in wanted if w.key not in present] + [item for item, there in found if not there]
    _each(workers, missing, lambda w: _create(source, destination, w, done))


def _each(workers: int, items: Sequence[WantedObject], work: Callable[[WantedObject], T]) -> list[tuple[WantedObject, T]]:
    """``work`` on every item, a few at a time; after the first refusal the items not yet begun are skipped, and
    the refusal is raised once every begun item has ended (so ``done`` names all that was created)."""
    stop = threading.Event()

    def one(item: WantedObject) -> T:
        if stop.is_set():
            raise _Skipped(f"{item.key}: not copied after an earlier refusal")
        try:
            return work(item)
        except CopyRefusedError:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="rbak-copy") as pool:
        futures = [pool.submit(one, item) for item in items]
    errors: list[BaseException] = [e for f in futures if (e := f.exception()) is not None]
    if errors:  # the first refusal in listing order, else the first fault: never a skipped object's note
        refused: list[BaseException] = [e for e in errors
                                         if isinstance(e, CopyRefusedError) and not isinstance(e, _Skipped)]
        raise (refused or [e for e in errors if not isinstance(e, _Skipped)] or errors)[0]
    return [(item, f.result()) for item, f in zip(items, futures, strict=True)]


class _Skipped(CopyRefusedError):
    """An object not begun because another was refused."""


def _kept(destination: Storage, item: WantedObject) -> bool:
    """Whether ``item`` is at the destination as wanted (False: absent); refused when it holds other bytes."""
    try:
        data = read_bounded(destination, item.key, item.size, "the object this copy wants")
    except ObjectNotFoundError:
        return False
    except ObjectTooLargeError:
        raise CopyRefusedError(_conflict(item, f"more than the {item.size} bytes wanted, not read")) from None
    found = hashlib.sha256(data).hexdigest()
    if found != item.sha256:
        raise CopyRefusedError(_conflict(item, f"SHA-256 {found}, {len(data)} bytes"))
    return True


def _conflict(item: WantedObject, found: str) -> str:
    return (f"{item.key}: the destination already holds other bytes ({found}) than the SHA-256 {item.sha256} this "
            "copy wants; kept as it is, and nothing more written")


def _create(source: Storage, destination: Storage, item: WantedObject, done: CopiedObjects) -> None:
    data = item.data if item.data is not None else _read_source(source, item.key, item.size)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != item.size or digest != item.sha256:
        raise CopyRefusedError(f"{item.key}: damaged at the source ({len(data)} bytes, SHA-256 {digest[:16]}…; the "
                               f"manifest says {item.size} bytes, {item.sha256[:16]}…)")
    if _put_if_absent(destination, item.key, data):
        done.add_created(item.key, len(data))
    elif _kept(destination, item):  # another writer got there first: kept only if it wrote the same bytes
        done.add_found()
    else:
        raise CopyRefusedError(f"{item.key}: neither created nor found at the destination; not copied")


def _put_if_absent(storage: Storage, key: str, data: bytes) -> bool:
    try:
        return storage.put_if_absent(key, data)
    except NotImplementedError:  # a backend without the atomic step: checked, then written
        if storage.exists(key):
            return False
        storage.put(key, data)
        return True


def _read_source(source: Storage, key: str, cap: int) -> bytes:
    """The source's object, at most ``cap`` bytes (the manifest's size, or the definitions' cap)."""
    try:
        return read_bounded(source, key, cap, "the object its manifest lists")
    except ObjectNotFoundError:
        raise CopyRefusedError(f"{key}: missing at the source") from None
    except ObjectTooLargeError as exc:
        raise CopyRefusedError(f"{key}: damaged at the source ({exc})") from None
    except StorageError as exc:
        raise CopyRefusedError(f"{key}: cannot be read at the source ({exc})") from None


def remove_created(destination: Storage, keys: Iterable[str]) -> int:
    """Delete the objects a refused copy created (and only those); how many."""
    count = 0
    for key in keys:
        destination.delete(key)
        count += 1
    return count
