"""A capture that stopped at a quorum queue's delivery limit, remembered in two places until the risk is gone.

Before RabbitMQ 4.3 every return counts toward a quorum queue's delivery limit *L* (:mod:`.returns`). An allowed
capture stops at the first message that another capture's return would bring to *L* and gives everything back, so
its messages end at (up to) *L - 1*. The next capture cannot see a count before the message is delivered, and its
return would bring each message it received to *L* (where the application has no retry left; one more return, and
the broker drops or dead-letters them: measured on 4.0.5, all 12 of a test queue). So the capture that stops records
it, sealed (:class:`~airflow_rbak.storage.sealed.StateSeal`, purpose :data:`PURPOSE`, bound to its key), in two places:

* the location, outside every backup: :func:`~airflow_rbak.codec.layout.delivery_limit_stop_key`;
* the deployment's *ledger*, a folder outside the location (``[rbak] state_dir``) that whoever can write to the
  location cannot reach: :func:`ledger_key`, by location URL, vhost and queue. A record deleted from the location
  never lifts a stop the ledger holds.

Every later capture of that queue whose returns count leaves it out before receiving anything while *either* place
holds a record (:meth:`LimitStops.reason`), until the risk is gone; then both are deleted:

* the queue is seen empty (no message is left near the limit);
* or its limit was raised above the recorded one (every message is then at most one below the old limit, and a
  return takes it at most to the old limit, below the new one), which only the ledger's sealed entry may show:
  every record present must open under the seal and the highest recorded limit counts (the location alone could
  replay an older stop's record);
* or the operator clears it deliberately, in both places: ``rbak limit-stops --clear`` (:meth:`LimitStops.clear`).

A record that fails its seal (edited, forged, written unsealed by an older version, copied from another queue or
location) or cannot be read counts as a stop, for its own queue only, and is never deleted for what it claims. A
capture whose stop could not be written to the ledger is refused before it receives anything
(:meth:`LimitStops.unwritable`): a stop it made would be remembered only where it can be undone.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.codec.bounded_json import JsonLimits
from airflow_rbak.codec.layout import (
    LOCATION_STATE_PREFIX,
    decode_name,
    delivery_limit_stop_key,
    encode_name,
    vhost_dir,
    vhost_from_dir,
)
from airflow_rbak.display import package_logger
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage, StorageError
from airflow_rbak.storage.sealed import StateSeal, UntrustedStateError

log = package_logger(__name__)

#: The seal purpose of a stop record, in the location and in the ledger.
PURPOSE = "delivery-limit-stop"
#: A stop record is a few hundred bytes.
STOP_LIMITS = JsonLimits(max_bytes=16 * 1024, max_values=64, what="a delivery-limit stop record")
#: The ledger's folder under ``$AIRFLOW_HOME`` when ``[rbak] state_dir`` is unset.
STATE_DIR_NAME = "rbak-state"
LEDGER_PREFIX = "delivery-limit-stops/"
_RECORDS_PREFIX = f"{LOCATION_STATE_PREFIX}delivery-limit-stops/"
CLEAR_COMMAND = "rbak limit-stops --clear"


def ledger_key(location_url: str, vhost: str, queue: str) -> str:
    """The ledger entry of a stop of ``queue`` in ``vhost`` backed up to ``location_url`` (its URL as the storage
    normalises it): a folder per location, named by a digest of its URL."""
    return f"{_ledger_folder(location_url)}{vhost_dir(vhost)}/{encode_name(queue)}.json"


def _ledger_folder(location_url: str) -> str:
    return f"{LEDGER_PREFIX}{hashlib.sha256(location_url.encode()).hexdigest()[:32]}/"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The ledger's folder for callers without Airflow's configuration: ``AIRFLOW__RBAK__STATE_DIR``, else
    ``$AIRFLOW_HOME/rbak-state`` (``~/airflow`` unset), as ``RbakSettings.state_dir`` reads the option."""
    env = os.environ if environ is None else environ
    configured = (env.get("AIRFLOW__RBAK__STATE_DIR") or "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow") / STATE_DIR_NAME


def open_ledger(state_dir: str | os.PathLike[str]) -> Storage:
    """The ledger in ``state_dir`` (a local or mounted folder, created 0700 by the first stop; never encrypted with
    a location's keys: its entries are sealed)."""
    return open_storage(Path(state_dir).expanduser().resolve().as_uri(), keyring=None)


