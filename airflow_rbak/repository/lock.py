"""The lock of a running backup: ``{backup_id}/lock.json``, so two runs of one backup never interleave.

A run takes the lock before it writes anything and gives it back once the
manifest is complete. The lock is created only if absent (an exclusive link
on a file system, ``If-None-Match: *`` on S3), then read back after a short
pause: of runs racing for it, only the one whose lock is stored holds it,
even on a server whose conditional write is not atomic.

The holder is an *owner* string: a run of ``BackupRun`` is unique, while
every task of one Airflow DAG run shares ``rbak_backup/<run_id>``, so a task
retried or cleared in that run carries on and any other run is refused.

Every write a run makes is checked against the lock first
(:class:`LeasedStorage`), so a run whose lock was
taken over stops at its next write. A run that crashes leaves its lock behind. The error names the holder, its
host, process and age; when that run is known to be gone, take the lock over
with ``break_lock`` (a setting and a DAG param) or remove it with
``rbak unlock``.

``lock.json`` is read as untrusted input: at most :data:`MAX_LOCK_BYTES`, every field type- and
range-checked. Anything else (not JSON, wrong types, an object too large) is an *unreadable lock*:
it still blocks, is named as unreadable, and ``break_lock`` or ``rbak unlock`` removes it.

The lock is a lease on the backup's keys (:class:`LeasedStorage`, storage that writes only while its run holds
the lock): a
run whose lock was broken (``break_lock`` by a run that took it for a crashed
one, or ``rbak unlock``) must stop writing at once, not only before its
manifest, or it would keep staging beside the run that now owns the backup.
Wrapping the run's storage puts the check in front of every write and delete
the run makes, whichever engine makes it (capture's staging writer, the
checkpoint mirror, encode, the manifest), without those engines knowing.

A check is one read of ``lock.json`` (a GET on S3), cheap beside the
megabytes each write carries. It cannot close the gap between the check and
the write it guards: a run that loses its lock during that one write still
lands it, and is refused at its next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import orjson

from airflow_rbak.codec.layout import check_backup_id, lock_key
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import ObjectNotFoundError, Storage
from airflow_rbak.storage.forwarding import ForwardingStorage

log = package_logger(__name__)
#: Seconds between creating the lock and reading it back.
DEFAULT_CONFIRM_AFTER = 0.2
#: Seconds between renewals of a working run's lease.
DEFAULT_RENEW_EVERY = 30.0
#: The most of ``lock.json`` ever read; a real lock is a few hundred bytes, a bigger object is unreadable.
MAX_LOCK_BYTES = 64 * 1024
#: The owner an unreadable lock is shown with.
UNREADABLE_OWNER = "<unreadable lock.json>"
#: Longest text taken from a lock into a message (owner, host), after escaping.
_SHOWN_CHARS = 200
_MAX_INT = 2**63 - 1


class BackupLockedError(RbakError):
    """Another run holds the backup's lock, or took it over while this run was working."""


