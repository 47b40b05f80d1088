"""``rbak messages`` (one backup's records, as a stream) and ``rbak search`` (one filter over many backups).

Both take the filter of :class:`~airflow_rbak.repository.message_filter.MessageFilter` as options, read the
location and never write to it. Everything shown comes from stored messages, so every line goes out through
:mod:`airflow_rbak.cli.output`: text with control characters escaped, JSON with what a terminal would act on
escaped too. A damaged segment is named where it would have been read and the rest is shown; the exit code is
then 1.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import sys
from collections.abc import Sequence
from typing import IO, Any

from airflow_rbak.cli.configured import existing_location, location
from airflow_rbak.cli.output import json_line, say
from airflow_rbak.codec.headers import headers_to_json
from airflow_rbak.display import when
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import resolve_backup_id
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import FilterError, MessageFilter
from airflow_rbak.repository.message_reader import DamagedSegment, StoredMessage, read_messages
from airflow_rbak.repository.message_search import BackupRange, plan_search, preview
from airflow_rbak.segments.search import SubmitJob, choose_placement, run_search
from airflow_rbak.segments.stages import Placement
from airflow_rbak.storage import open_storage

#: Characters of a body a table row shows.
TABLE_BODY_CHARS = 48


def filter_from_args(args: argparse.Namespace) -> MessageFilter:
    """The options' filter, validated as any untrusted filter is (a bad value names its option's field)."""
    headers: dict[str, str] = {}
    for pair in args.header or ():
        name, sep, value = pair.partition("=")
        if not sep:
            raise FilterError("headers", f"--header takes NAME=VALUE, got {pair!r:.60}")
        headers[name] = value
    return MessageFilter.from_params({
        "since": args.since, "until": args.until, "message_id": args.message_id, "correlation_id": args.correlation_id,
        "routing_key": args.routing_key, "exchange": args.exchange, "headers": headers,
        "content_type": args.content_type, "body_contains": args.body_contains, "body_regex": args.body_regex,
    })


def messages_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Print a backup's matching records in stored order, segment by segment, stopping at ``--limit``."""
    message_filter = filter_from_args(args)
    storage = existing_location(args)
    manifest = ManifestStore(storage).load(resolve_backup_id(storage, args.backup_id))
    names = {(q.vhost, q.name) for q in manifest.queues}
    if args.vhost is not None and args.queue is not None and (args.vhost, args.queue) not in names:
        raise ConfigurationError(f"backup {manifest.backup_id} holds no queue {args.queue!r} in vhost {args.vhost!r}")
    if args.queue is not None and not any(q == args.queue for _, q in names):
        raise ConfigurationError(f"backup {manifest.backup_id} holds no queue {args.queue!r}")
    if args.vhost is not None and not any(v == args.vhost for v, _ in names):
        raise ConfigurationError(f"backup {manifest.backup_id} holds no queue in vhost {args.vhost!r}")
    table = _table(args)
    shown, damaged, current = 0, 0, None
    if table:
        say(out, f"backup {manifest.backup_id}: {message_filter.describe()}")
    for item in read_messages(storage, manifest, vhost=args.vhost, queue=args.queue, message_filter=message_filter,
                              cap=args.max_decompressed_bytes):
        if isinstance(item, DamagedSegment):
            damaged += 1
            if table:
                say(out, f"! {item}")
            else:
                json_line(out, {"kind": "damaged", "backup_id": item.backup_id, "vhost": item.vhost, "queue": item.queue,
                                "segment": item.segment, "reason": item.reason, "records_read": item.records_read})
            continue
        if table:
            if current != (item.vhost, item.queue):
                current = (item.vhost, item.queue)
                _table_head(out, item)
            _table_row(out, item)
        else:
            json_line(out, message_json(item))
        shown += 1
        if args.limit is not None and shown >= args.limit:
            break  # before the reader fetches another segment
    stopped = args.limit is not None and shown >= args.limit
    if table:
        say(out, f"{shown} message(s) shown" + (f", stopped at --limit {args.limit}" if stopped else "")
            + (f"; {damaged} segment(s) could not be read (named above)" if damaged else ""))
    return 1 if damaged else 0


def message_json(item: StoredMessage) -> dict[str, Any]:
    """One stored message as a JSON line: where it is, its properties and headers (the format's forms), its body
    as UTF-8 text when it is that, else base64."""
    r = item.record
    try:
        body, encoding = r.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(r.body).decode(), "base64"
    return {"kind": "message", "backup_id": item.backup_id, "vhost": item.vhost, "queue": item.queue,
            "segment": item.segment, "sequence": item.sequence, "index": item.index, "position": item.position,
            "backed_up_at": r.backed_up_at, "exchange": r.exchange, "routing_key": r.routing_key,
            "redelivered": r.redelivered, "properties": r.properties.to_json(), "headers": headers_to_json(r.headers),
            "body_size": len(r.body), "body_encoding": encoding, "body": body}