@dataclass(frozen=True)
class StopRecord:
    """One record of a stop as read back: ``body`` when it opened under the seal, else ``problem`` says why not."""

    where: str  # "location" or "ledger"
    key: str
    body: dict[str, Any] | None = None
    problem: str | None = None

    @property
    def limit(self) -> int | None:
        """The limit a sealed record recorded (None when it is not trusted)."""
        value = (self.body or {}).get("limit")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def queue(self) -> tuple[str, str]:
        """(vhost, queue), from the sealed body, else from the key (a shortened name comes back as stored)."""
        if self.body is not None:
            return str(self.body.get("vhost")), str(self.body.get("queue"))
        parts = self.key.removesuffix(".json").split("/")
        return vhost_from_dir(parts[-2]), decode_name(parts[-1])


class LimitStops:
    """The delivery-limit stops of one location: its sealed records, and the deployment's sealed ledger of them."""

    def __init__(self, location: Storage, ledger: Storage, seal: StateSeal) -> None:
        self.location, self.ledger, self.seal = location, ledger, seal

    def keys(self, vhost: str, queue: str) -> tuple[str, str]:
        """The stop's key in the location and in the ledger."""
        return delivery_limit_stop_key(vhost, queue), ledger_key(self.location.url, vhost, queue)

    def places(self, vhost: str, queue: str) -> str:
        """Both places a stop of the queue is recorded, as a reason names them."""
        here, there = self.keys(vhost, queue)
        return f"{here} in the backup location and {self.ledger.url}/{there} in this deployment's ledger"

    def how_to_clear(self, vhost: str, queue: str) -> str:
        """The command that clears a stop deliberately (both places)."""
        words = ("--path", self.location.url, "--vhost", vhost, "--queue", queue)
        return f"{CLEAR_COMMAND} {shlex.join(words)}"

    def record(self, info: QueueInfo, limit: int, backup_id: str) -> list[str]:
        """Record, sealed in both places, that ``backup_id`` stopped at ``info``'s delivery limit ``limit``; return
        the places it could not be written to (each with its error; empty: both written)."""
        stopped_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"vhost": info.vhost, "queue": info.name, "limit": limit, "backup_id": backup_id,
                "stopped_at": stopped_at, "location": self.location.url}
        failed = []
        try:
            self._make_folder()
        except OSError:
            pass  # the write below says why
        for where, storage, key in self._places(info.vhost, info.name):  # the ledger first: the location can undo itself
            try:
                self.seal.write(storage, PURPOSE, key, body)
            except StorageError as exc:
                failed.append(f"the {where} ({storage.url}/{key}: {exc})")
        return failed

    def read(self, vhost: str, queue: str) -> list[StopRecord]:
        """The queue's records that exist, ledger first; one that cannot be read or opened says why."""
        return [r for where, storage, key in self._places(vhost, queue) if (r := self._read(where, storage, key))]

    def reason(self, info: QueueInfo, limit: int, exact_depth: Callable[[], int]) -> str | None:
        """Why ``info`` must be left out because an earlier capture stopped at its delivery limit, or None.

        ``info`` is the queue as the management API describes it now and ``limit`` its limit now. Both records are
        deleted here once the risk has passed (module docstring): the queue is empty when the management API counts
        no message (ready or unacknowledged) and ``exact_depth`` (asked only then: the management figure is sampled,
        and absent for a new queue) none ready.
        """
        records = self.read(info.vhost, info.name)
        if not records:
            return None
        if info.messages == 0 and exact_depth() == 0:
            self._clear_quietly(info.vhost, info.name, "the queue is empty")
            return None
        raised_from = self._raised_from(records, limit)
        if raised_from is not None:
            self._clear_quietly(info.vhost, info.name, f"its delivery limit was raised from {raised_from} to {limit}")
            return None
        return self._reason_text(info, limit, records)

    @staticmethod
    def _raised_from(records: list[StopRecord], limit: int) -> int | None:
        """The recorded limit ``limit`` is above, when the sealed records show it raised; else None."""
        limits = [r.limit for r in records]
        if not any(r.where == "ledger" for r in records) or None in limits:
            return None
        highest = max(x for x in limits if x is not None)
        return highest if limit > highest else None

    def _reason_text(self, info: QueueInfo, limit: int, records: list[StopRecord]) -> str:
        trusted = [r for r in records if r.body is not None]
        if trusted:
            first = max(trusted, key=lambda r: r.limit or 0).body or {}
            what = (f"backup {str(first.get('backup_id'))[:200]!r} stopped at this queue's delivery limit of "
                    f"{first.get('limit')} (at {str(first.get('stopped_at'))[:40]})")
        else:
            what = f"a capture stopped at this queue's delivery limit (now {limit})"
        found = {r.where for r in records}
        notes = [f"the {r.where}'s record {r.problem}: it counts as a stop, whatever it says" for r in records if r.problem]
        if "location" not in found:
            notes.append("the backup location's record is missing (deleted since the stop?): the ledger's still counts")
        if "ledger" not in found:
            notes.append("this deployment's ledger holds no record of it")
        return (f"{what}: its messages may be one below the limit and another capture would bring them to it"
                f"{'; ' + '; '.join(notes) if notes else ''}. Its records: {self.places(info.vhost, info.name)}; a "
                "backup clears both once it sees the queue empty (or its limit raised above the one the ledger "
                f"recorded, sealed). Once the messages are safe, clear it yourself: {self.how_to_clear(info.vhost, info.name)}")

    def clear(self, vhost: str, queue: str) -> list[str]:
        """Delete the queue's records in both places (the ledger last); return the keys that held one. A delete that
        fails raises ``StorageError`` (what was deleted before it stays deleted)."""
        present = {r.key for r in self.read(vhost, queue)}
        done = []
        for _where, storage, key in reversed(self._places(vhost, queue)):
            if key in present:
                storage.delete(key)
                done.append(key)
        return done

    def _clear_quietly(self, vhost: str, queue: str, why: str) -> None:
        """Clear a stop whose risk has passed; a delete that fails is warned of (the risk has passed either way)."""
        try:
            deleted = self.clear(vhost, queue)
        except StorageError as exc:
            log.warning("could not delete the delivery-limit stop of %s/%s (%s): %s", vhost, queue, why, exc)
            return
        log.info("deleted the delivery-limit stop %s: %s", " and ".join(deleted), why)

    def unwritable(self) -> str | None:
        """Why a stop could not be written to the ledger now (a probe written and deleted), or None."""
        probe = f"{LEDGER_PREFIX}probe-{uuid.uuid4().hex}.tmp"
        try:
            self._make_folder()
            self.ledger.put(probe, b"")
            self.ledger.delete(probe)
        except (OSError, StorageError) as exc:
            return f"{self.ledger.url} cannot be written ({type(exc).__name__}: {str(exc)[:300]})"
        return None

    def all(self) -> Iterator[StopRecord]:
        """Every stop record of this location, in the location and in the ledger, each read on its own (one that
        cannot be read is listed with its problem and hides no other)."""
        for where, storage, prefix in (("ledger", self.ledger, _ledger_folder(self.location.url)),
                                       ("location", self.location, _RECORDS_PREFIX)):
            for info in storage.list(prefix):
                if info.key.endswith(".json"):
                    yield self._read(where, storage, info.key) or StopRecord(where, info.key, problem="is gone")

    def _make_folder(self) -> None:
        """Create a file ledger's folder readable and writable by this account only (the tasks' and ``rbak``'s)."""
        if self.ledger.url.startswith("file://"):
            Path(unquote(urlsplit(self.ledger.url).path)).mkdir(mode=0o700, parents=True, exist_ok=True)

    def _places(self, vhost: str, queue: str) -> list[tuple[str, Storage, str]]:
        here, there = self.keys(vhost, queue)
        return [("ledger", self.ledger, there), ("location", self.location, here)]

    def _read(self, where: str, storage: Storage, key: str) -> StopRecord | None:
        try:
            body = self.seal.read(storage, PURPOSE, key, STOP_LIMITS)
        except UntrustedStateError as exc:
            return StopRecord(where, key, problem=f"fails its seal ({exc.reason})")
        except StorageError as exc:
            return StopRecord(where, key, problem=f"cannot be read ({type(exc).__name__}: {str(exc)[:300]})")
        if body is None:
            return None
        if not isinstance(body, dict) or body.get("location") != self.location.url:
            return StopRecord(where, key, problem="fails its seal (sealed for another location)")
        return StopRecord(where, key, body=body)