@dataclass(frozen=True)
class LockInfo:
    """What ``lock.json`` says: who holds the lock, where, and since when (epoch ms)."""

    backup_id: str
    owner: str
    token: str
    host: str
    pid: int
    acquired_at: int
    #: When the holder last renewed its lease (epoch ms): a live run renews it while it works.
    renewed_at: int = 0
    #: Why the stored lock could not be read ("" for a readable one); never stored.
    problem: str = ""

    def to_bytes(self) -> bytes:
        fields = asdict(self)
        del fields["problem"]
        return orjson.dumps(fields, option=orjson.OPT_INDENT_2)

    @property
    def unreadable(self) -> bool:
        """True for a lock whose content could not be read (see :meth:`from_bytes`)."""
        return bool(self.problem)

    @classmethod
    def from_bytes(cls, data: bytes, backup_id: str) -> LockInfo:
        """Parse a lock; anything but a well-formed one is an unreadable lock (it still blocks)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return cls.unreadable_lock(backup_id, "not JSON")
        if not isinstance(obj, dict):
            return cls.unreadable_lock(backup_id, f"a JSON {type(obj).__name__}, not an object")
        problem = _field_problem(obj)
        if problem:
            return cls.unreadable_lock(backup_id, problem)
        return cls(backup_id, obj["owner"], obj["token"], obj["host"], obj["pid"], obj["acquired_at"],
                   obj.get("renewed_at") or obj["acquired_at"])

    @classmethod
    def unreadable_lock(cls, backup_id: str, problem: str) -> LockInfo:
        """A lock that blocks but names no holder: ``problem`` says what is wrong with it."""
        return cls(backup_id, UNREADABLE_OWNER, "", "?", 0, 0, 0, problem)

    def describe(self, now_ms: int | None = None) -> str:
        """Who holds the lock, where and since when, in one line with every stored text escaped."""
        if self.unreadable:
            return f"an unreadable lock ({self.problem})"
        now = now_ms or int(time.time() * 1000)
        age, quiet = (now - self.acquired_at) / 60_000, (now - (self.renewed_at or self.acquired_at)) / 1000
        return (f"{shown(self.owner)} on host {shown(self.host)[1:-1]} (pid {self.pid}) since {age:.1f} minutes, "
                f"last renewed {quiet:.0f} s ago")


def shown(text: str) -> str:
    """``text`` quoted for a message: control and other unprintable characters escaped, cut to a bounded length."""
    cut = text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}…"
    return repr(cut)


_TEXT_FIELDS = ("owner", "token", "host")
_INT_FIELDS = ("pid", "acquired_at")


def _field_problem(obj: dict[str, object]) -> str:
    """What makes a parsed lock unusable ("" when nothing does): a missing field, a wrong type, a value out of range."""
    for name in _TEXT_FIELDS:
        if not isinstance(obj.get(name), str):
            return f"{name} is not a string"
    for name in _INT_FIELDS:
        if not _is_count(obj.get(name)):
            return f"{name} is not an integer from 0 to {_MAX_INT}"
    renewed = obj.get("renewed_at")
    if renewed is not None and not _is_count(renewed):
        return f"renewed_at is not an integer from 0 to {_MAX_INT}"
    return ""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


class BackupLock:
    """Take, check and give back the lock of one backup for one owner."""

    def __init__(self, storage: Storage, backup_id: str, owner: str | None = None, *,
                 confirm_after: float = DEFAULT_CONFIRM_AFTER, key: str | None = None) -> None:
        """``key`` puts the lock elsewhere than ``{backup_id}/lock.json`` (the location's chain lock)."""
        self.storage = storage
        self.backup_id = backup_id if key else check_backup_id(backup_id)
        self.key = key or lock_key(backup_id)
        self.token = uuid.uuid4().hex
        self.owner = owner or f"run {self.token[:12]}"
        self.confirm_after = confirm_after

    def read(self) -> LockInfo | None:
        """The stored lock, or None when the backup is not locked."""
        try:
            data = self.storage.get_range(self.key, 0, MAX_LOCK_BYTES + 1)
        except ObjectNotFoundError:
            return None
        return self._parse(data)

    def _read_tagged(self) -> tuple[LockInfo, str | None] | None:
        """The stored lock and its tag; the tag is None for an object too large to read (it is never fetched whole)."""
        try:
            head = self.storage.get_range(self.key, 0, MAX_LOCK_BYTES + 1)
            if len(head) > MAX_LOCK_BYTES:
                return self._parse(head), None
            data, tag = self.storage.read_tagged(self.key)
        except ObjectNotFoundError:
            return None
        return self._parse(data), tag

    def _parse(self, data: bytes) -> LockInfo:
        if len(data) > MAX_LOCK_BYTES:
            return LockInfo.unreadable_lock(self.backup_id, f"larger than {MAX_LOCK_BYTES} bytes")
        return LockInfo.from_bytes(data, self.backup_id)

    def remove(self, found: tuple[LockInfo, str | None]) -> bool:
        """Remove the lock ``found`` (from :meth:`_read_tagged`), never a newer one; True when removed.

        An object too large to read carries no tag: it is removed if it is still too large (a live run
        never writes one).
        """
        if found[1] is not None:
            return self.storage.delete_if_unchanged(self.key, found[1])
        try:
            still_oversized = len(self.storage.get_range(self.key, MAX_LOCK_BYTES, 1)) == 1
        except ObjectNotFoundError:
            return False
        if still_oversized:
            self.storage.delete(self.key)
        return still_oversized

    def acquire(self, *, break_lock: bool = False, break_if: Callable[[LockInfo], bool] | None = None) -> LockInfo:
        """Take the lock, or carry on under it when this owner holds it; else :class:`BackupLockedError`.

        ``break_lock`` takes over the lock found at the start (only for a holder known to be gone), as does
        ``break_if`` when it returns True for that lock; a lock that changes hands meanwhile belongs to a
        live run and is not broken.
        """
        found = self._read_tagged()
        breaking = found is not None and (break_lock or (break_if is not None and break_if(found[0])))
        stale = found[0].token if found is not None and breaking else None
        for _ in range(5):
            held = found[0] if found else None
            if held is not None and not held.unreadable and held.owner == self.owner:
                return held
            if held is not None and held.token != stale:
                raise self._locked(held)
            if found is not None:
                log.warning("breaking the lock %s held by %s", self.key, found[0].describe())
                self.remove(found)  # only the lock found: never a newer one
            now = int(time.time() * 1000)
            mine = LockInfo(self.backup_id, self.owner, self.token, socket.gethostname(), os.getpid(), now, now)
            self.storage.put_if_absent(self.key, mine.to_bytes())
            time.sleep(self.confirm_after)  # a racing writer's lock lands before we read
            found = self._read_tagged()
            if found is not None and found[0].token == self.token:
                return found[0]
        raise BackupLockedError(f"backup {self.backup_id!r}: could not take its lock {self.key} (it keeps changing hands)")

    def take_over(self, expected: LockInfo | None) -> bool:
        """Take the lock from ``expected`` (the lock as last read; None: no lock) and from nobody else; True when
        this owner now holds it. A lock renewed, replaced or taken since it was read stays its holder's."""
        found = self._read_tagged()
        if found is not None:
            if expected is None or found[0] != expected or found[1] is None:
                return False
            if not self.storage.delete_if_unchanged(self.key, found[1]):
                return False
        elif expected is not None:
            return False
        now = int(time.time() * 1000)
        mine = LockInfo(self.backup_id, self.owner, self.token, socket.gethostname(), os.getpid(), now, now)
        if not self.storage.put_if_absent(self.key, mine.to_bytes()):
            return False
        time.sleep(self.confirm_after)  # a racing writer's lock lands before we read
        found = self._read_tagged()
        return found is not None and found[0].token == self.token

    def check(self, action: str = "writing the manifest") -> None:
        """Raise :class:`BackupLockedError` unless this owner holds the lock (before every write that matters)."""
        held = self.read()
        if held is None or held.unreadable or held.owner != self.owner:
            holder = held.describe() if held else "nobody (it was removed)"
            raise BackupLockedError(
                f"backup {self.backup_id!r}: this run ({self.owner!r}) no longer holds its lock {self.key}, now held "
                f"by {holder}; not {action}. Check which run should finish it")

    def release(self) -> bool:
        """Give the lock back if this owner holds it; True when it was removed.

        The delete is conditional on the lock being the one just read (S3 ``If-Match``, a directory lock on a
        folder), so a lock another run took in between is never removed.
        """
        found = self._read_tagged()
        if found is None or found[1] is None or found[0].unreadable or found[0].owner != self.owner:
            return False
        return self.storage.delete_if_unchanged(self.key, found[1])

    def renew(self) -> bool:
        """Renew the lease (``renewed_at``) if this owner still holds the lock; False when it was lost."""
        found = self._read_tagged()
        if found is None or found[1] is None or found[0].unreadable or found[0].owner != self.owner:
            return False
        renewed = dataclasses.replace(found[0], renewed_at=int(time.time() * 1000))
        return self.storage.replace_if_unchanged(self.key, renewed.to_bytes(), found[1])

    @contextlib.contextmanager
    def renewing(self, every: float = DEFAULT_RENEW_EVERY) -> Iterator[None]:
        """Renew the lease every ``every`` seconds while the block runs, so others can see this run is alive.

        Losing the lock is not raised here (a thread cannot stop the run): the run's next write is refused
        by its :class:`LeasedStorage`.
        """
        stop = threading.Event()

        def renew_until_stopped() -> None:
            while not stop.wait(every):
                try:
                    if not self.renew():
                        log.warning("backup %s: this run lost its lock; its next write will be refused", self.backup_id)
                        return
                except RbakError as exc:  # a storage fault: try again at the next turn
                    log.warning("backup %s: could not renew the lock (%s)", self.backup_id, exc)

        thread = threading.Thread(target=renew_until_stopped, name=f"rbak-lease-{self.backup_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _locked(self, held: LockInfo) -> BackupLockedError:
        if held.unreadable:
            return BackupLockedError(
                f"backup {self.backup_id!r} is held by an unreadable lock: {self.key} is {held.problem}. If no run is "
                f"writing this backup, run again with break_lock or remove the lock with "
                f"`rbak unlock --path URL --backup-id {self.backup_id}`")
        return BackupLockedError(
            f"backup {self.backup_id!r} is being written by another run: its lock {self.key} is held by "
            f"{held.describe()}. Wait for that run; if it is gone (crashed or killed), run again with break_lock "
            f"or remove the lock with `rbak unlock --path URL --backup-id {self.backup_id}`")


class LeasedStorage(ForwardingStorage):
    """Every write and delete first checks that ``lock``'s owner still holds it; reads pass through."""

    def __init__(self, inner: Storage, lock: BackupLock) -> None:
        super().__init__(inner)
        self.lock = lock

    def __repr__(self) -> str:
        return f"LeasedStorage({self.inner!r}, owner={self.lock.owner!r})"

    def _check(self, key: str) -> None:
        if key != self.lock.key:  # the lock's own object is the lock's business
            self.lock.check(f"writing {key}")

    def put(self, key: str, data: bytes) -> None:
        """Store, while the lock is held."""
        self._check(key)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create if absent, while the lock is held."""
        self._check(key)
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store a local file, while the lock is held."""
        self._check(key)
        self.inner.put_file(key, path)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Replace if unchanged, while the lock is held."""
        self._check(key)
        return self.inner.replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Delete if unchanged, while the lock is held."""
        self._check(key)
        return self.inner.delete_if_unchanged(key, tag)

    def delete(self, key: str) -> None:
        """Delete, while the lock is held."""
        self._check(key)
        self.inner.delete(key)

    def purge(self, key: str) -> bool:
        """Purge, while the lock is held."""
        self._check(key)
        return self.inner.purge(key)
