"""``rbak restore`` and ``rbak backup``: the DAGs' engines without Airflow, for the day Airflow is down.

They run :class:`RestoreRun` and :class:`BackupRun` in this process, with
the settings the DAGs take as params (``--conf`` takes a DAG run's conf as
it is), so a restore planned in Airflow and one run here behave alike and
share the restore checkpoints (objects in the backup's own storage by
default, as the DAG). Nothing here imports Airflow.

The broker's credentials never go on the command line, where ``ps`` and
shell history would keep them: the connection URL comes from
``$RBAK_BROKER_URL`` or from the file ``--broker-file`` names, and only the
connection's redacted form is ever printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.cli.configured import command_settings, location, state_seal
from airflow_rbak.cli.options import BROKER_URL_ENV
from airflow_rbak.cli.output import json_line, listed, say
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.retention import apply_retention
from airflow_rbak.repository.second_copy import copy_backups
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.settings import default_checkpoint_state
from airflow_rbak.storage import open_storage

#: DAG params a run without Airflow ignores.
AIRFLOW_ONLY = ("rabbitmq_conn_id", "spark_conn_id", "max_capture_tasks", "max_publish_tasks", "skip_approval")


def broker_connection(args: argparse.Namespace) -> RabbitMQConnection:
    """The broker from ``--broker-file`` or ``$RBAK_BROKER_URL``; the error never repeats the URL."""
    if args.broker_file is not None:
        try:
            url = args.broker_file.read_text().strip()
        except OSError as exc:
            raise ConfigurationError(f"cannot read --broker-file {args.broker_file}: {exc.strerror}") from None
    else:
        url = os.environ.get(BROKER_URL_ENV, "").strip()
    if not url:
        raise ConfigurationError(f"say which broker in ${BROKER_URL_ENV} or in a file given as --broker-file "
                                 "(amqp://user:pass@host:5672/?management_port=15672&stream_port=5552)")
    return RabbitMQConnection.from_url(url)


def read_conf(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--conf`` JSON object (or ``--conf-file``'s), as ``airflow dags test -c`` takes it."""
    text = args.conf_file.read_text() if args.conf_file is not None else (args.conf or "{}")
    try:
        conf = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"--conf is not JSON: {exc}") from None
    if not isinstance(conf, Mapping):
        raise ConfigurationError("--conf must be a JSON object of settings, as the DAG's params")
    # What only Airflow uses means nothing here: the broker comes from the environment or a file, one process
    # needs no task mapping, and whoever runs the command has approved it. Said, never dropped in silence.
    ignored = sorted(k for k in conf if k in AIRFLOW_ONLY)
    if ignored:
        print(f"rbak: note: not used without Airflow: {', '.join(ignored)}", file=sys.stderr)
    return {k: v for k, v in conf.items() if k not in AIRFLOW_ONLY}


