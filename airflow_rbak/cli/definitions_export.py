"""``rbak definitions export``: a backup's definitions as RabbitMQ's own JSON, for an import by hand.

The backup stores the broker's ``GET /api/definitions`` answer unchanged (``definitions/definitions.json.<ext>``,
docs/format.md), so the file written here is that document: ``rabbitmqctl import_definitions FILE`` and
``POST /api/definitions`` take it. An export made with ``include_users`` holds the users' password hashes and any
credentials in parameter URIs; they are written only with ``--include-users``, else left out the way a restore leaves
them out (:func:`~airflow_rbak.broker.definitions.without_credentials`), and the summary says what was left out.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Any

import orjson

from airflow_rbak.broker.definitions import USER_SECTIONS, without_credentials
from airflow_rbak.cli.configured import existing_location
from airflow_rbak.cli.output import json_line, say
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.catalog import resolve_backup_id
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore.definitions import read_export

#: Sections whose entries each name their vhost (``--vhost`` keeps those of that vhost).
VHOST_SECTIONS = ("queues", "exchanges", "bindings", "policies", "parameters", "permissions", "topic_permissions")


def export_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Write the backup's definitions export, selected and without credentials unless asked; summarise on ``out``
    (on stderr when the document itself goes to standard output)."""
    storage = existing_location(args)
    backup_id = resolve_backup_id(storage, args.backup_id)
    entry = ManifestStore(storage).load(backup_id).definitions
    if entry is None:
        raise ConfigurationError(f"backup {backup_id!r} holds no definitions export")
    stored, doc = read_export(storage, entry.key)
    stored_users = len(doc.get("users") or [])
    if not args.include_users:
        doc = orjson.loads(without_credentials(orjson.dumps(doc)))
    if args.vhost:
        doc = only_vhosts(doc, set(args.vhost))
    if args.include_users and not args.vhost:
        text = decompress(stored, compression_from_key(entry.key), DEFINITIONS_LIMITS.max_bytes, entry.key)  # as stored
    else:
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    _write(args.output, text)
    summary = _summary(backup_id, entry.key, doc, stored_users, args)
    report = sys.stderr if args.output == "-" else out
    if args.format == "json":
        json_line(report, summary)
    else:
        say(report, _sentence(summary))
    return 0


def only_vhosts(doc: dict[str, Any], vhosts: set[str]) -> dict[str, Any]:
    """``doc`` with only ``vhosts``' entries (and the users their permissions name); an unknown vhost is refused."""
    known = {str(v.get("name")) for v in doc.get("vhosts") or [] if isinstance(v, dict)}
    if unknown := sorted(vhosts - known):
        raise ConfigurationError(f"the backup's definitions hold no vhost {', '.join(map(repr, unknown))} (it holds "
                                 f"{', '.join(sorted(known)) or 'none'})")
    kept = {k: v for k, v in doc.items() if k not in (*VHOST_SECTIONS, "vhosts", "users", "global_parameters")}
    kept["vhosts"] = [v for v in doc["vhosts"] if isinstance(v, dict) and v.get("name") in vhosts]
    for section in VHOST_SECTIONS:
        if section in doc:
            kept[section] = [i for i in doc[section] or [] if isinstance(i, dict) and i.get("vhost") in vhosts]
    if "users" in doc:
        named = {p.get("user") for s in ("permissions", "topic_permissions") for p in kept.get(s, [])}
        kept["users"] = [u for u in doc["users"] or [] if isinstance(u, dict) and u.get("name") in named]
    return kept


def _write(output: str, text: bytes) -> None:
    if output == "-":
        sys.stdout.buffer.write(text)
        sys.stdout.flush()
        return
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(text)


def _summary(backup_id: str, key: str, doc: dict[str, Any], stored_users: int, args: argparse.Namespace) -> dict[str, Any]:
    counts = {k: len(doc.get(k) or []) for k in ("vhosts", "queues", "exchanges", "bindings", "policies", "users")}
    if args.include_users:
        users = "written as stored" if stored_users else "none: the backup was made without include_users"
    else:
        users = (f"left out ({stored_users} users with their password hashes, their permissions, and parameter URIs' "
                 "credentials): --include-users writes them") if stored_users else "none in the backup"
    return {"backup_id": backup_id, "key": key, "output": args.output, "vhosts_selected": args.vhost or None,
            "counts": counts, "users": users, "left_out_sections": [] if args.include_users else list(USER_SECTIONS)}


def _sentence(summary: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in summary["counts"].items())
    where = "standard output" if summary["output"] == "-" else summary["output"]
    return (f"wrote the definitions of backup {summary['backup_id']} to {where} ({counts}); users: {summary['users']}. "
            "Import with rabbitmqctl import_definitions FILE or POST /api/definitions")
