"""The ``rbak`` subcommands on a location's backups (list, describe, validate, dump, rebuild, rollback, limit-stops,
unlock): each takes parsed arguments and an output stream, returns an exit code. Those that act on the whole
location (forget, copy, export, retire-key, location) are in :mod:`airflow_rbak.cli.location_commands`.

Every line goes out through :mod:`airflow_rbak.cli.output`, so no name in a backup reaches the terminal raw.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import IO
from urllib.parse import urlsplit, urlunsplit

from airflow_rbak.cli.configured import command_settings, existing_location, location, state_seal
from airflow_rbak.cli.options import BROKER_URL_ENV
from airflow_rbak.cli.output import json_line, json_safe, listed, say
from airflow_rbak.codec import read_header
from airflow_rbak.codec.records import encode_record
from airflow_rbak.codec.segment import decode_payload, iter_payload_records
from airflow_rbak.display import when as _when
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import left_out_queues, list_backups, resolve_backup_id
from airflow_rbak.repository.chain import chain_owners, dependencies
from airflow_rbak.repository.lock import BackupLock
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError


def _chosen(args: argparse.Namespace) -> tuple[Storage, str]:
    """The command's location and backup: ``--backup-id``, or for ``latest`` the newest complete backup there."""
    storage = existing_location(args)
    return storage, resolve_backup_id(storage, args.backup_id)


def list_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    storage = existing_location(args)
    summaries = list_backups(storage, abandoned_after_ms=command_settings(args).abandoned_after_ms())
    if args.format == "json":
        json_line(out, [s.to_json() for s in summaries])
        return 0
    if not summaries:
        say(out, f"no backups under {storage.url}")
        return 0
    say(out, f"{'BACKUP ID':30} {'STATUS':12} {'CREATED':23} {'COMPLETED':23} {'QUEUES':>6} {'MESSAGES':>10} {'BYTES':>12}")
    for s in summaries:
        say(out, f"{s.backup_id:30} {s.status:12} {_when(s.created_at):23} {_when(s.completed_at):23} "
                  f"{s.queues:6d} {s.total_messages:10d} {s.total_bytes:12d}")
        if s.depends_on:
            say(out, f"  depends on {', '.join(s.depends_on)} (its streams continue their segments)")
        if s.needed_by:
            say(out, f"  needed by {', '.join(s.needed_by)}")
        if s.problem:
            say(out, f"  ! {s.problem}")
    return 0


def describe_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    storage, backup_id = _chosen(args)
    manifest = ManifestStore(storage).load(backup_id)
    if args.format == "json":
        json_line(out, manifest.to_json())
        return 0
    summary = next((s for s in list_backups(storage) if s.backup_id == manifest.backup_id), None)
    needed_by = summary.needed_by if summary else ()
    status = summary.status if summary else ("complete" if manifest.completed_at is not None else "incomplete")
    say(out, f"backup {manifest.backup_id} ({status if status == 'complete' else status.upper()})")
    if summary and summary.problem:
        say(out, f"  ! {summary.problem}")
    say(out, f"  created   {_when(manifest.created_at)}")
    say(out, f"  completed {_when(manifest.completed_at)}")
    say(out, f"  source    {manifest.source_cluster or '-'} (RabbitMQ {manifest.rabbitmq_version or '?'})")
    say(out, f"  totals    {manifest.total_messages} messages, {manifest.total_segments} segments, "
              f"{manifest.total_bytes} bytes")
    if manifest.definitions:
        d = manifest.definitions
        say(out, f"  definitions {d.key}: {d.vhost_count} vhosts, {d.queue_count} queues, {d.exchange_count} exchanges, "
                  f"{d.user_count} users")
    say(out, f"  vhosts    {listed(manifest.selected_vhosts() or (), empty='every vhost')} (what the backup was asked for)")
    say(out, f"  depends on {', '.join(dependencies(manifest)) or 'nothing (restores on its own data alone)'}")
    say(out, f"  needed by {', '.join(needed_by) or 'no other backup'}")
    say(out)
    say(out, f"{'VHOST':20} {'QUEUE':30} {'TYPE':8} {'MESSAGES':>10} {'SEGMENTS':>8}  FIRST .. LAST")
    for q in manifest.queues:
        say(out, f"{q.vhost:20} {q.name:30} {q.queue_type:8} {q.message_count:10d} {len(q.segments):8d}  "
                  f"{_when(q.first_message_timestamp)} .. {_when(q.last_message_timestamp)}")
        owners = chain_owners(q)
        if q.queue_type == "stream" and owners != [manifest.backup_id]:
            say(out, f"{'':20} chain: segments from {', '.join(owners)}")
    for left in left_out_queues(manifest):
        say(out, f"{left['vhost']:20} {left['queue']:30} LEFT OUT: {left['reason']}")
    return 0


