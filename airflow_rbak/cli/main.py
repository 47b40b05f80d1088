"""``rbak``: list, describe, validate, forget, copy and repair RBAK backups; read and search their messages; dump
segments; remove a stale lock; roll back a definitions import; restore or back up without Airflow.

Exit codes (docs/operations.md#the-rbak-command-line): 0 success (a valid backup), 1 a defect (the backup is damaged),
2 a usage error (bad arguments or settings, a backup id that names nothing), 3 the location cannot be reached or read,
4 a lock is held, 5 any other failure (the broker, a refused restore, an internal error); one line on stderr, no
traceback (``RBAK_DEBUG=1`` shows them). ``--format text|json`` goes before or after the command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO

from airflow_rbak import __version__
from airflow_rbak.cli import options
from airflow_rbak.cli.arguments import positive_float, positive_int
from airflow_rbak.cli.configured import encryption_keyring
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.display import printable
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.catalog import NoCompleteBackupError
from airflow_rbak.repository.lock import BackupLockedError
from airflow_rbak.repository.manifest_store import ManifestNotFoundError
from airflow_rbak.repository.rebuild import NothingToRebuildError
from airflow_rbak.storage.base import ObjectNotFoundError, StorageError
from airflow_rbak.storage.credentials import current_credentials, storage_credentials
from airflow_rbak.storage.encrypted import DamagedObjectError, KeyRequiredError, NotEncryptedError, WrongKeyError
from airflow_rbak.storage.keyring import storage_keyring

EXIT_OK, EXIT_DEFECT, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_LOCKED, EXIT_FAILED = 0, 1, 2, 3, 4, 5
#: Which exit code an error means, the first match winning. A class named "module.Class" is of a module that a command
#: imports only when it runs (the restore's): not imported, none of its errors was raised.
EXIT_CODES: tuple[tuple[tuple[type[BaseException] | str, ...], int], ...] = (
    ((CodecError, "airflow_rbak.restore.errors.DamagedSegmentsError", DamagedObjectError, NotEncryptedError), EXIT_DEFECT),
    ((ConfigurationError, KeyRequiredError, WrongKeyError, ManifestNotFoundError, NoCompleteBackupError,
      NothingToRebuildError, ObjectNotFoundError),
     EXIT_USAGE),
    ((StorageError,), EXIT_UNREACHABLE),
    ((BackupLockedError,), EXIT_LOCKED),
)
#: Each command's examples, shown by its ``--help``.
EXAMPLES = {
    "list": "rbak list --path s3://backups/rabbit?region=eu-west-1\nrbak --format json list   # the [rbak] storage_url",
    "describe": "rbak describe --backup-id latest\nrbak describe --path file:///var/backups/rabbit --backup-id prod-2026-11-22",
    "validate": "rbak validate --backup-id latest --deep\nrbak validate --path file:///var/backups/rabbit --backup-id b1 "
                "--format json",
    "forget": "rbak forget --keep-last 7 --dry-run\n"
              "rbak forget --abandoned --dry-run\n"
              "rbak forget --keep-daily 7 --keep-weekly 5 --keep-monthly 12 --dry-run\n"
              "rbak forget --path s3://backups/rabbit --keep-last 7 --max-age-days 30",
    "copy": "rbak copy file:///var/backups/rabbit s3://dr-backups/rabbit?region=eu-central-1\n"
            "rbak copy s3://backups/rabbit azure://dr/rabbit --backup-id latest --keep-daily 7 --keep-monthly 12",
    "unlock": "rbak unlock --backup-id prod-2026-11-22",
    "location": "rbak location --path 's3://backups/rabbit?region=eu-west-1&object_lock=compliance&object_lock_days=35'\n"
                "rbak --format json location",
    "limit-stops": "rbak limit-stops --path s3://backups/rabbit\n"
                   "rbak limit-stops --clear --vhost prod --queue orders   # once its messages are safe",
    "dump": "rbak segment dump /var/backups/rabbit/b1/queues/_default/orders/segment-0001.zst | head",
    "rebuild": "rbak manifest rebuild --backup-id prod-2026-11-22 --replace",
    "rollback": "RBAK_BROKER_URL=amqp://... rbak definitions rollback --backup-id latest   # lists, changes nothing\n"
                "RBAK_BROKER_URL=amqp://... rbak definitions rollback --backup-id latest --apply\n"
                "rbak definitions rollback --backup-id b1 --restore-run airflow:rbak_restore/manual__2026-11-22T04:15:00+00:00",
    "definitions-export": "rbak definitions export --backup-id latest -o definitions.json   # no users, no hashes\n"
                          "rbak definitions export --backup-id b1 --vhost prod -o prod.json\n"
                          "rbak definitions export --backup-id latest --include-users -o with-hashes.json",
    "restore": "RBAK_BROKER_URL=amqp://... rbak restore --backup-id latest --dry-run\n"
               "rbak restore --broker-file ~/.rbak-broker --backup-id b1 --vhost-map prod=prod-restored",
    "export": "rbak export --decrypt --encryption-conn-id rbak_encryption --path s3://backups/rabbit "
              "--to file:///srv/rabbit-plain\nRBAK_ENCRYPTION_KEYS=k1:... rbak export --decrypt --to file:///srv/plain",
    "retire-key": "rbak retire-key --encryption-conn-id rbak_encryption --path s3://backups/rabbit --key-id 2026-11",
    "messages": "rbak messages --backup-id latest --queue orders --message-id 4711\n"
                "rbak messages --path s3://backups/rabbit --backup-id b1 --vhost prod --queue dlq --since 2026-11-22T02:00:00Z "
                "--limit 20 --format jsonl",
    "search": "rbak search --message-id 4711\n"
              "rbak search --path file:///var/backups/rabbit --since-date 2026-11-01 --header x-tenant=acme "
              "--body-regex 'amount\":\\s*9{3,}' --format json",
    "journal-enable": "RBAK_BROKER_URL=amqp://...?hosts=node2,node3 rbak journal enable --vhost prod",
    "journal-disable": "rbak journal disable --broker-file ~/.rbak-broker --vhost prod",
    "journal-status": "rbak journal status --broker-file ~/.rbak-broker --vhost prod --format json",
    "journal-archive": "rbak journal archive --broker-file ~/.rbak-broker --vhost prod --path s3://backups/rabbit "
                       "--seconds 60",
    "doctor": "rbak doctor   # the [rbak] options, the rabbitmq_default connection, the DAGs' Spark\n"
              "rbak doctor --broker-file ~/.rbak-broker --path s3://backups/rabbit --format json\n"
              "rbak doctor --conn-id rabbitmq_prod --vhost orders --strict",
    "backup": "RBAK_BROKER_URL=amqp://... rbak backup --backup-id manual-1\n"
              "rbak backup --broker-file ~/.rbak-broker --backup-id b2 -c '{\"vhosts\": [\"prod\"], \"verify\": \"deep\", "
              "\"retention\": {\"keep_last\": 7}}'",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: ``--format text|json`` before or after every command, each with its own examples."""
    parser = argparse.ArgumentParser(prog="rbak", description="RabbitMQ backups in the RBAK format.",
                                     epilog="Exit codes: 0 done, 1 the backup is damaged, 2 usage error, 3 location "
                                            "unreachable, 4 lock held, 5 other failure.")
    parser.add_argument("--version", action="version", version=f"rbak {__version__}")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    parser.add_argument("--encryption-conn-id", default=None, metavar="CONN_ID",
                        help="the Airflow connection holding the location's encryption keys (loads Airflow); without "
                             "it, the RBAK_ENCRYPTION_KEYS variable's keys, else none (a plain location)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, parent=sub, formats=("text", "json"), examples: str = "") -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="examples:\n  " + EXAMPLES[examples or name].replace("\n", "\n  "))
        # SUPPRESS: given here it wins, absent it leaves the value given before the command
        p.add_argument("--format", choices=formats, default=argparse.SUPPRESS, help="output format (default text)")
        p.add_argument("--encryption-conn-id", default=argparse.SUPPRESS, metavar="CONN_ID",
                       help="the Airflow connection holding the location's encryption keys")
        return p

    p = command("list", "List the backups under a storage location.")
    _path_arg(p)
    p.set_defaults(run="commands.list_cmd")

    p = command("describe", "Show a backup's manifest, queue by queue.")
    _backup_args(p)
    p.set_defaults(run="commands.describe_cmd")

    p = command("validate", "Check a backup; list every defect and exit 1 (the backup is damaged) when it is not intact.")
    _backup_args(p)
    p.add_argument("--deep", action="store_true", help="read every segment: CRC, SHA-256, records, timestamps")
    _cap_arg(p)
    p.set_defaults(run="commands.validate_cmd")

    p = command("messages", "Print a backup's messages in stored order (all queues, or --vhost/--queue), with the "
                            "filters below, one segment at a time; text is a table, json one line per message.",
                formats=("text", "json", "table", "jsonl"))
    _backup_args(p)
    options.add_messages_args(p)
    _cap_arg(p)
    p.set_defaults(run="messages.messages_cmd")

    p = command("search", "Search every complete backup of a location (or a range) with the filters below: each "
                          "matching message once, with every backup, segment and position that holds it.",
                formats=("text", "json", "table", "jsonl"))
    _path_arg(p)
    options.add_search_args(p)
    _cap_arg(p)
    p.set_defaults(run="messages.search_cmd")

    p = command("forget", "Remove the complete backups a retention rule no longer keeps, never a segment a kept "
                          "backup's stream chain lists, nor an incomplete or damaged backup.")
    _path_arg(p)
    _retention_args(p)
    p.add_argument("--dry-run", action="store_true", help="say what would be removed and why each other stays; remove nothing")
    p.add_argument("--abandoned", action="store_true",
                   help="also remove abandoned backups: incomplete ones whose run is gone (rbak list says so), with "
                        "their staging, never a segment another backup lists nor a backup whose run holds its lock")
    p.add_argument("--abandoned-after-hours", type=positive_float, metavar="H",
                   help="with --abandoned: a lock unrenewed for H hours means its run is gone (default: [rbak] "
                        "abandoned_grace_hours, 24)")
    p.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the location's chain lock while a backup links its chains (default 60)")
    p.set_defaults(run="location_commands.forget_cmd")

    p = command("export", "Copy a location to an empty one, every object as it reads: with --decrypt, a plain copy of "
                          "an encrypted location that any RBAK v1 reader reads.")
    _path_arg(p)
    p.add_argument("--to", required=True, metavar="URL", help="the empty location to write the copy to")
    p.add_argument("--decrypt", action="store_true", required=True,
                   help="write the copy unencrypted (required: says what the copy is)")
    p.set_defaults(run="location_commands.export_cmd")

    p = command("retire-key", "Retire an encryption key at an encrypted location: pin every object it sealed, so that "
                              "once the keyring marks it retired (id:base64:retired) it opens those and nothing more.")
    _path_arg(p)
    p.add_argument("--key-id", required=True, metavar="ID", help="the key to retire (in the keyring, not the first)")
    p.set_defaults(run="location_commands.retire_key_cmd")

    p = command("copy", "Copy complete backups to a second location, whole chains, verified there before their manifest "
                        "is written; skips what is already there, resumes a half copy, names a damaged backup and "
                        "copies the rest (exit 1, the backup is damaged, when one was refused).")
    p.add_argument("source", help="the storage URL to copy from (only read)")
    p.add_argument("destination", help="the storage URL to copy to")
    p.add_argument("--backup-id", action="append", metavar="ID",
                   help="a backup to copy (repeatable; latest: the newest complete one); default: every complete backup")
    _retention_args(p, "at the destination, after copying: ")
    p.add_argument("--workers", type=positive_int, default=4, metavar="N", help="objects copied at a time (default 4)")
    p.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the destination's chain lock (default 60)")
    p.set_defaults(run="location_commands.copy_cmd")

    p = command("location", "Tell whether the location's backups outlive a credential that can write there: the "
                            "bucket's Object Lock, its default retention, and what the URL locks.")
    _path_arg(p)
    p.set_defaults(run="location_commands.location_cmd")

    p = command("unlock", "Remove the lock a crashed backup run left behind (says who held it).")
    _backup_args(p)
    p.set_defaults(run="commands.unlock_cmd")

    p = command("limit-stops", "List the queues a capture stopped at their delivery limit (RabbitMQ before 4.3, "
                               "allow_delivery_count_increase), as the location and this deployment's ledger record "
                               "them; with --clear, delete one queue's stop in both places.")
    _path_arg(p)
    p.add_argument("--vhost", help="only this vhost's stops (with --clear: the stopped queue's vhost)")
    p.add_argument("--queue", help="with --clear: the stopped queue")
    p.add_argument("--clear", action="store_true",
                   help="delete the queue's stop in the location and the ledger: later backups capture it again, each "
                        "return raising its messages' delivery count (only once they are consumed or safe)")
    p.set_defaults(run="commands.limit_stops_cmd")

    segment = sub.add_parser("segment", help="Work with one segment file.").add_subparsers(dest="segment_command", required=True)
    p = command("dump", "Print a segment's header, then each record, one JSON line each.", segment)
    p.add_argument("source", metavar="FILE_OR_URL", help="a local file, or a storage URL of one segment")
    _cap_arg(p)
    p.set_defaults(run="commands.dump_cmd")

    manifest = sub.add_parser("manifest", help="Work with a backup's manifest.").add_subparsers(
        dest="manifest_command", required=True
    )
    p = command("rebuild", "Rebuild manifest.json from the segments when it is lost or damaged.", manifest)
    _backup_args(p)
    p.add_argument("--replace", action="store_true", help="replace an existing manifest.json (the old one is kept aside)")
    _cap_arg(p)
    p.set_defaults(run="commands.rebuild_cmd")

    definitions = sub.add_parser("definitions", help="Work with a backup's definitions: export them, roll back an "
                                                     "import.").add_subparsers(dest="definitions_command", required=True)
    p = command("rollback", "Return a broker's definitions to the snapshot a restore took before importing: delete what "
                            "the import created, put back what it replaced (queues, exchanges, bindings, policies and "
                            "vhosts only, as its sealed import record lists them). Lists everything and changes "
                            "nothing unless --apply.", definitions)
    _backup_args(p)
    options.add_broker_args(p)
    p.add_argument("--broker", help=argparse.SUPPRESS)  # refused with a pointer to --broker-file, not echoed
    which = p.add_mutually_exclusive_group()
    which.add_argument("--snapshot", help="the snapshot's key (default: the newest rollback-before-import-* of the "
                                          "backup, which must be of an import into the cluster the broker is in)")
    which.add_argument("--restore-run", metavar="RUN",
                       help="undo the import of this restore run, as its record names it (airflow:DAG_ID/RUN_ID, or "
                            "the cli:... id `rbak restore` printed): from the snapshot before its first import")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--apply", action="store_true", help="delete and put back what the listing shows (default: only list)")
    act.add_argument("--dry-run", action="store_true", help="list what would be deleted and put back; change nothing "
                                                            "(the default)")
    p.set_defaults(run="commands.rollback_cmd")

    p = command("export", "Write a backup's definitions as RabbitMQ's own JSON, for rabbitmqctl import_definitions or "
                          "POST /api/definitions: without users, password hashes and URI credentials unless "
                          "--include-users.", definitions, examples="definitions-export")
    _backup_args(p)
    options.add_export_args(p)
    p.set_defaults(run="definitions_export.export_cmd")

    p = command("restore", "Restore a backup without Airflow: the rbak_restore DAG's engine and settings, in this "
                           "process (the disaster path: docs/disaster-recovery.md).")
    options.add_conf_args(p, '{"vhost_map": {"prod": "prod-restored"}, "on_existing_messages": "append"}')
    options.add_broker_args(p)
    p.add_argument("--vhost-map", action="append", metavar="SOURCE=TARGET", help="restore a vhost under another name")
    p.add_argument("--dry-run", action="store_true", help="plan and report; publish and import nothing")
    p.add_argument("--transform", action="append", metavar="NAME",
                   help="a transformation of the definitions before import (convert_to_quorum, strip_mirroring, "
                        "drop_empty_policies); implies restore_definitions")
    p.add_argument("--queue-type", action="append", metavar="QUEUE=TYPE",
                   help="convert_to_quorum's rule: a target queue name or glob and quorum or classic (kept)")
    p.add_argument("--accept-loss", action="append", metavar="LOSS",
                   help="a loss a converted queue may take, ARGUMENT or QUEUE_GLOB:ARGUMENT (e.g. prio:x-max-priority)")
    p.add_argument("--vhost", action="append", metavar="VHOST", help="restore this source vhost (repeat for more)")
    p.add_argument("--journal-until", metavar="T",
                   help="recover to this moment (epoch ms or ISO 8601): the snapshot, then the journal's records "
                        "published before T (docs/operations.md, \"Recovering to a point in time\"); needs --vhost")
    p.add_argument("--journal-accept-gaps", action="store_true",
                   help="recover through the journal's gaps in the window (listed) instead of refusing")
    p.add_argument("--publish-threads", type=positive_int, metavar="N",
                   help="queues published at once, each on its own connection and thread (the publish_threads setting, "
                        "default 1, at most 32; a --journal-until recovery publishes one at a time)")
    p.set_defaults(run="runs.restore_cmd")

    p = command("backup", "Back up without Airflow: the rbak_backup DAG's steps in this process (encode without Spark), "
                          "then its verify and retention settings.")
    options.add_conf_args(p, '{"vhosts": ["prod"], "verify": "deep", "retention": {"keep_last": 7}}')
    options.add_broker_args(p)
    p.set_defaults(run="runs.backup_cmd")

    journal = sub.add_parser("journal", help="A vhost's continuous capture: the firehose into rbak.journal, archived "
                                             "into the location.").add_subparsers(dest="journal_command", required=True)
    p = command("enable", "Journal a vhost: the rbak.journal quorum queue bound to the firehose, tracing on through every "
                          "node the broker connection lists (its fields kept as they were). After the journal was off, the next "
                          "archive names the time since as a gap.", journal,
                examples="journal-enable")
    _journal_args(p)
    p.add_argument("--max-messages", type=positive_int, default=5_000_000, metavar="N",
                   help="the journal's length limit; over it, its oldest trace messages are dropped (default 5000000)")
    p.set_defaults(run="journal.enable_cmd")
    p = command("disable", "Stop journaling a vhost: tracing off on every node, the binding removed; the queue stays "
                           "(it may hold what no archive holds yet) unless --delete-queue. Archive runs refuse until `enable`.",
                journal,
                examples="journal-disable")
    _journal_args(p)
    p.add_argument("--delete-queue", action="store_true", help="delete rbak.journal too, with what it holds")
    p.set_defaults(run="journal.disable_cmd")
    p = command("status", "Show a vhost's journal: tracing per node, its depth and limit, the publishers it does not "
                          "cover.", journal, examples="journal-status")
    _journal_args(p)
    p.set_defaults(run="journal.status_cmd")
    p = command("archive", "Archive a vhost's journal into the location: one completed backup, its messages acked only "
                           "once stored; gaps and the recovery point reported.", journal, examples="journal-archive")
    _journal_args(p)
    _path_arg(p)
    p.add_argument("--seconds", type=positive_float, default=60.0, metavar="S",
                   help="stop after S seconds, at a clock mark (default 60; earlier once the journal is empty)")
    p.add_argument("--max-messages", type=positive_int, default=50_000, metavar="N",
                   help="at most N messages in this archive (the consumer's prefetch; at most 65535; default 50000)")
    p.set_defaults(run="journal.archive_cmd")

    p = command("doctor", "Check a deployment before its first run: the broker user's tags and rights for each DAG, "
                          "the vhosts it cannot see, the location (a probe written, read back and deleted), its "
                          "encryption keys, the state key, paused DAGs, local Spark and Java. Every check runs; each "
                          "finding is ok, warning or failure with its fix. It exits 0 (done) when no check failed, and with "
                          "code 1 when one did, as validate does for a damaged backup; --strict counts a warning as a "
                          "failure.")
    options.add_doctor_args(p)
    p.set_defaults(run="doctor.doctor_cmd")
    return parser


def _journal_args(p: argparse.ArgumentParser) -> None:
    options.add_broker_args(p)
    p.add_argument("--vhost", required=True, help="the journaled vhost")


def _cap_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-decompressed-bytes", type=positive_int, default=DEFAULT_MAX_DECOMPRESSED_BYTES, metavar="N",
                   help="refuse a segment whose records take more than N bytes uncompressed (default "
                        f"{DEFAULT_MAX_DECOMPRESSED_BYTES}, 641 MiB: the most a segment of this provider holds)")


