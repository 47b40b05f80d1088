"""``rbak journal enable|disable|status|archive``: a vhost's continuous capture, without Airflow (docs/operations.md,
"Continuous capture (journal)")."""

from __future__ import annotations

import argparse
from typing import IO

from airflow_rbak.cli.configured import location
from airflow_rbak.cli.output import json_line, say
from airflow_rbak.cli.runs import broker_connection


def enable_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    from airflow_rbak.broker.journal import enable

    state = enable(broker_connection(args), args.vhost, args.max_messages)
    return _status_out(state, args, out, f"journal of {args.vhost} enabled")


def disable_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    from airflow_rbak.broker.journal import disable

    nodes = disable(broker_connection(args), args.vhost, delete_queue=args.delete_queue)
    if args.format == "json":
        json_line(out, {"vhost": args.vhost, "nodes": {n.node: n.state for n in nodes}, "queue_deleted": args.delete_queue})
        return 0
    say(out, f"journal of {args.vhost} disabled; tracing " + ", ".join(f"{n.node}: {n.state}" for n in nodes))
    if not args.delete_queue:
        say(out, "  the journal queue rbak.journal stays: archive it (rbak journal archive) before deleting it")
    return 0


def status_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    from airflow_rbak.broker.journal import status

    state = status(broker_connection(args), args.vhost)
    return _status_out(state, args, out, f"journal of {args.vhost}")


def archive_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    from airflow_rbak.journal.archive_run import ArchiveSettings, JournalArchive

    settings = ArchiveSettings(args.vhost, location(args), seconds=args.seconds, max_messages=args.max_messages)
    result = JournalArchive(broker_connection(args), settings).run()
    if args.format == "json":
        json_line(out, result.summary())
        return 0
    say(out, f"archive {result.backup_id}: {result.messages} messages ({result.redelivered} redelivered) from "
             f"{result.from_ms} to {result.to_ms}; recovery point {result.recovery_point_ms / 1000:.1f}s")
    for gap in result.gaps:
        say(out, f"  ! gap from {gap['from']} to {gap['to']}: {gap['reason']}")
    for what in result.uncovered:
        say(out, f"  ! not covered: {what}")
    return 0


def _status_out(state, args: argparse.Namespace, out: IO[str], title: str) -> int:  # noqa: ANN001
    if args.format == "json":
        json_line(out, state.to_json())
        return 0
    say(out, title)
    for node in state.nodes:
        say(out, f"  tracing on {node.node}: {node.state}")
    full = " (FULL: its oldest messages are being dropped)" if state.full else ""
    say(out, f"  rbak.journal: {'present' if state.queue_exists else 'MISSING'}, "
             f"{'bound' if state.bound else 'NOT bound'} to the firehose, {state.depth} of {state.max_length} messages{full}")
    for what in state.uncovered:
        say(out, f"  ! not covered: {what}")
    return 0
