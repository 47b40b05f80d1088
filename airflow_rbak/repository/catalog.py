"""Lists the backups under a storage location with their state, totals and chain dependencies.

A location is written by more than this tool (people, other tools, hosts with wrong clocks, anyone who may
put objects), so what a manifest says is checked before it counts. Only a backup with status ``complete``
counts for ``latest``, freshness and retention's ``keep_last``: its manifest is complete, parses within
the size cap, names its own folder, was not created or completed after the reader's clock plus
:data:`MAX_CLOCK_SKEW_MS`, was not rebuilt by ``rbak manifest rebuild``, and every segment and
definitions object it lists is stored at the size it says. Anything else stays visible with its status and
the reason (``future``, ``rebuilt``, ``damaged``, ...) and is never counted, nor ever deleted by retention.

A folder without a manifest whose only objects are segments that complete
backups still list is a *retired* base: retention removed that backup but
kept the stream segments later backups' chains take from it.

An incomplete backup whose run is gone is *abandoned* (:func:`abandonment`): its ``lock.json`` is readable and was
not renewed for the grace period (``[rbak] abandoned_grace_hours``). A folder without a manifest counts only with
such a lock and no segment (a run that stopped before its manifest). A folder without a lock, or with an unreadable
one, is never taken for abandoned: nothing but its manifest (one object anyone may plant) speaks for it, and its
segments may still make a backup (``rbak manifest rebuild``); it is left to a human.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.journal_layout import is_archive
from airflow_rbak.codec.layout import compression_from_key, is_location_state, lock_key, manifest_key, segment_file
from airflow_rbak.display import package_logger, span
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.chain import dependencies, undeclared_owners
from airflow_rbak.repository.lock import BackupLock, LockInfo, shown
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.encrypted import KeyRequiredError

log = package_logger(__name__)
#: How far ahead of the reader's clock a manifest's times may be and still count (hosts' clocks differ).
MAX_CLOCK_SKEW_MS = 10 * 60 * 1000
#: The statuses a backup may have; only ``complete`` counts for latest, freshness and keep_last.
STATUSES = ("complete", "incomplete", "future", "rebuilt", "damaged", "no-manifest", "retired", "abandoned")
#: How long an incomplete backup's lock may go unrenewed before its run counts as gone (``abandoned_grace_hours``).
DEFAULT_ABANDONED_AFTER_MS = 24 * 3_600_000

@dataclass(frozen=True)
class BackupSummary:
    """One backup as ``rbak list`` shows it; ``status`` is one of :data:`STATUSES`, ``problem`` says why.

    ``depends_on``: the backups whose segments it lists (its stream chains); ``needed_by``: the backups
    that list segments of this one, so retention keeps what they need; ``compression``: the codecs its
    segments' keys name (``zstd``, ``lz4``, ``none``), sorted.
    """

    backup_id: str
    status: str
    created_at: int | None = None
    completed_at: int | None = None
    queues: int = 0
    total_messages: int = 0
    total_bytes: int = 0
    total_segments: int = 0
    problem: str | None = None
    depends_on: tuple[str, ...] = ()
    needed_by: tuple[str, ...] = ()
    compression: tuple[str, ...] = ()
    #: An archive run of a vhost's journal, as its manifest shows (``journal_layout.is_archive``): never a snapshot
    #: (``latest``, freshness and retention's rules count only snapshots). A backup whose manifest cannot be read is not.
    journal_archive: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_backups(storage: Storage, workers: int = 1, *, now_ms: int | None = None,
                 abandoned_after_ms: int = DEFAULT_ABANDONED_AFTER_MS) -> list[BackupSummary]:
    """Every backup under ``storage``, oldest first (those without a readable manifest last).

    One listing of the location gives the backup ids and every object's size, against which each
    manifest is checked. ``workers`` > 1 reads that many manifests at a time: on S3 each read is a
    round trip, so a catalog of hundreds of backups is bound by latency, not by parsing.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stored = {info.key: info.size for info in storage.list("")}
    backup_ids = sorted({key.split("/", 1)[0] for key in stored if "/" in key and not is_location_state(key)})
    store = ManifestStore(storage)

    def summary(backup_id: str) -> BackupSummary:
        return _abandoned_or(storage, _summary(store, backup_id, stored, now_ms), stored, now_ms, abandoned_after_ms)

    if workers > 1 and len(backup_ids) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rbak-catalog") as pool:
            summaries = list(pool.map(summary, backup_ids))
    else:
        summaries = [summary(backup_id) for backup_id in backup_ids]
    dependents: dict[str, list[str]] = {}
    for found in summaries:
        for base in found.depends_on:
            dependents.setdefault(base, []).append(found.backup_id)
    summaries = [_with_dependents(stored, s, tuple(dependents.get(s.backup_id, ()))) for s in summaries]
    return sorted(summaries, key=lambda s: (s.created_at is None, s.created_at or 0, s.backup_id))


