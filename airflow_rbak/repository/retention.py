"""Which old backups a retention policy removes, and removing them (no Airflow here).

Only backups that are complete *and* superseded by a newer complete backup
are ever candidates, and the one just written is never one: an incomplete or
damaged backup may be the only copy of something, so retention leaves it to
a human. A backup is kept when any configured rule keeps it (among the
newest ``keep_last``, younger than ``max_age_days``, or the newest of one of
the periods a calendar rule keeps, :mod:`airflow_rbak.repository.calendar_rules`);
with no rule set nothing is removed. A policy may carry a *floor*, the
administrator's rule (``[rbak] retention``): a backup the floor keeps is kept
whatever the policy's own rules say, so a run's param can only add to what the
administrator keeps (:mod:`airflow_rbak.repository.retention_bounds`). Each kept backup carries every rule that
keeps it, and each removed one why every rule passed it over.

Streams form chains (:mod:`airflow_rbak.repository.chain`): a kept backup may
list segments that an expired one holds. Removing that backup then removes
its manifest, definitions, state and every object no kept backup lists, and
keeps exactly the segments kept backups list (its folder becomes *retired*).
A retired folder's segments go once no kept backup lists them. Whenever a
manifest cannot be read, what it lists is unknown, so no stream segment of
an expired or retired backup is removed at all. Every decision is logged
with its reason.

Retention never deletes what a kept or running backup needs. A pass holds the
location's chain lock (:mod:`airflow_rbak.repository.chain_link`) from its first
read to its last delete, and checks that lock before every delete; a run holds
the same lock while it picks the base a stream continues from and while it
links its chains and writes its completed manifest. So a pass sees every
completed manifest's chain whole, and a run's link never races a delete: it
checks that every segment it lists from other backups is still there and
fails, naming the base, rather than complete a manifest with a hole. A backup
that is not complete and holds its ``lock.json`` is *running* (or crashed,
until ``rbak unlock``): its base is not yet written anywhere, and it continues
from the newest complete backup of each stream as it was when it captured, so
while any run is in progress no complete backup that holds a stream expires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_rbak.codec.layout import check_backup_id, lock_key, manifest_key
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.calendar_rules import CALENDAR_RULES, Dated, calendar_verdict, time_zone
from airflow_rbak.repository.catalog import BackupSummary, list_backups
from airflow_rbak.repository.chain import referenced_keys
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.lock import LeasedStorage
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage.base import ObjectLockedError, Storage

_DAY_MS = 86_400_000
log = package_logger(__name__)


@dataclass(frozen=True)
class RetentionPolicy:
    """Which complete backups stay: the newest ``keep_last``, those younger than ``max_age_days``, and restic's
    calendar rules (``keep_hourly`` … ``keep_yearly``, :mod:`airflow_rbak.repository.calendar_rules`) in ``timezone``."""

    keep_last: int | None = None
    max_age_days: float | None = None
    keep_hourly: int | None = None
    keep_daily: int | None = None
    keep_weekly: int | None = None
    keep_monthly: int | None = None
    keep_yearly: int | None = None
    timezone: str = "UTC"
    #: The administrator's rule this policy never keeps less than (``[rbak] retention``): a backup it keeps stays
    #: whatever this policy's own rules say (:mod:`airflow_rbak.repository.retention_bounds`); None for none.
    floor: RetentionPolicy | None = None

    def __post_init__(self) -> None:
        for name in COUNT_SETTINGS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"retention {name} must be an integer >= 1, got {value!r}")
        if self.max_age_days is not None and not self.max_age_days > 0:
            raise ConfigurationError(f"retention max_age_days must be > 0, got {self.max_age_days!r}")
        time_zone(self.timezone)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> RetentionPolicy:
        """From the DAG's ``retention`` param (``null`` or e.g. ``{"keep_daily": 7, "keep_monthly": 12}``)."""
        value = dict(value or {})
        unknown = set(value) - set(SETTINGS)
        if unknown:
            raise ConfigurationError(f"unknown retention settings {sorted(unknown)}; use {', '.join(SETTINGS)}")
        if value.get("timezone") is None:
            value.pop("timezone", None)
        return cls(**value)

    @property
    def active(self) -> bool:
        """Whether any rule is set, this policy's own or its floor's: with none, nothing is removed."""
        return self.own_rules_active or (self.floor is not None and self.floor.active)

    @property
    def own_rules_active(self) -> bool:
        return any(getattr(self, name) is not None for name in (*COUNT_SETTINGS, "max_age_days"))

    def rules(self) -> dict[str, Any]:
        """The rules set, by setting name (the timezone only when a calendar rule is set), as the param writes them."""
        found = {name: getattr(self, name) for name in (*COUNT_SETTINGS, "max_age_days") if getattr(self, name) is not None}
        if any(self.calendar_counts().values()):
            found["timezone"] = self.timezone
        return found

    def calendar_counts(self) -> dict[str, int | None]:
        return {setting: getattr(self, setting) for _, setting, _ in CALENDAR_RULES}


