"""``rbak``: list, describe, validate and repair RBAK backups; dump segments; remove a stale lock; roll back a
definitions import; restore or back up without Airflow.

Exit codes: 0 success (a valid backup), 1 a defect or error (one line on
stderr, no traceback), 2 a usage error. ``RBAK_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from airflow_rbak import __version__
from airflow_rbak.cli import commands, runs
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.display import printable
from airflow_rbak.exceptions import RbakError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, every subcommand with ``--format text|json``."""
    parser = argparse.ArgumentParser(prog="rbak", description="RabbitMQ backups in the RBAK format.")
    parser.add_argument("--version", action="version", version=f"rbak {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, parent=sub) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
        return p

    p = command("list", "List the backups under a storage location.")
    _path_arg(p)
    p.set_defaults(run=commands.list_cmd)

    p = command("describe", "Show a backup's manifest, queue by queue.")
    _backup_args(p)
    p.set_defaults(run=commands.describe_cmd)

    p = command("validate", "Check a backup; exit 1 and list every defect when it is not intact.")
    _backup_args(p)
    p.add_argument("--deep", action="store_true", help="read every segment: CRC, SHA-256, records, timestamps")
    _cap_arg(p)
    p.set_defaults(run=commands.validate_cmd)

    p = command("unlock", "Remove the lock a crashed backup run left behind (says who held it).")
    _backup_args(p)
    p.set_defaults(run=commands.unlock_cmd)

    segment = sub.add_parser("segment", help="Work with one segment file.").add_subparsers(dest="segment_command", required=True)
    p = command("dump", "Print a segment's header, then each record, one JSON line each.", segment)
    p.add_argument("source", metavar="FILE_OR_URL", help="a local file, or a storage URL of one segment")
    _cap_arg(p)
    p.set_defaults(run=commands.dump_cmd)

    manifest = sub.add_parser("manifest", help="Work with a backup's manifest.").add_subparsers(
        dest="manifest_command", required=True
    )
    p = command("rebuild", "Rebuild manifest.json from the segments when it is lost or damaged.", manifest)
    _backup_args(p)
    p.add_argument("--replace", action="store_true", help="replace an existing manifest.json (the old one is kept aside)")
    _cap_arg(p)
    p.set_defaults(run=commands.rebuild_cmd)

    definitions = sub.add_parser("definitions", help="Work with the definitions a restore imported.").add_subparsers(
        dest="definitions_command", required=True)
    p = command("rollback", "Return a broker's definitions to the snapshot a restore took before importing: delete what "
                            "the import created, put back what it replaced.", definitions)
    _backup_args(p)
    runs.add_broker_args(p)
    p.add_argument("--broker", help=argparse.SUPPRESS)  # refused with a pointer to --broker-file, not echoed
    p.add_argument("--snapshot", help="the snapshot's key (default: the newest rollback-before-import-* of the backup)")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted and put back; change nothing")
    p.set_defaults(run=commands.rollback_cmd)

    p = command("restore", "Restore a backup without Airflow: the rbak_restore DAG's engine and settings, in this "
                           "process (the disaster path in docs/operations.md).")
    runs.add_conf_args(p)
    runs.add_broker_args(p)
    p.add_argument("--vhost-map", action="append", metavar="SOURCE=TARGET", help="restore a vhost under another name")
    p.add_argument("--dry-run", action="store_true", help="plan and report; publish and import nothing")
    p.set_defaults(run=runs.restore_cmd)

    p = command("backup", "Back up without Airflow: the rbak_backup DAG's steps in this process (encode without Spark).")
    runs.add_conf_args(p)
    runs.add_broker_args(p)
    p.set_defaults(run=runs.backup_cmd)
    return parser


def _cap_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-decompressed-bytes", type=_positive_int, default=DEFAULT_MAX_DECOMPRESSED_BYTES, metavar="N",
                   help="refuse a segment whose records take more than N bytes uncompressed (default "
                        f"{DEFAULT_MAX_DECOMPRESSED_BYTES}, 641 MiB: the most a segment of this provider holds)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _path_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", help="storage URL: file:///dir, s3://bucket/prefix?..., memory:// "
                                  "(default: [rbak] storage_url, else $AIRFLOW_HOME/rbak-backups)")


def _backup_args(p: argparse.ArgumentParser) -> None:
    _path_arg(p)
    p.add_argument("--backup-id", required=True, help="the backup's id (its folder under --path)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (also the process's, via the console script)."""
    args = build_parser().parse_args(argv)
    try:
        code = args.run(args, sys.stdout)
    except BrokenPipeError:  # `rbak segment dump ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except RbakError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: still one line, with a way to see more
        if os.environ.get("RBAK_DEBUG"):
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (set RBAK_DEBUG=1 for a traceback)")
    return code


def _fail(message: str) -> int:
    """One line on stderr; the message may quote a name from a backup, so its control characters show escaped."""
    print(f"rbak: error: {printable(message)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