def _with_dependents(stored: dict[str, int], summary: BackupSummary, needed_by: tuple[str, ...]) -> BackupSummary:
    prefix = f"{summary.backup_id}/queues/"
    retired = all(key.startswith(prefix) for key in stored if key.startswith(f"{summary.backup_id}/"))
    if summary.status == "no-manifest" and needed_by and retired:
        return replace(summary, status="retired", needed_by=needed_by,
                       problem=f"removed by retention; holds only stream segments that {', '.join(needed_by)} list")
    return replace(summary, needed_by=needed_by)


def latest_complete(storage: Storage, *, now_ms: int | None = None) -> BackupSummary | None:
    """The most recently created snapshot that counts (status ``complete``), for ``backup_id=latest``."""
    complete = [s for s in list_backups(storage, now_ms=now_ms) if s.status == "complete" and not s.journal_archive]
    return complete[-1] if complete else None


#: The backup id that names the newest complete backup of a location, wherever an id is taken.
LATEST = "latest"


class NoCompleteBackupError(RbakError):
    """``latest`` was asked for, and the location holds no complete backup."""


def resolve_backup_id(storage: Storage, backup_id: str) -> str:
    """``backup_id`` itself, or for ``latest`` the id of the newest complete snapshot (the one place ``latest`` means
    something; a journal's archive never is one)."""
    if backup_id != LATEST:
        return backup_id
    summaries = [s for s in list_backups(storage) if not s.journal_archive]
    complete = [s for s in summaries if s.status == "complete"]
    if not complete:
        # say why the newest backup is not complete (a manifest sealed with a key this reader lacks, say)
        reason = next((f" ({s.backup_id}: {s.problem})" for s in reversed(summaries) if s.problem), "")
        raise NoCompleteBackupError(f"{storage.url} holds no complete backup for 'latest'{reason}; give a backup id")
    return complete[-1].backup_id


def _summary(store: ManifestStore, backup_id: str, stored: dict[str, int], now_ms: int) -> BackupSummary:
    try:
        manifest = store.load(backup_id, listed_size=stored.get(manifest_key(backup_id)))
    except ManifestNotFoundError:
        return BackupSummary(backup_id, "no-manifest", problem="no manifest.json; try `rbak manifest rebuild`")
    except KeyRequiredError:
        raise  # the whole location is encrypted and this reader has no key: not one damaged backup
    except RbakError as exc:  # a damaged manifest, a stray folder, a storage fault: still list the rest
        return BackupSummary(backup_id, "damaged", problem=str(exc))
    try:
        depends_on = dependencies(manifest)
    except RbakError as exc:
        return BackupSummary(backup_id, "damaged", problem=str(exc))
    status, problem = _trust(manifest, stored, now_ms)
    return BackupSummary(
        backup_id=backup_id,
        status=status,
        created_at=manifest.created_at,
        completed_at=manifest.completed_at,
        queues=len(manifest.queues),
        total_messages=manifest.total_messages,
        total_bytes=manifest.total_bytes,
        total_segments=manifest.total_segments,
        problem=problem,
        depends_on=depends_on,
        compression=segment_compressions(manifest),
        journal_archive=is_archive(manifest),
    )


def _abandoned_or(storage: Storage, summary: BackupSummary, stored: dict[str, int], now_ms: int,
                  after_ms: int) -> BackupSummary:
    """``summary``, or the same backup as ``abandoned`` when :func:`abandonment` finds its run gone."""
    if summary.status not in ("incomplete", "no-manifest"):
        return summary
    prefix = f"{summary.backup_id}/"
    try:
        lock = BackupLock(storage, summary.backup_id).read() if lock_key(summary.backup_id) in stored else None
    except RbakError as exc:  # a stray folder's name, or a lock that cannot be read now: no evidence either way
        log.warning("cannot tell whether backup %s is abandoned (%s)", summary.backup_id, exc)
        return summary
    segments = any(key.startswith(f"{prefix}queues/") and segment_file(key) for key in stored)
    why = abandonment(lock, summary.status == "incomplete", summary.created_at, segments, now_ms=now_ms,
                      after_ms=after_ms)
    return replace(summary, status="abandoned", problem=why) if why else summary


