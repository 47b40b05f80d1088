"""The ``rbak`` subcommands that act on a whole location rather than one backup: ``forget`` (retention and
abandoned backups), ``copy`` (a second copy), ``export`` (a plain copy), ``retire-key`` and ``location``.

Each takes parsed arguments and an output stream and returns an exit code, as the per-backup commands of
:mod:`airflow_rbak.cli.commands` do; every line goes out through :mod:`airflow_rbak.cli.output`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import IO

from airflow_rbak.cli.configured import command_settings, existing_location
from airflow_rbak.cli.output import json_line, listed, say
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.abandoned import AbandonedResult, remove_abandoned
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.repository.retention import SETTINGS as RETENTION_SETTINGS
from airflow_rbak.repository.retention import RetentionPolicy, RetentionResult, apply_retention
from airflow_rbak.repository.retention_bounds import shortfalls
from airflow_rbak.repository.second_copy import COPIED, REFUSED, copy_backups
from airflow_rbak.storage import EncryptedStorage, open_storage
from airflow_rbak.storage.export import export_location
from airflow_rbak.storage.key_retirement import retire_key


def forget_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Retention on demand: the rbak_backup DAG's ``retention`` (:mod:`airflow_rbak.repository.retention`), chain-aware;
    with ``--abandoned``, the abandoned backups removed too (:mod:`airflow_rbak.repository.abandoned`).

    The flags apply as given (this is the administrator's tool), with a note when they keep less than the
    configured ``[rbak] retention``.
    """
    policy = _policy(args)
    if not policy.active and not args.abandoned:
        raise ConfigurationError("say what to keep: --keep-last N, --keep-daily N (hourly, weekly, monthly, yearly) "
                                 "and/or --max-age-days D; or remove abandoned backups with --abandoned")
    storage = existing_location(args)
    _note_below_configured(policy, args)
    now = int(time.time() * 1000)
    result = apply_retention(storage, policy, now_ms=now, protect=None, dry_run=args.dry_run,
                             chain_lock=ChainLock(storage, "rbak forget", wait=max(0.0, args.wait))) if policy.active else None
    gone = remove_abandoned(storage, now_ms=now, after_ms=_abandoned_after_ms(args), dry_run=args.dry_run,
                            chain_lock=ChainLock(storage, "rbak forget --abandoned", wait=max(0.0, args.wait))
                            ) if args.abandoned else None
    if args.format == "json":
        json_line(out, {**(result.to_json() if result else {}), **({"abandoned": gone.to_json()} if gone else {})})
        return 1 if gone and gone.errors else 0
    verb = "would remove" if args.dry_run else "removed"
    if result is not None:
        _say_retention(out, result, verb)
    if gone is not None:
        _say_abandoned(out, gone, verb)
    return 1 if gone and gone.errors else 0


def _note_below_configured(policy: RetentionPolicy, args: argparse.Namespace) -> None:
    """A note on stderr when the flags keep less than ``[rbak] retention`` (scheduled runs keep that much)."""
    if not policy.active:
        return
    configured = command_settings(args).configured_retention("retention")
    short = shortfalls(policy, configured)
    if short:
        print(f"rbak: note: these flags keep less than [rbak] retention {json.dumps(configured.rules())} "
              f"({', '.join(short)}); applying them as given", file=sys.stderr)


def _abandoned_after_ms(args: argparse.Namespace) -> int:
    if args.abandoned_after_hours is not None:
        return int(args.abandoned_after_hours * 3_600_000)
    return command_settings(args).abandoned_after_ms()


def _say_retention(out: IO[str], result: RetentionResult, verb: str) -> None:
    say(out, f"{verb} {len(result.deleted)} backup(s), {result.objects_deleted} objects")
    for backup_id in result.deleted:
        kept = result.segments_kept_for_chains.get(backup_id)
        say(out, f"  {verb} {backup_id}" + (f" (keeping {kept} stream segments other backups list)" if kept else "")
            + (f": {result.removed_because[backup_id]}" if result.removed_because.get(backup_id) else ""))
    for backup_id, reason in result.kept.items():
        say(out, f"  keep {backup_id}: {reason}")
    for backup_id, until in result.locked_until.items():
        say(out, f"  locked {backup_id} until {until}: expired, but the storage refuses its deletion until then "
                 "(Object Lock); a forget after that date removes it")
    if result.hidden:
        say(out, f"  hidden only: {listed(result.hidden)}: this credential may not delete object versions, so they "
                 "stay behind delete markers until the bucket's lifecycle rule expires them")