def _retention_args(p: argparse.ArgumentParser, where: str = "") -> None:
    """The retention rules (:class:`~airflow_rbak.repository.retention.RetentionPolicy`), as ``forget`` and ``copy`` take them."""
    p.add_argument("--keep-last", type=positive_int, metavar="N", help=f"{where}keep the newest N complete backups")
    p.add_argument("--max-age-days", type=positive_float, metavar="D", help=f"{where}keep backups younger than D days")
    for period, unit in (("hourly", "hours"), ("daily", "days"), ("weekly", "ISO weeks"), ("monthly", "months"),
                         ("yearly", "years")):
        p.add_argument(f"--keep-{period}", type=positive_int, metavar="N",
                       help=f"{where}keep the newest backup of each of the last N {unit} that have one (restic's rule)")
    p.add_argument("--timezone", default="UTC", metavar="ZONE",
                   help="the IANA time zone the calendar periods are counted in (default UTC)")


def _path_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", help="storage URL: file:///dir, s3://bucket/prefix?..., memory:// "
                                  "(default: [rbak] storage_url, else $AIRFLOW_HOME/rbak-backups)")


def _backup_args(p: argparse.ArgumentParser) -> None:
    _path_arg(p)
    p.add_argument("--backup-id", required=True, help="the backup's id (its folder), or latest: the newest complete backup")


