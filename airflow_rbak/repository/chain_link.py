"""The location-wide lock that keeps retention and the stream chains of running backups apart.

Retention decides from what the location holds and then deletes; a run picks
the base its streams continue from, and much later lists that base's
segments in its completed manifest. Either interleaved with the other could
delete what a chain lists. So both hold this one lock while they decide:
retention for its whole pass, a run while it picks a stream's base and while
it links its chains and writes its completed manifest. It is taken with the
same primitive as a backup's lock (:class:`~airflow_rbak.repository.lock.BackupLock`
on :data:`~airflow_rbak.codec.layout.CHAIN_LOCK_KEY`) and renewed while held.

Holders wait for each other (the critical sections are short beside a
backup). A holder that crashed leaves the lock behind; once its lease has not
been renewed for ``stale_after`` seconds the next caller takes it over.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from airflow_rbak.codec.layout import CHAIN_LOCK_KEY
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.lock import DEFAULT_CONFIRM_AFTER, DEFAULT_RENEW_EVERY, BackupLock, BackupLockedError, LockInfo
from airflow_rbak.storage.base import Storage

log = package_logger(__name__)
#: Seconds a caller waits for the chain lock before it gives up.
DEFAULT_WAIT = 900.0
#: Seconds without a renewal after which a holder is taken for crashed (ten missed renewals).
DEFAULT_STALE_AFTER = 10 * DEFAULT_RENEW_EVERY


class ChainLock:
    """Hold the location's chain lock for one critical section (see the module docstring)."""

    def __init__(self, storage: Storage, owner: str, *, wait: float = DEFAULT_WAIT, poll: float = 1.0,
                 stale_after: float = DEFAULT_STALE_AFTER, confirm_after: float = DEFAULT_CONFIRM_AFTER,
                 clock: Callable[[], float] = time.time) -> None:
        self.lock = BackupLock(storage, "the location's stream chains", owner, confirm_after=confirm_after,
                               key=CHAIN_LOCK_KEY)
        self.wait = wait
        self.poll = poll
        self.stale_after = stale_after
        self._clock = clock

    @contextlib.contextmanager
    def held(self) -> Iterator[BackupLock]:
        """Take the lock (waiting for a live holder), renew it while the block runs, give it back after."""
        self._acquire()
        try:
            with self.lock.renewing():
                yield self.lock
        finally:
            try:
                self.lock.release()
            except RbakError as exc:  # it goes stale and is taken over; the block's own outcome matters more
                log.warning("could not give back the chain lock %s (%s)", CHAIN_LOCK_KEY, exc)

    def _stale(self, held: LockInfo) -> bool:
        quiet_ms = self._clock() * 1000 - (held.renewed_at or held.acquired_at)
        return held.unreadable or quiet_ms > self.stale_after * 1000

    def _acquire(self) -> None:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                self.lock.acquire(break_if=self._stale)
                return
            except BackupLockedError:
                if time.monotonic() >= deadline:
                    held = self.lock.read()
                    raise BackupLockedError(
                        f"{self.lock.storage.url}: waited {self.wait:.0f} s for the chain lock {CHAIN_LOCK_KEY} (held by "
                        f"{held.describe() if held else 'nobody now'}), which retention and runs linking stream chains "
                        "take in turn; try again later") from None
            time.sleep(self.poll)  # a live holder's section is short: look again soon
