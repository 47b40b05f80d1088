"""Calendar retention keeps exactly what restic's ``forget`` rules keep, and never breaks a kept chain.

The reference below is written from restic's documentation (``forget``, 0.17), not from the code under test:
for each of ``keep_hourly`` … ``keep_yearly`` = N, group the complete backups by their natural calendar period
in the time zone (an ISO week runs Monday to Sunday), take the N most recent periods that hold a backup, and
keep the newest backup of each; when fewer than N periods hold one, the oldest backup is kept too. A backup
kept by any rule (or among the newest ``keep_last``, or the newest of all) stays. Only complete backups count,
and nothing else is ever removed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import BackupSummary, list_backups
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import (
    RetentionPolicy,
    apply_retention,
    removal_reasons,
    retention_decisions,
    select_expired,
)
from airflow_rbak.storage import MemoryStorage

START = datetime(2024, 11, 1, tzinfo=UTC)
TWO_YEARS_MIN = 2 * 366 * 24 * 60
RULES = ("keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly")


def reference_period(rule: str, when: datetime) -> tuple[int, ...]:
    """The natural period ``when`` (already in the zone) falls in, keyed independently of the code under test."""
    if rule == "keep_hourly":
        return (when.year, when.month, when.day, when.hour)
    if rule == "keep_daily":
        return (when.year, when.month, when.day)
    if rule == "keep_weekly":  # the Monday that starts the week
        return (when.date() - timedelta(days=when.weekday())).timetuple()[:3]
    if rule == "keep_monthly":
        return (when.year, when.month)
    return (when.year,)


def reference_kept(backups: list[tuple[str, int]], counts: dict[str, int | None], keep_last: int | None,
                   zone: str) -> set[str]:
    """restic's rules over complete backups ``(id, created_at ms)``; the newest is always kept (this tool's rule)."""
    if not backups:
        return set()
    order = sorted(backups, key=lambda b: (b[1], b[0]))
    kept = {order[-1][0]} | {b[0] for b in order[::-1][: keep_last or 0]}
    for rule, wanted in counts.items():
        if not wanted:
            continue
        by_period: dict[tuple[int, ...], list[tuple[str, int]]] = {}
        for b in order:
            by_period.setdefault(reference_period(rule, datetime.fromtimestamp(b[1] / 1000, ZoneInfo(zone))), []).append(b)
        # periods ordered by their newest backup, most recent first (a zone's repeated hour still sorts right)
        periods = sorted(by_period.values(), key=lambda members: max((m[1], m[0]) for m in members), reverse=True)
        kept |= {max(members, key=lambda m: (m[1], m[0]))[0] for members in periods[:wanted]}
        if len(periods) < wanted:
            kept.add(order[0][0])
    return kept


count = st.one_of(st.none(), st.integers(1, 40))
history = st.lists(st.integers(0, TWO_YEARS_MIN), min_size=1, max_size=120, unique=True)


@settings(max_examples=300, deadline=None)
@given(history=history, keep_last=count, counts=st.fixed_dictionaries({r: count for r in RULES}),
       zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"]),
       others=st.lists(st.sampled_from(["incomplete", "damaged", "future", "rebuilt", "no-manifest"]), max_size=4))
def test_each_calendar_rule_keeps_exactly_what_restics_rules_keep(history, keep_last, counts, zone, others):
    # Given two years of complete backups at generated minutes, and some that are not complete
    complete = [(f"b{i:03d}", int((START + timedelta(minutes=m)).timestamp() * 1000)) for i, m in enumerate(history)]
    summaries = [BackupSummary(b, "complete", created_at=at, completed_at=at + 1000) for b, at in complete]
    summaries += [BackupSummary(f"x{i}", status, created_at=complete[0][1]) for i, status in enumerate(others)]
    policy = RetentionPolicy(keep_last=keep_last, timezone=zone, **counts)
    now = max(at for _, at in complete) + 1000

    # When retention decides
    expired = set(select_expired(summaries, policy, now_ms=now, protect=""))
    reasons = retention_decisions(summaries, policy, now_ms=now, protect="")

    # Then the kept complete backups are exactly restic's, the others are never candidates, and each has a reason
    all_ids = {b for b, _ in complete}
    if policy.active:
        assert all_ids - expired == reference_kept(complete, counts, keep_last, zone)
    else:
        assert expired == set()
    assert all(reasons[f"x{i}"] for i in range(len(others)))
    assert {b for b, why in reasons.items() if why is None} == expired
    because = removal_reasons(summaries, policy, now_ms=now, protect="")
    assert set(because) == expired and all(because.values())


def test_the_reasons_name_every_period_a_backup_is_kept_for_and_what_was_kept_instead():
    at = [datetime(2026, 11, d, h, tzinfo=UTC) for d, h in ((24, 9), (25, 9), (25, 18), (26, 9))]
    summaries = [BackupSummary(f"b{i}", "complete", created_at=int(t.timestamp() * 1000),
                               completed_at=int(t.timestamp() * 1000) + 1) for i, t in enumerate(at)]
    policy = RetentionPolicy(keep_daily=2, keep_monthly=3)
    now = summaries[-1].completed_at + 1

    reasons = retention_decisions(summaries, policy, now_ms=now, protect="b3")
    because = removal_reasons(summaries, policy, now_ms=now, protect="b3")

    assert reasons == {"b3": "the backup just written; daily 2026-11-26, monthly 2026-11",
                       "b2": "daily 2026-11-25", "b1": None, "b0": "oldest monthly (1 of 3 periods have backups)"}
    assert because == {"b1": "daily 2026-11-25 keeps the newer b2; monthly 2026-11 keeps the newer b3"}


def test_a_weekly_rule_counts_iso_weeks_in_the_configured_zone():
    # Sunday 23:30 UTC is already Monday in Berlin: a new ISO week there, the same week in UTC
    times = {"prev": datetime(2026, 11, 9, 12, 0, tzinfo=UTC), "sun": datetime(2026, 11, 22, 20, 0, tzinfo=UTC),
             "mon": datetime(2026, 11, 22, 23, 30, tzinfo=UTC)}
    summaries = [BackupSummary(name, "complete", created_at=int(t.timestamp() * 1000),
                               completed_at=int(t.timestamp() * 1000)) for name, t in times.items()]
    now = summaries[-1].completed_at + 1
    berlin = RetentionPolicy(keep_weekly=2, timezone="Europe/Berlin")

    assert select_expired(summaries, RetentionPolicy(keep_weekly=2), now_ms=now, protect="") == ["sun"]
    assert select_expired(summaries, berlin, now_ms=now, protect="") == ["prev"]
    assert retention_decisions(summaries, berlin, now_ms=now, protect="")["mon"] == "the newest complete backup; weekly 2026-W48"


@pytest.mark.parametrize("value", [{"keep_daily": 0}, {"keep_weekly": True}, {"keep_monthly": 1.5}, {"timezone": "Mars/Base"},
                                   {"keep_fortnightly": 2}])
def test_bad_calendar_settings_are_refused_with_the_setting_named(value):
    with pytest.raises(ConfigurationError, match="keep_daily|keep_weekly|keep_monthly|timezone|keep_fortnightly"):
        RetentionPolicy.from_json(value)


def _chain_history(storage: MemoryStorage, plan: list[tuple[int, bool]]) -> dict[str, list[str]]:
    """Backups of stream v/s, each at its hour; a ``True`` continues the previous backup's chain. Returns what each lists."""
    store, listed, previous = ManifestStore(storage), {}, None
    for i, (hour, continues) in enumerate(plan):
        backup_id = f"c{i:03d}"
        own = f"{backup_id}/queues/v/s/segment-0001.zst"
        storage.put(own, b"data")
        keys = ([*listed[previous], own] if continues and previous else [own])
        segments = [SegmentMetadata(k, n, 1, 4, 4, None, None, "0" * 64) for n, k in enumerate(keys, 1)]
        owners = sorted({k.split("/", 1)[0] for k in keys} - {backup_id})
        at = int((START + timedelta(hours=hour)).timestamp() * 1000)
        store.save(BackupManifest(backup_id, at, "0", completed_at=at + 1, extensions={"depends_on": owners},
                                  queues=[QueueBackup("v", "s", "stream", segments, message_count=len(keys),
                                                      extensions={"chain_base": previous if continues else None})]))
        listed[backup_id], previous = keys, backup_id
    return listed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.tuples(st.integers(0, 2 * 366 * 24), st.booleans()), min_size=2, max_size=40,
                     unique_by=lambda p: p[0]).map(sorted),
       counts=st.fixed_dictionaries({r: count for r in RULES}).filter(lambda c: any(c.values())))