#: The settings that count backups or periods (each an integer >= 1 or unset).
COUNT_SETTINGS = ("keep_last", *(setting for _, setting, _ in CALENDAR_RULES))
#: Every setting of a policy, as the ``retention`` param and ``rbak forget`` name them.
SETTINGS = (*COUNT_SETTINGS, "max_age_days", "timezone")


def retention_decisions(
    backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str,
    continued: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, str | None]:
    """For each backup id, why it is kept (every rule that keeps it), or None when ``policy`` removes it.

    ``continued``: backups holding streams that running backups (the values) may continue from, kept for them.
    """
    return {k: v[0] for k, v in _verdicts(backups, policy, now_ms=now_ms, protect=protect, continued=continued).items()}


def removal_reasons(backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str,
                    continued: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, str]:
    """For each backup ``policy`` removes, why no rule keeps it (what each rule kept instead)."""
    verdicts = _verdicts(backups, policy, now_ms=now_ms, protect=protect, continued=continued)
    return {k: v[1] for k, v in verdicts.items() if v[0] is None}


def _verdicts(backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str,
              continued: Mapping[str, tuple[str, ...]] | None) -> dict[str, tuple[str | None, str]]:
    """Each backup's (why kept, or None) and (why each rule passed it over): the union of the policy and its floor."""
    own = _own_verdicts(backups, policy, now_ms=now_ms, protect=protect, continued=continued)
    floor = policy.floor
    if floor is None or not floor.active:
        return own
    if not policy.own_rules_active:
        return _own_verdicts(backups, floor, now_ms=now_ms, protect=protect, continued=continued)
    configured = _own_verdicts(backups, floor, now_ms=now_ms, protect=protect, continued=continued)
    verdicts: dict[str, tuple[str | None, str]] = {}
    for backup_id, (kept, passed) in own.items():
        floor_kept, floor_passed = configured[backup_id]
        if kept is None and floor_kept is not None:
            verdicts[backup_id] = (f"the configured retention keeps it: {floor_kept}", "")
        elif kept is None:
            verdicts[backup_id] = (None, f"{passed}; the configured retention: {floor_passed}" if floor_passed else passed)
        else:
            verdicts[backup_id] = (kept, passed)
    return verdicts


