"""The claim of one queue restore: held by the one run publishing it, so that two runs of a restore never both publish.

A double click once made two runs of one restore 94 ms apart; each plan saw an empty target and, once approved,
each would have published the whole backup into it (sharing one checkpoint: it is keyed by what is restored, not by
the run). So a run holds the queue restore's claim from before it reads the checkpoint until it has written its last
one, and a run that finds the claim held refuses before it sends anything, naming the holder. Once the holder is
done, another run finds the queue completed and publishes nothing (or, were the checkpoint gone, the fresh-start
measure, :mod:`.fresh_start`, refuses).

One kind of claim per checkpoint store:

* in storage (:class:`StorageClaim`): ``claim.json`` beside ``progress.json``, taken as a backup's lock is
  (:class:`~airflow_rbak.repository.lock.BackupLock`: created only if absent, then read back) and renewed while held.
  A crashed holder leaves it behind: it lapses :data:`STALE_AFTER` seconds after its last renewal, or at once when
  it names this host and a process that no longer runs. The object is untrusted like everything in a location: a
  planted claim only refuses (an unreadable one, which no run writes, is taken over), and a claim taken over or
  removed while its holder works stops that holder at its next checkpoint write (:meth:`StorageClaim.check`).
* beside a SQLite file (:class:`FileClaim`): an ``flock`` on one file per queue restore, which the OS releases when
  its process ends, however it ends. The file keeps its holder's description for the refusal and is never deleted
  (a run could otherwise lock a new file of the same name while another holds the old one).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

import orjson

from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.lock import (
    DEFAULT_CONFIRM_AFTER,
    DEFAULT_RENEW_EVERY,
    BackupLock,
    BackupLockedError,
    LockInfo,
    shown,
)
from airflow_rbak.restore.errors import RestoreClaimedError
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)
#: Seconds without a renewal after which a claim in storage is taken for a crashed run's (ten missed renewals).
STALE_AFTER = 10 * DEFAULT_RENEW_EVERY
_HOLDER_BYTES = 4096


def _refusal(label: str, where: str, holder: str, lapses: str) -> RestoreClaimedError:
    return RestoreClaimedError(
        f"{label} is being published by another run: its claim {where} is held by {holder}. Nothing was published by "
        f"this run. Wait for that run; once it has finished, running this one again finds the queue completed and "
        f"publishes nothing. If that run is gone, {lapses}")


class StorageClaim:
    """A queue restore's claim as a lease object in storage (see the module docstring); a context manager."""

    def __init__(self, storage: Storage, key: str, label: str, *, stale_after: float = STALE_AFTER,
                 renew_every: float = DEFAULT_RENEW_EVERY, confirm_after: float = DEFAULT_CONFIRM_AFTER) -> None:
        self.lock = BackupLock(storage, label, None, confirm_after=confirm_after, key=key)
        self.label, self.key = label, key
        self.stale_after, self.renew_every = stale_after, renew_every
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> StorageClaim:
        try:
            self.lock.acquire(break_if=self._lapsed)
        except BackupLockedError:
            held = self.lock.read()
            raise _refusal(self.label, f"{self.lock.storage.url} {self.key}",
                           held.describe() if held else "another run (it changed hands while this one looked)",
                           f"its claim lapses {self.stale_after:.0f} s after its last renewal (at once on its own host), "
                           "and this run can then be started again") from None
        self._stack.enter_context(self.lock.renewing(self.renew_every))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        try:
            self.lock.release()
        except RbakError as err:  # it lapses and is taken over; the publish's own outcome matters more
            log.warning("could not give back the claim %s (%s)", self.key, err)

    def check(self) -> None:
        """Raise :class:`RestoreClaimedError` unless this run still holds the claim (before each checkpoint write)."""
        try:
            self.lock.check("writing its checkpoint")
        except BackupLockedError as exc:
            raise RestoreClaimedError(f"{self.label}: this run lost its claim {self.key} while publishing ({exc}); it "
                                      "stops here. Check which run should finish the restore") from None

    def _lapsed(self, held: LockInfo) -> bool:
        """True for a claim no live run holds: unreadable, not renewed for ``stale_after``, or of a gone local process."""
        if held.unreadable:
            return True
        if time.time() * 1000 - (held.renewed_at or held.acquired_at) > self.stale_after * 1000:
            return True
        return held.host == socket.gethostname() and not _running(held.pid)


def _running(pid: int) -> bool:
    """False only for a process known to have ended (a pid that cannot be a process is taken as running)."""
    if pid <= 0 or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class FileClaim:
    """A queue restore's claim as an ``flock`` on ``path`` (see the module docstring); a context manager."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self._fd: int | None = None

    def __enter__(self) -> FileClaim:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(os.pread(fd, _HOLDER_BYTES, 0))
            os.close(fd)
            raise _refusal(self.label, str(self.path), holder,
                           "the claim was released when its process ended: run this one again") from None
        now = int(time.time() * 1000)
        os.ftruncate(fd, 0)
        os.pwrite(fd, orjson.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": now}), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None

    def check(self) -> None:
        """Nothing to check: only the OS ends an ``flock``, with its process."""


def _holder(data: bytes) -> str:
    """The holder a claim file names, every stored text escaped."""
    try:
        obj = orjson.loads(data)
        minutes = (time.time() * 1000 - int(obj["since"])) / 60_000
        return f"process {int(obj['pid'])} on host {shown(str(obj['host']))} since {minutes:.1f} minutes"
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return "a process that has not written its name yet"
