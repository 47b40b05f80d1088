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
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.cli.output import json_line, say
from airflow_rbak.dag_defaults import default_checkpoint_state, default_storage_url
from airflow_rbak.exceptions import ConfigurationError

BROKER_URL_ENV = "RBAK_BROKER_URL"
#: DAG params a run without Airflow ignores.
AIRFLOW_ONLY = ("rabbitmq_conn_id", "spark_conn_id", "max_capture_tasks", "max_publish_tasks", "skip_approval")


def add_broker_args(p: argparse.ArgumentParser) -> None:
    """``--broker-file``: the one way besides ``$RBAK_BROKER_URL`` to say which broker, with its credentials."""
    p.add_argument("--broker-file", type=Path,
                   help=f"a file holding amqp://user:pass@host:5672/?management_port=15672&stream_port=5552 "
                        f"(default: ${BROKER_URL_ENV})")


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
    # needs no task mapping, and whoever runs the command has approved it.
    return {k: v for k, v in conf.items() if k not in AIRFLOW_ONLY}


def add_conf_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conf", "-c", help="the DAG run's conf as JSON, e.g. '{\"vhost_map\": {\"prod\": \"prod-restored\"}}'")
    p.add_argument("--conf-file", type=Path, help="the same, from a JSON file")
    p.add_argument("--path", help="storage URL (the storage_url setting; default $RBAK_STORAGE_URL or "
                                  "$AIRFLOW_HOME/rbak-backups)")
    p.add_argument("--backup-id", help="the backup_id setting")


def restore_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Plan, import definitions (if asked), publish every queue and report: :meth:`RestoreRun.run`."""
    from airflow_rbak.restore import RestoreRequest, RestoreRun

    conf = {"storage_url": default_storage_url(), "checkpoint_state": default_checkpoint_state(), **read_conf(args)}
    for name, value in (("storage_url", args.path), ("backup_id", args.backup_id)):
        if value:
            conf[name] = value
    if args.vhost_map:
        conf["vhost_map"] = {**conf.get("vhost_map", {}), **dict(_pair(p, "--vhost-map") for p in args.vhost_map)}
    if args.dry_run:
        conf["dry_run"] = True
    settings = RestoreRequest.from_conf(conf)
    connection = broker_connection(args)
    report = RestoreRun(connection, settings).run()
    if args.format == "json":
        json_line(out, report.to_json())
        return 0
    verb = "would publish" if report.dry_run else "published"
    say(out, f"restore of {report.backup_id} into {report.target_cluster or connection.host}: {report.planned} planned, "
             f"{verb} {report.published}, {report.unroutable} unroutable")
    for q in report.queues:
        say(out, f"  {q['source_vhost']}/{q['source_queue']} -> {q['target_vhost']}/{q['target_queue']}: "
                 f"{q['published']} now, {q['published_total']} in total")
    if report.definitions:
        say(out, f"  definitions: {report.definitions}")
    return 0


def backup_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """One whole backup in this process (encode without Spark): :meth:`BackupRun.run`."""
    from airflow_rbak.backup.run import BackupRun, BackupSettings
    from airflow_rbak.broker.discovery import QueueSelector

    conf = read_conf(args)
    selector = QueueSelector.from_params(conf.pop("vhosts") if conf.get("vhosts") else None, conf.pop("include", None),
                                         conf.pop("exclude", None),
                                         conf.pop("queue_types") if conf.get("queue_types") else None)
    conf.pop("vhosts", None)
    if "streams" in conf:
        conf["incremental_streams"] = conf.pop("streams") == "incremental"
    for ignored in ("verify", "retention"):  # the Spark verify step and retention are the DAG's
        conf.pop(ignored, None)
    backup_id = args.backup_id or conf.pop("backup_id", None)
    if not backup_id:
        raise ConfigurationError("give the new backup's id as --backup-id")
    storage_url = args.path or conf.pop("storage_url", None) or default_storage_url()
    try:
        settings = BackupSettings(backup_id, storage_url, selector=selector, **conf)
    except TypeError as exc:  # a name BackupSettings does not take
        raise ConfigurationError(f"unknown backup setting: {exc}") from None
    manifest = BackupRun(broker_connection(args), settings).run()
    summary = {"backup_id": manifest.backup_id, "queues": len(manifest.queues), "total_messages": manifest.total_messages,
               "total_bytes": manifest.total_bytes, "total_segments": manifest.total_segments}
    if args.format == "json":
        json_line(out, summary)
    else:
        say(out, f"backup {manifest.backup_id} complete: {summary['queues']} queues, {summary['total_messages']} "
                 f"messages, {summary['total_bytes']} bytes in {summary['total_segments']} segments")
    return 0


def _pair(text: str, flag: str) -> tuple[str, str]:
    source, sep, target = text.partition("=")
    if not sep or not source or not target:
        raise ConfigurationError(f"{flag} takes SOURCE=TARGET, got {text!r}")
    return source, target