def run_conf(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: ``--conf``, with ``--path`` and ``--backup-id`` (refused when they contradict it) and the
    location rule of every command (:func:`~airflow_rbak.cli.configured.location`) for ``storage_url``."""
    conf = read_conf(args)
    for flag, name in (("path", "storage_url"), ("backup_id", "backup_id")):
        given = getattr(args, flag)
        if given and conf.get(name) not in (None, given):
            raise ConfigurationError(f"--{flag.replace('_', '-')} {given!r} and the --conf {name} {conf[name]!r} differ: "
                                     "give one of them")
        conf[name] = given or conf.get(name)
    conf["storage_url"] = conf["storage_url"] or location(args)
    return conf


def restore_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Plan, import definitions (if asked), publish every queue and report: :meth:`RestoreRun.run`."""
    from airflow_rbak.restore import RestoreRequest, RestoreRun

    conf = {"checkpoint_state": default_checkpoint_state(), **run_conf(args)}
    if conf["backup_id"] is None:
        del conf["backup_id"]
    if args.vhost_map:
        conf["vhost_map"] = {**conf.get("vhost_map", {}), **dict(_pair(p, "--vhost-map") for p in args.vhost_map)}
    if args.dry_run:
        conf["dry_run"] = True
    if args.vhost:
        conf["vhosts"] = args.vhost
    if args.journal_until:
        conf["journal_until"] = int(args.journal_until) if args.journal_until.isdigit() else args.journal_until
    if args.journal_accept_gaps:
        conf["journal_accept_gaps"] = True
    if args.publish_threads is not None:
        conf["publish_threads"] = args.publish_threads
    _migration_args(args, conf)
    settings = RestoreRequest.from_conf(conf)
    connection = broker_connection(args)
    report = RestoreRun(connection, settings, seal=state_seal()).run()
    if args.format == "json":
        json_line(out, report.to_json())
        return 0
    verb = "would publish" if report.dry_run else "published"
    say(out, f"restore of {report.backup_id} into {report.target_cluster or connection.host}: {report.planned} planned, "
             f"{verb} {report.published}, {report.unroutable} unroutable")
    if report.section_fields.get("selection"):
        say(out, f"  selection: {report.section_fields['selection']}")
    journal = report.section_fields.get("journal_recovery")
    if journal:
        say(out, f"  recovery to {journal['until']}: {journal['from_snapshot']} from snapshot {journal['snapshot']}, "
                 f"{journal['from_journal']} from the journal; up to {journal['duplicates_possible']} duplicates "
                 f"(at least once); {len(journal['gaps'])} gaps accepted")
    for q in report.queues:
        done = (f"would publish {q['published']}" if report.dry_run else
                f"published {q['published']}" + (f" ({q['published_total']} with earlier runs)"
                                                  if q['published_total'] != q['published'] else ""))
        say(out, f"  {q['source_vhost']}/{q['source_queue']} -> {q['target_vhost']}/{q['target_queue']}: {done}")
    for line in definitions_lines(report.definitions or {}):
        say(out, line)
    from airflow_rbak.restore.migration import summary_lines

    for line in summary_lines(report.section_fields.get("migration")):
        say(out, line)
    return 0


def definitions_lines(result: dict[str, Any]) -> list[str]:
    """A definitions step's result (``DefinitionsResult.to_json``) as a few readable lines; long lists are cut."""
    if not result:
        return []
    changes = result.get("changes") or {}
    verb = "would" if result.get("dry_run") else ("did" if result.get("imported") else "did not")
    lines = [f"  definitions ({changes.get('mode', '?')} mode): {verb} create {listed(changes.get('create') or [])}; "
             f"replace {listed(changes.get('replace') or [])}; {changes.get('unchanged', 0)} already as in the backup"]
    if changes.get("cannot_replace"):
        lines.append(f"    different but kept (delete them first to take the backup's): {listed(changes['cannot_replace'])}")
    for label, key in (("rollback snapshot", "rollback_key"), ("transformed definitions", "transformed_key")):
        if result.get(key):
            lines.append(f"    {label}: {result[key]}")
    if result.get("restore_run"):  # what `rbak definitions rollback --restore-run` takes to undo this import
        lines.append(f"    import record: restore run {result['restore_run']} into cluster "
                     f"{result.get('cluster_name') or '(unnamed)'} (id {result.get('cluster')})")
    if result.get("created_vhosts"):
        lines.append(f"    created vhosts: {listed(result['created_vhosts'])}")
    return lines


def _migration_args(args: argparse.Namespace, conf: dict[str, Any]) -> None:
    """``--transform``, ``--queue-type`` and ``--accept-loss`` into the conf (a transformation imports definitions)."""
    if args.transform:
        conf["transformations"] = [*conf.get("transformations", []), *args.transform]
        conf["restore_definitions"] = True
    if args.queue_type:
        conf["queue_types"] = {**dict(conf.get("queue_types") or {}), **dict(_pair(p, "--queue-type") for p in args.queue_type)}
    if args.accept_loss:
        conf["accept_losses"] = [*conf.get("accept_losses", []), *args.accept_loss]


def backup_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """One whole backup in this process (encode without Spark): :meth:`BackupRun.run`."""
    from airflow_rbak.backup.run import BackupRun, BackupSettings
    from airflow_rbak.broker.discovery import QueueSelector

    conf = run_conf(args)
    selector = QueueSelector.from_params(conf.pop("vhosts") if conf.get("vhosts") else None, conf.pop("include", None),
                                         conf.pop("exclude", None),
                                         conf.pop("queue_types") if conf.get("queue_types") else None)
    conf.pop("vhosts", None)
    if "streams" in conf:
        conf["incremental_streams"] = conf.pop("streams") == "incremental"
    # the run's retention bounded by [rbak] retention and copy_retention, as rbak_backup bounds its params
    configured = command_settings(args)
    verify, policy = _verify_mode(conf.pop("verify", "deep")), configured.run_retention("retention", conf.pop("retention", None))
    copy_to = conf.pop("copy_to", None)
    copy_policy = configured.run_retention("copy_retention", conf.pop("copy_retention", None))
    backup_id, storage_url = conf.pop("backup_id"), conf.pop("storage_url")
    if not backup_id:
        raise ConfigurationError("give the new backup's id as --backup-id")
    try:
        settings = BackupSettings(backup_id, storage_url, selector=selector, **conf)
    except TypeError as exc:  # a name BackupSettings does not take
        raise ConfigurationError(f"unknown backup setting: {exc}") from None
    run = BackupRun(broker_connection(args), settings, seal=state_seal(), state_dir=configured.state_dir())
    manifest = run.run()
    summary: dict[str, Any] = {
        "backup_id": manifest.backup_id, "queues": len(manifest.queues), "total_messages": manifest.total_messages,
        "total_bytes": manifest.total_bytes, "total_segments": manifest.total_segments}
    report = validate_backup(run.plain_storage, manifest.backup_id, deep=verify == "deep") if verify != "none" else None
    summary["verify"] = None if report is None else {"mode": verify, "valid": report.valid, "defects": len(report.defects)}
    if report is None or report.valid:  # retention only after a backup that checks out
        summary["retention"] = apply_retention(run.plain_storage, policy, now_ms=int(time.time() * 1000),
                                               protect=manifest.backup_id).to_json() if policy.active else None
        if copy_to:  # the second copy, as rbak_backup's copy task makes it
            summary["copy"] = copy_backups(run.plain_storage, open_storage(copy_to), [manifest.backup_id],
                                           retention=copy_policy).to_json()
    if args.format == "json":
        json_line(out, summary)
    else:
        say(out, f"backup {manifest.backup_id} complete: {summary['queues']} queues, {summary['total_messages']} "
                 f"messages, {summary['total_bytes']} bytes in {summary['total_segments']} segments")
        if report is not None:
            say(out, f"  verify {verify}: {'valid' if report.valid else f'INVALID, {len(report.defects)} defect(s)'}")
            for defect in report.defects:
                say(out, f"    {defect}")
        if summary.get("retention"):
            say(out, f"  retention removed {', '.join(summary['retention']['deleted']) or 'nothing'}")
        if summary.get("copy"):
            say(out, f"  copy to {copy_to}: copied {', '.join(summary['copy']['copied']) or 'nothing'}, refused "
                     f"{', '.join(summary['copy']['refused']) or 'nothing'}")
    refused = bool(summary.get("copy") and summary["copy"]["refused"])
    return 0 if (report is None or report.valid) and not refused else 1


def _verify_mode(value: Any) -> str:
    if value not in ("none", "quick", "deep"):
        raise ConfigurationError(f"verify must be none, quick or deep, got {value!r}")
    return str(value)


def _pair(text: str, flag: str) -> tuple[str, str]:
    source, sep, target = text.partition("=")
    if not sep or not source or not target:
        raise ConfigurationError(f"{flag} takes SOURCE=TARGET, got {text!r}")
    return source, target