def validate_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    report = validate_backup(*_chosen(args), deep=args.deep,
                             max_decompressed_bytes=args.max_decompressed_bytes)
    if args.format == "json":
        json_line(out, report.to_json())
    else:
        mode = "deep" if report.deep else "quick"
        verdict = "valid" if report.valid else f"INVALID, {len(report.defects)} defect(s)"
        say(out, f"backup {report.backup_id}: {verdict} ({mode}: {report.segments_checked} segments, "
                  f"{report.records_checked} records, {report.bytes_checked} bytes checked)")
        for defect in report.defects:
            say(out, f"  {defect}")
    return 0 if report.valid else 1


def dump_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    data, name = _read_source(args.source)
    header = read_header(data, name)
    json_line(
        out,
        {
            "segment": name,
            "version": header.version,
            "compression": header.compression.name.lower(),
            "record_count": header.record_count,
            "first_timestamp": header.first_timestamp,
            "last_timestamp": header.last_timestamp,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
    )
    header, payload = decode_payload(data, name, args.max_decompressed_bytes)
    for record in iter_payload_records(payload, header.record_count, name):
        out.write(json_safe(encode_record(record).decode()) + "\n")
    return 0


def rebuild_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    result = rebuild_manifest(*_chosen(args), replace=args.replace,
                              max_decompressed_bytes=args.max_decompressed_bytes)
    if args.format == "json":
        json_line(out, result.to_json())
        return 0
    m = result.manifest
    say(out, f"rebuilt manifest of {m.backup_id}: {len(m.queues)} queues, {m.total_segments} segments, "
              f"{m.total_messages} messages; written to {result.key}")
    say(out, "created_at and completed_at are estimated from record timestamps; source_cluster is unknown")
    for line in result.unrecovered:
        say(out, f"  not recovered: {line}")
    return 0


def rollback_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Return a broker's definitions to the snapshot a restore took before importing (see restore.rollback).

    A dry run unless ``--apply``: it lists every object it would delete and put back, never cut short. Only a sealed
    import record whose pinned snapshot matches, written for the cluster the broker is in, is acted on (the seal's
    key from :func:`~.configured.state_seal`); ``--restore-run`` names the run whose import to undo.
    The broker comes as for ``rbak restore`` (:func:`~airflow_rbak.cli.runs.broker_connection`), never from the
    command line, where ``ps`` and shell history would keep its password.
    """
    from airflow_rbak.broker.management import ManagementClient
    from airflow_rbak.cli.runs import broker_connection
    from airflow_rbak.restore.rollback import rollback_definitions

    if args.broker is not None:
        raise ConfigurationError(f"--broker is not taken: a password on the command line stays in ps and the shell's "
                                 f"history; give the broker in ${BROKER_URL_ENV} or in a file named by --broker-file")
    storage, backup_id = _chosen(args)
    seal = state_seal()
    with ManagementClient(broker_connection(args)) as client:
        result = rollback_definitions(client, storage, backup_id, args.snapshot, dry_run=not args.apply, seal=seal,
                                      restore_run=args.restore_run)
    if args.format == "json":
        json_line(out, result.to_json())
        return 0
    verb = "would" if result.dry_run else "did"
    say(out, f"rollback of the import of restore run {result.restore_run or '(unnamed)'} into cluster "
             f"{result.cluster_name or '(unnamed)'} (id {result.cluster}), the cluster this broker is in")
    say(out, f"rollback to {result.snapshot_key} (sha256 {result.snapshot_sha256}, as its sealed import record "
              f"{result.record_key} pins): {verb} delete {len(result.deleted)} and put back {len(result.restored)} objects")
    for name in result.deleted:
        say(out, f"  delete {name}")
    for name in result.restored:
        say(out, f"  put back {name}")
    if result.dry_run:
        say(out, "dry run: nothing was changed; run again with --apply to do exactly this")
    return 0


def limit_stops_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """List a location's delivery-limit stops, in the location and in this deployment's ledger; or, with ``--clear``,
    delete one queue's in both places (:mod:`airflow_rbak.capture.limit_stops`): only once its messages are safe.

    The seal's key and the ledger's folder are the tasks' (``[rbak] state_key``, ``[rbak] state_dir``), so a record
    the tasks sealed opens here; one that does not is listed with why, and still counts as a stop for the tasks.
    """
    from airflow_rbak.capture.limit_stops import LimitStops, open_ledger

    if args.clear and (args.vhost is None or args.queue is None):
        raise ConfigurationError("--clear needs the stopped queue's --vhost and --queue")
    storage = open_storage(location(args)) if args.clear else existing_location(args)
    stops = LimitStops(storage, open_ledger(command_settings(args).state_dir()), state_seal())
    if args.clear:
        cleared = stops.clear(args.vhost, args.queue)
        if args.format == "json":
            json_line(out, {"vhost": args.vhost, "queue": args.queue, "cleared": cleared})
        else:
            say(out, f"cleared the delivery-limit stop of {args.vhost}/{args.queue}: deleted {listed(cleared)}")
        return 0
    records = [r for r in stops.all() if args.vhost is None or r.queue()[0] == args.vhost]
    rows = [{"where": r.where, "key": r.key, "vhost": r.queue()[0], "queue": r.queue()[1], "limit": r.limit,
             "backup_id": (r.body or {}).get("backup_id"), "stopped_at": (r.body or {}).get("stopped_at"),
             "problem": r.problem} for r in records]
    if args.format == "json":
        json_line(out, rows)
        return 0
    if not rows:
        say(out, f"no delivery-limit stops for {storage.url} (in the location or in the ledger {stops.ledger.url})")
    for row in rows:
        what = (f"stopped by {row['backup_id']} at its delivery limit of {row['limit']} ({row['stopped_at']})"
                if row["problem"] is None else f"{row['problem']}: counts as a stop")
        say(out, f"{row['vhost']}/{row['queue']} [{row['where']}] {what}")
    return 0


def unlock_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Remove ``{backup_id}/lock.json``; only for a run known to be gone (a live one would lose its lock).

    The lock is read as untrusted input (bounded, every field checked): an unreadable one is removed too,
    and said to be unreadable; nothing of its content is printed unescaped.
    """
    lock = BackupLock(*_chosen(args))
    backup_id = lock.backup_id
    held = lock.read()
    if held is not None:
        lock.storage.delete(lock.key)
    if args.format == "json":
        json_line(out, {"backup_id": backup_id, "removed": held is not None,
                         "held_by": None if held is None or held.unreadable else held.owner,
                         "unreadable": None if held is None else held.problem or None})
    elif held is None:
        say(out, f"backup {backup_id} is not locked")
    elif held.unreadable:
        say(out, f"removed the lock of backup {backup_id}: it was unreadable ({held.problem})")
    else:
        say(out, f"removed the lock of backup {backup_id}, held by {held.describe()}")
    return 0


def _read_source(source: str) -> tuple[bytes, str]:
    """Read a segment from a local path or a storage URL (``file://``, ``s3://…``)."""
    if "://" not in source:
        try:
            with open(source, "rb") as handle:
                return handle.read(), source
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{source}: no such file", source) from None
        except OSError as exc:
            raise StorageError(f"{source}: {exc.strerror}", source) from None
    parts = urlsplit(source)
    parent, _, name = parts.path.rpartition("/")
    if not name:
        raise StorageError(f"{source}: the URL names a folder, not a segment", source)
    storage = open_storage(urlunsplit((parts.scheme, parts.netloc, parent, parts.query, "")))
    return storage.get(name), source