def _own_verdicts(backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str,
                  continued: Mapping[str, tuple[str, ...]] | None) -> dict[str, tuple[str | None, str]]:
    continued = continued or {}
    verdicts: dict[str, tuple[str | None, str]] = {
        b.backup_id: (f"retired: holds only segments that {', '.join(b.needed_by)} list" if b.status == "retired"
                      else "abandoned: its run is gone; removed with its staging after the grace period (rbak forget "
                           "--abandoned)" if b.status == "abandoned"
                      else f"{b.status}: left to a human", "") for b in backups if b.status != "complete"}
    complete = sorted((b for b in backups if b.status == "complete"), key=lambda b: (b.created_at or 0, b.backup_id))
    newest_first = list(reversed(complete))
    kept_by_count = {b.backup_id for b in newest_first[: policy.keep_last or 0]}
    calendar = calendar_verdict([Dated(b.backup_id, b.created_at or 0) for b in newest_first], policy.calendar_counts(),
                                time_zone(policy.timezone))
    for position, backup in enumerate(newest_first):
        if not policy.own_rules_active:
            verdicts[backup.backup_id] = ("no retention rule set", "")
            continue
        young = policy.max_age_days is not None and (now_ms - (backup.completed_at or 0)) < policy.max_age_days * _DAY_MS
        reasons = [
            *(["the backup just written"] if backup.backup_id == protect else []),
            # the newest complete backup supersedes, it is never superseded
            *(["the newest complete backup"] if position == 0 and backup.backup_id != protect else []),
            *([f"among the newest {policy.keep_last} complete backups (keep_last)"]
              if backup.backup_id in kept_by_count and backup.backup_id != protect and position else []),
            *([", ".join(calendar.kept_for[backup.backup_id])] if calendar.kept_for[backup.backup_id] else []),
            *([f"younger than {policy.max_age_days} days (max_age_days)"] if young else []),
            *([f"holds streams that running backups ({', '.join(continued[backup.backup_id])}) may continue from"]
              if backup.backup_id in continued else []),
        ]
        passed = [f"not among the newest {policy.keep_last} (keep_last)"] if policy.keep_last else []
        passed += calendar.passed_over[backup.backup_id]
        passed += [f"older than {policy.max_age_days} days (max_age_days)"] if policy.max_age_days else []
        verdicts[backup.backup_id] = ("; ".join(reasons) or None, "; ".join(passed))
    return verdicts


def select_expired(backups: list[BackupSummary], policy: RetentionPolicy, *, now_ms: int, protect: str,
                   continued: Mapping[str, tuple[str, ...]] | None = None) -> list[str]:
    """The ids of the backups ``policy`` removes, oldest first; never ``protect``, never an incomplete one."""
    reasons = retention_decisions(backups, policy, now_ms=now_ms, protect=protect, continued=continued)
    complete = sorted((b for b in backups if b.status == "complete"), key=lambda b: (b.created_at or 0, b.backup_id))
    return [b.backup_id for b in complete if reasons[b.backup_id] is None]


def delete_backup(storage: Storage, backup_id: str, keep: frozenset[str] | set[str] = frozenset(),
                  hidden: list[str] | None = None) -> int:
    """Remove every object of one backup except ``keep``, its manifest first (a half-removed backup never
    looks complete); return how many objects were removed.

    Each object is purged, every stored version of it (:meth:`~airflow_rbak.storage.base.Storage.purge`): on a
    versioned bucket a plain delete would only hide the backup. Keys this credential could only hide behind a delete
    marker go into ``hidden``. Keys a delete marker already hides (the run's own state, removed as it went) are
    purged too.
    """
    prefix = f"{check_backup_id(backup_id)}/"
    stored = {info.key for info in storage.list(prefix)} | set(storage.hidden_keys(prefix))
    keys = sorted(stored - set(keep))
    manifest = manifest_key(backup_id)
    for key in ([manifest] if manifest in keys else []) + [key for key in keys if key != manifest]:
        if not storage.purge(key) and hidden is not None:
            hidden.append(key)
    return len(keys)


@dataclass
class RetentionResult:
    """What one retention pass did: removed backups, segments kept for others' chains, and why each stayed."""

    deleted: list[str] = field(default_factory=list)
    segments_kept_for_chains: dict[str, int] = field(default_factory=dict)
    objects_deleted: int = 0
    kept: dict[str, str] = field(default_factory=dict)
    #: Why each removed backup is not kept: what each rule kept instead.
    removed_because: dict[str, str] = field(default_factory=dict)
    #: Nothing was deleted: ``deleted`` and ``objects_deleted`` say what the pass would remove.
    dry_run: bool = False
    #: Backups the policy expires that the storage still locks (S3 Object Lock), each with its latest retain-until
    #: date (ISO 8601, UTC): skipped whole, removed by the first pass after that date.
    locked_until: dict[str, str] = field(default_factory=dict)
    #: Keys only hidden behind a delete marker: this credential may not delete versions (left to a lifecycle rule).
    hidden: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _needed_keys(storage: Storage, backups: list[BackupSummary], expired: set[str]) -> tuple[dict[str, set[str]], bool]:
    """Segment keys that backups staying after this pass list (with who lists them); and whether all were readable.

    Every staying backup whose manifest can be read counts, whatever its status; one that cannot makes the
    answer incomplete.
    """
    store = ManifestStore(storage)
    staying, all_readable = [], not any(b.status == "damaged" for b in backups)
    for backup in backups:
        if backup.backup_id in expired or backup.status in ("no-manifest", "retired", "damaged"):
            continue
        try:
            staying.append(store.load(backup.backup_id))
        except RbakError as exc:
            log.warning("retention cannot read the manifest of backup %s (%s)", backup.backup_id, exc)
            all_readable = False
    return referenced_keys(staying), all_readable