def _say_abandoned(out: IO[str], gone: AbandonedResult, verb: str) -> None:
    say(out, f"{verb} {len(gone.removed)} abandoned backup(s), {gone.objects_deleted} objects")
    for backup_id in gone.removed:
        kept = gone.objects_kept.get(backup_id)
        say(out, f"  {verb} {backup_id}" + (f" (keeping {kept} objects other backups list)" if kept else ""))
    for backup_id, why in {**gone.skipped, **gone.errors}.items():
        say(out, f"  ! left {backup_id}: {why}")


def location_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Whether the location's backups outlive a credential that can write there (S3 Object Lock)."""
    storage = existing_location(args)
    found = storage.immutability()
    if args.format == "json":
        json_line(out, {"url": storage.url, **found.to_json()})
        return 0
    say(out, f"location:  {storage.url}")
    say(out, f"immutable: {found.summary}")
    for name, value in found.details:
        say(out, f"  {name}: {value}")
    return 0


def export_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """A plain copy of the location (:func:`~airflow_rbak.storage.export.export_location`); exit 1 naming each object
    that could not be opened, every other one copied."""
    result = export_location(existing_location(args), open_storage(args.to, keyring=None))
    if args.format == "json":
        json_line(out, result.to_json())
    else:
        say(out, f"copied {result.objects} objects ({result.bytes} bytes) from {result.source} to {result.target}, "
                 "unencrypted")
        for key, why in result.refused.items():
            say(out, f"  ! not copied: {why}" if key in why else f"  ! not copied: {key}: {why}")
    return 0 if result.ok else 1


def retire_key_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Pin what a key sealed (:mod:`airflow_rbak.storage.key_retirement`); exit 1 when an object sealed with it failed
    to open (named, not pinned), every other one pinned."""
    storage = existing_location(args)
    if not isinstance(storage, EncryptedStorage):
        raise ConfigurationError(f"{storage.url}: retire-key needs the location's keys (--encryption-conn-id or "
                                 "RBAK_ENCRYPTION_KEYS)")
    done = retire_key(storage, args.key_id)
    if args.format == "json":
        json_line(out, {"key_id": done.key_id, "record": done.record, "pinned": done.pinned, "refused": done.refused})
    else:
        say(out, done.describe())
        for why in done.refused.values():
            say(out, f"  ! not pinned: {why}")
    return 1 if done.refused else 0


def _policy(args: argparse.Namespace) -> RetentionPolicy:
    return RetentionPolicy(**{name: getattr(args, name) for name in RETENTION_SETTINGS})


def copy_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """A second copy (:mod:`airflow_rbak.repository.second_copy`); exit 1 when a damaged backup was refused."""
    source = open_storage(args.source)
    source.check_location()
    destination = open_storage(args.destination)
    report = copy_backups(source, destination, args.backup_id, retention=_policy(args), workers=args.workers,
                          chain_lock_wait=max(0.0, args.wait))
    if args.format == "json":
        json_line(out, report.to_json())
    else:
        say(out, report.describe())
        for entry in report.backups:
            detail = (f"{entry.objects_copied} objects ({entry.bytes_copied} bytes), {entry.objects_already_there} "
                      "already there, verified at the destination" if entry.outcome == COPIED else entry.reason or "")
            brought = f" (the chain of {entry.brought_by} needs it)" if entry.brought_by else ""
            say(out, f"  {entry.outcome} {entry.backup_id}{brought}: {detail}")
        if report.retention_deleted:
            say(out, f"  the destination's retention removed {', '.join(report.retention_deleted)}")
    return 1 if report.ids(REFUSED) else 0