def _table(args: argparse.Namespace) -> bool:
    return args.format in ("text", "table")


def _table_head(out: IO[str], item: StoredMessage) -> None:
    say(out)
    say(out, f"vhost {item.vhost!r} queue {item.queue!r}")
    say(out, f"{'POSITION':>8} {'SEG:REC':>10} {'BACKED UP':23} {'ROUTING KEY':20} {'MESSAGE ID':20} {'BYTES':>7}  BODY")


def _table_row(out: IO[str], item: StoredMessage) -> None:
    r = item.record
    say(out, f"{item.position:8d} {f'{item.sequence}:{item.index}':>10} {when(r.backed_up_at):23} "
              f"{_cut(r.routing_key, 20):20} {_cut(r.properties.message_id or '-', 20):20} {len(r.body):7d}  "
              f"{preview(r.body, TABLE_BODY_CHARS)}")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def search_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Search every complete backup in range; each matching message once, with every backup that holds it."""
    message_filter = filter_from_args(args)
    url = location(args)
    storage = open_storage(url)
    storage.check_location()
    scope = BackupRange(args.from_id, args.to_id, _date(args.since_date, "since_date"), _date(args.until_date, "until_date"))
    chosen, skipped = plan_search(storage, scope)
    backup_ids = [s.backup_id for s in chosen]
    placement = choose_placement(storage, backup_ids, Placement(args.placement, args.in_process_max_bytes))
    body = run_search(url, backup_ids, message_filter, limit=args.limit, placement=placement,
                      master=args.spark_master, cap=args.max_decompressed_bytes,
                      submit=spark_submitter() if placement == "spark" else None)
    body["backups_skipped"] = skipped + body["backups_skipped"]
    if _table(args):
        _search_table(out, body)
    else:
        for hit in body["hits"]:
            json_line(out, {"kind": "match", **hit})
        json_line(out, {"kind": "summary", **{k: v for k, v in body.items() if k != "hits"}})
    return 0 if body["ok"] else 1


def spark_submitter() -> SubmitJob:
    """The Spark provider's submit (``hooks/spark.py``), as the operators submit: imported only for a search on Spark.

    The hook logs spark-submit's lines through Airflow's logging, which prints to standard output: they go to stderr,
    since standard output carries the search's result."""
    try:
        from airflow_rbak.hooks.spark import submit_application  # Airflow's Spark provider: only where it is installed
    except ImportError:
        raise ConfigurationError("a search on Spark is submitted by Airflow's Spark provider, not installed here "
                                 "(pip install 'airflow-rbak[airflow,spark]'); or search with --placement process") from None

    def submit(application: str, application_args: Sequence[str], master: str) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            submit_application(application, application_args, master)

    return submit


def _search_table(out: IO[str], body: dict[str, Any]) -> None:
    searched = body["backups_searched"]
    say(out, f"searched {len(searched)} backup(s) ({', '.join(searched) or 'none'}) for {body['filter']} "
              f"({'on Spark' if body['placement'] == 'spark' else 'in this process'})")
    for skip in body["backups_skipped"]:
        why = f": {skip['problem']}" if skip.get("problem") else ""
        say(out, f"  not searched: {skip['backup_id']} ({skip['status']}{why})")
    for hit in body["hits"]:
        say(out)
        say(out, f"vhost {hit['vhost']!r} queue {hit['queue']!r}  message_id {hit['message_id'] or '-'}  routing key "
                  f"{hit['routing_key']!r}  {hit['body_size']} bytes  {_cut(hit['body_preview'], TABLE_BODY_CHARS)}")
        for place in hit["held_by"]:
            say(out, f"    in {place['backup_id']}: segment {place['sequence']} record {place['index']} "
                      f"(position {place['position']} in the queue), backed up {when(place['backed_up_at'])}")
    say(out)
    more = f"; {body['more_records']} more matching record(s) past --limit {body['limit']}" if body["more_records"] else ""
    say(out, f"{body['distinct_messages']} distinct message(s) in {body['matched_records']} matching record(s){more}")
    for d in body["damaged_segments"]:
        say(out, f"! {d['backup_id']}: {d['segment']}: {d['reason']}")


def _date(value: str | None, name: str) -> int | None:
    """A backup-range time, read as the filter reads its window (epoch ms or ISO 8601)."""
    if value is None:
        return None
    try:
        return MessageFilter.from_params({"since": value}).since
    except FilterError as exc:
        raise FilterError(name, str(exc).split(": ", 1)[1]) from None