def _stream_segment_keys(storage: Storage, backup_id: str) -> set[str]:
    manifest = ManifestStore(storage).load(backup_id)
    return {s.key for q in manifest.queues if q.queue_type == "stream" for s in q.segments}


def running_backups(storage: Storage, backups: list[BackupSummary]) -> tuple[str, ...]:
    """Backups being written: not complete, and holding their ``lock.json`` (a crashed run's counts until its lease has
    lapsed for ``[rbak] abandoned_grace_hours``: then the catalog calls it ``abandoned``)."""
    return tuple(b.backup_id for b in backups if b.status not in ("complete", "abandoned") and _locked(storage, b.backup_id))


def _locked(storage: Storage, backup_id: str) -> bool:
    try:
        return storage.exists(lock_key(backup_id))
    except ConfigurationError:  # a stray folder whose name is no backup id: no run writes there
        return False


def _holds_stream(storage: Storage, backup_id: str) -> bool:
    """Whether a backup lists a stream (a manifest that cannot be read is taken to)."""
    try:
        return any(q.queue_type == "stream" for q in ManifestStore(storage).load(backup_id).queues)
    except RbakError:
        return True


def apply_retention(storage: Storage, policy: RetentionPolicy, *, now_ms: int, protect: str | None,
                    chain_lock: ChainLock | None = None, dry_run: bool = False) -> RetentionResult:
    """Remove what the policy expires, keeping every segment a remaining or running backup needs; log each decision.

    With a rule set, the pass runs under the location's chain lock (``chain_lock``, or one owned by this
    pass) and every delete checks that it still holds it. ``protect``: a backup never removed (the one just
    written; None for none). ``dry_run`` decides the same and deletes nothing (nor takes the lock, which is a write).
    """
    if not policy.active or dry_run:  # nothing is deleted: no lock needed to say what would go and why each stays
        return _apply(storage, policy, now_ms=now_ms, protect=protect or "", dry_run=dry_run)
    chain_lock = chain_lock or ChainLock(storage, f"retention after backup {protect}" if protect else "retention")
    with chain_lock.held() as held:
        return _apply(LeasedStorage(storage, held), policy, now_ms=now_ms, protect=protect or "")


def _apply(storage: Storage, policy: RetentionPolicy, *, now_ms: int, protect: str, dry_run: bool = False) -> RetentionResult:
    listed = list_backups(storage, now_ms=now_ms)
    backups = [b for b in listed if not b.journal_archive]  # the rules count snapshots only
    running = running_backups(storage, backups) if policy.active else ()
    candidates = select_expired(backups, policy, now_ms=now_ms, protect=protect)
    continued = {b: running for b in candidates if running and _holds_stream(storage, b)}
    reasons = retention_decisions(backups, policy, now_ms=now_ms, protect=protect, continued=continued)
    result = RetentionResult(kept={k: v for k, v in reasons.items() if v is not None}, dry_run=dry_run)
    expired = [b for b in candidates if b not in continued]
    because = removal_reasons(backups, policy, now_ms=now_ms, protect=protect, continued=continued)
    result.removed_because = {b: because.get(b, "") for b in expired}
    if policy.active:
        past_use = journal_archives_past_use([b for b in listed if b.journal_archive], backups, set(expired))
        expired += list(past_use)
        result.removed_because.update(past_use)
    retired = [b.backup_id for b in backups if b.status == "retired"]
    for backup_id, reason in result.kept.items():
        log.info("retention keeps backup %s: %s", backup_id, reason)
    if not policy.active or (not expired and not retired):
        return result
    _delete(storage, listed, expired, retired, result, now_ms)
    return result