def test_no_kept_chain_loses_a_segment(plan, counts):
    # Given two years of stream backups, many continuing the one before (a chain through expired backups)
    storage = MemoryStorage()
    listed = _chain_history(storage, plan)
    now = int((START + timedelta(days=800)).timestamp() * 1000)

    # When calendar retention runs under the chain lock
    result = apply_retention(storage, RetentionPolicy(**counts), now_ms=now, protect=None,
                             chain_lock=ChainLock(storage, "test", confirm_after=0))

    # Then every backup it keeps is still complete with every segment it lists, and only the expired ones are gone
    remaining = {b.backup_id: b for b in list_backups(storage, now_ms=now)}
    kept = set(listed) - set(result.deleted)
    assert kept == set(result.kept) and all(remaining[b].status == "complete" for b in kept)
    assert all(storage.exists(key) for b in kept for key in listed[b])
    assert all(remaining[b].status == "retired" for b in result.deleted if b in remaining)
    assert storage.exists("c000/queues/v/s/segment-0001.zst") == any(listed[b][0].startswith("c000/") for b in kept)


def test_forget_dry_run_says_why_each_backup_stays_or_goes_and_removes_nothing(tmp_path, capsys):
    # Given a folder location with backups on three days of November and one in October
    from airflow_rbak.cli.main import main as rbak
    from airflow_rbak.storage import open_storage

    storage = open_storage((tmp_path / "loc").as_uri())
    for name, when in (("oct-30", datetime(2026, 10, 30, 2)), ("nov-24", datetime(2026, 11, 24, 2)),
                       ("nov-25a", datetime(2026, 11, 25, 2)), ("nov-25b", datetime(2026, 11, 25, 14))):
        at = int(when.replace(tzinfo=UTC).timestamp() * 1000)
        ManifestStore(storage).save(BackupManifest(name, at, "0", completed_at=at + 60_000))
    before = sorted(i.key for i in storage.list(""))

    # When `rbak forget --dry-run` runs with daily and monthly rules
    code = rbak(["forget", "--path", storage.url, "--keep-daily", "2", "--keep-monthly", "2", "--dry-run"])

    # Then it names what each rule keeps and why the rest would go, and nothing is removed
    assert code == 0 and sorted(i.key for i in storage.list("")) == before
    assert capsys.readouterr().out.splitlines() == [
        "would remove 1 backup(s), 1 objects",
        "  would remove nov-25a: daily 2026-11-25 keeps the newer nov-25b; monthly 2026-11 keeps the newer nov-25b",
        "  keep nov-25b: the newest complete backup; daily 2026-11-25, monthly 2026-11",
        "  keep nov-24: daily 2026-11-24",
        "  keep oct-30: monthly 2026-10",
    ]