def exit_code(error: BaseException) -> int:
    """The exit code an error means (:data:`EXIT_CODES`); any other failure is :data:`EXIT_FAILED`."""
    return next((code for kinds, code in EXIT_CODES if isinstance(error, _loaded(kinds))), EXIT_FAILED)


def _loaded(kinds: tuple[type[BaseException] | str, ...]) -> tuple[type[BaseException], ...]:
    """``kinds`` with each class given by name taken from its module when imported, else left out."""
    found: list[type[BaseException]] = []
    for kind in kinds:
        if isinstance(kind, str):
            module, _, name = kind.rpartition(".")
            kind = getattr(sys.modules.get(module), name, None)  # type: ignore[assignment]
        if kind is not None:
            found.append(kind)  # type: ignore[arg-type]
    return tuple(found)


def command_handler(name: str) -> Callable[[argparse.Namespace, IO[str]], int]:
    """The function that runs a command, ``"module.function"`` of ``airflow_rbak.cli``: its module is imported only
    now, so a command loads what it uses and no other command's engine (``rbak validate`` no restore planner)."""
    module, _, function = name.rpartition(".")
    return getattr(importlib.import_module(f"airflow_rbak.cli.{module}"), function)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (also the process's, via the console script)."""
    args = build_parser().parse_args(argv)
    try:
        with storage_credentials(current_credentials()), storage_keyring(encryption_keyring(args.encryption_conn_id)):
            code = command_handler(args.run)(args, sys.stdout)
    except BrokenPipeError:  # `rbak segment dump ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except RbakError as exc:
        return _fail(str(exc), exit_code(exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: still one line, with a way to see more
        if os.environ.get("RBAK_DEBUG"):
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (set RBAK_DEBUG=1 for a traceback)", EXIT_FAILED)
    return code


def _fail(message: str, code: int) -> int:
    """One line on stderr; the message may quote a name from a backup, so its control characters show escaped."""
    print(f"rbak: error: {printable(message)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