def journal_archives_past_use(archives: list[BackupSummary], snapshots: list[BackupSummary],
                              expired: set[str]) -> dict[str, str]:
    """The journal archives no recovery can use any more, with why: per vhost, those that completed before the oldest
    snapshot that stays, but the newest of them (a recovery from that snapshot replays from the last clock mark
    before it, which may lie in that archive). Nothing when no complete snapshot stays."""
    kept = [s.created_at for s in snapshots if s.status == "complete" and s.backup_id not in expired and s.created_at]
    if not kept:
        return {}
    oldest = min(kept)
    before: dict[str, list[BackupSummary]] = {}
    for archive in archives:
        if archive.status == "complete" and archive.completed_at is not None and archive.completed_at <= oldest:
            before.setdefault(archive.backup_id.rsplit("-", 1)[-1], []).append(archive)
    return {a.backup_id: f"a journal archive that completed before the oldest snapshot kept (created {oldest}): no "
                         "recovery to a point in time can use it"
            for found in before.values() for a in sorted(found, key=lambda a: a.completed_at or 0)[:-1]}


def _still_locked(storage: Storage, backup_id: str, keys: set[str], now_ms: int, result: RetentionResult) -> bool:
    """Whether the storage still locks any of ``keys`` (S3 Object Lock): then the whole backup is skipped, not half
    removed, and the result says until when."""
    now = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    try:
        locks = [until for key, until in storage.locked_until(f"{backup_id}/", now).items() if key in keys]
    except ObjectLockedError as unreadable:  # the locks cannot be read: skipped, not guessed
        _record_lock(backup_id, None, result)
        log.warning("retention skips backup %s: %s", backup_id, unreadable)
        return True
    if locks:
        _record_lock(backup_id, max(locks), result)
    return bool(locks)


def _record_lock(backup_id: str, until: datetime | None, result: RetentionResult) -> None:
    when = until.astimezone(timezone.utc).isoformat() if until else "a date the storage did not tell"
    result.locked_until[backup_id] = when
    result.removed_because.pop(backup_id, None)
    log.info("retention keeps backup %s: the storage locks it until %s (Object Lock); a later pass removes it", backup_id, when)


def _delete(storage: Storage, backups: list[BackupSummary], expired: list[str], retired: list[str],
            result: RetentionResult, now_ms: int) -> None:
    needed, all_readable = _needed_keys(storage, backups, set(expired))
    keep = set(needed)
    if not all_readable:
        log.warning("retention keeps every stream segment of expired and retired backups: a damaged manifest may list them")
        keep |= {key for backup_id in expired for key in _stream_segment_keys(storage, backup_id)}
        keep |= {info.key for backup_id in retired for info in storage.list(f"{backup_id}/")}
    verb = "would remove" if result.dry_run else "removes"
    for backup_id in retired + expired:  # retired folders first: a crash then leaves expired manifests, not orphans
        stored = {info.key for info in storage.list(f"{backup_id}/")} | set(storage.hidden_keys(f"{backup_id}/"))
        held = stored & keep
        if _still_locked(storage, backup_id, stored - held, now_ms, result):
            continue
        try:
            result.objects_deleted += len(stored - held) if result.dry_run else delete_backup(
                storage, backup_id, keep=held, hidden=result.hidden)
        except ObjectLockedError as locked:  # the storage's clock disagrees with ours: its refusal stands
            _record_lock(backup_id, locked.until, result)
            continue
        if held:
            users = sorted({user for key in held for user in needed.get(key, ())})
            result.segments_kept_for_chains[backup_id] = len(held)
            log.info("retention %s backup %s but keeps %d of its stream segments: %s list them in their chains",
                     verb, backup_id, len(held), ", ".join(users) or "an unreadable manifest may")
        else:
            log.info("retention %s backup %s entirely: no remaining backup lists any of its objects", verb, backup_id)
        if backup_id in expired:
            result.deleted.append(backup_id)