def abandonment(lock: LockInfo | None, has_manifest: bool, created_at: int | None, holds_segments: bool, *,
                now_ms: int, after_ms: int) -> str | None:
    """Why an incomplete backup's run is gone (see the module docstring), or None when nothing shows it is."""
    if lock is not None and lock.unreadable:
        return None  # no holder to judge: left to a human (rbak unlock)
    if lock is None:
        return None  # only its manifest speaks for it, and one planted object must not make a folder deletable
    if not has_manifest and holds_segments:
        return None  # segments without a manifest may make a backup again: left to `rbak manifest rebuild`
    quiet = now_ms - max(lock.renewed_at, lock.acquired_at)
    if quiet < after_ms:
        return None
    return (f"abandoned: its run {shown(lock.owner)} on {shown(lock.host)} last renewed its lock {span(quiet)} ago; "
            "`rbak forget --abandoned` removes it")


def manifest_status(manifest: BackupManifest, stored: dict[str, int], now_ms: int) -> tuple[str, str | None]:
    """The status a readable manifest earns against a listing (``stored``: key -> size), and why when not complete."""
    return _trust(manifest, stored, now_ms)


def _trust(manifest: BackupManifest, stored: dict[str, int], now_ms: int) -> tuple[str, str | None]:
    """The status a readable manifest earns (see the module docstring), and why when it is not ``complete``."""
    if manifest.completed_at is None:
        return "incomplete", "not finished: no completed_at (still running, or stopped: re-run the same backup_id)"
    if manifest.completed_at < manifest.created_at:
        return "damaged", "completed_at is before created_at"
    ahead = max(manifest.created_at, manifest.completed_at) - now_ms
    if ahead > MAX_CLOCK_SKEW_MS:
        return "future", (f"its times are {span(ahead)} ahead of this clock (more than "
                          f"{MAX_CLOCK_SKEW_MS // 60_000} allowed); not counted until then")
    if "rebuilt" in manifest.extensions:
        return "rebuilt", "rebuilt by `rbak manifest rebuild`; its times are estimates; restore it by its id"
    undeclared = undeclared_owners(manifest)
    if undeclared:
        return "damaged", f"lists segments of {', '.join(undeclared[:3])} without declaring them in depends_on"
    missing = _missing_objects(manifest, stored)
    if missing:
        return "damaged", missing
    return "complete", None


def _missing_objects(manifest: BackupManifest, stored: dict[str, int]) -> str | None:
    """Whether every object the manifest lists is stored at the size it gives; one line naming the first that is not."""
    listed: list[tuple[str, int | None]] = [(s.key, s.size_bytes) for q in manifest.queues for s in q.segments]
    if manifest.definitions is not None:
        listed.append((manifest.definitions.key, None))  # its size_bytes is the uncompressed size
    bad = [(key, size) for key, size in listed if stored.get(key) is None or (size is not None and stored[key] != size)]
    if not bad:
        return None
    key, size = bad[0]
    what = "is not stored" if stored.get(key) is None else f"is {stored[key]} bytes, not the {size} listed"
    return f"{len(bad)} listed object(s) missing or of the wrong size: {key[:200]!r} {what}"


def left_out_queues(manifest: BackupManifest) -> list[dict[str, str]]:
    """The queues a manifest says its run left out (our ``left_out`` extension), as text for people.

    A manifest is untrusted input: entries that are not objects are skipped and every value is read as text, so
    ``describe`` and the view show what a well-formed list says and nothing else can break them.
    """
    entries = manifest.extensions.get("left_out")
    if not isinstance(entries, list):
        return []
    return [{field: str(entry.get(field, "?")) for field in ("vhost", "queue", "queue_type", "reason")}
            for entry in entries if isinstance(entry, dict)]


def segment_compressions(manifest: BackupManifest) -> tuple[str, ...]:
    """The codecs the manifest's segment keys name (``zstd``, ``lz4``, ``none``), sorted; () for no segments."""
    found = {compression_from_key(s.key).name.lower() for q in manifest.queues for s in q.segments}
    return tuple(sorted(found))
