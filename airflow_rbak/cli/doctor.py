"""``rbak doctor``: the preflight of a deployment before its first run (docs/operations.md#preflight).

It checks what the DAGs will meet, with the settings they read (:mod:`airflow_rbak.cli.configured`): the broker
(``--conn-id``, else ``--broker-file`` or ``$RBAK_BROKER_URL``, else the DAGs' ``rabbitmq_default`` where Airflow is
installed), the location, its encryption keys, the state key, which rbak DAGs are paused and the local Spark and
Java. Exit 0 when nothing failed (warnings are shown; ``--strict`` makes them fail), 1 when a check failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import IO

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.cli.configured import airflow_conf, cli_settings, encryption_keyring, location
from airflow_rbak.cli.options import BROKER_URL_ENV, DEFAULT_CONN_ID
from airflow_rbak.cli.output import json_line, say
from airflow_rbak.cli.runs import broker_connection
from airflow_rbak.doctor import Deployment, SecretSource, Status, run_preflight
from airflow_rbak.doctor.deployment import PausedDags
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.keyring import Keyring, current_keyring


def doctor_cmd(args: argparse.Namespace, out: IO[str]) -> int:
    """Run every check, print each finding with its fix, exit by the worst (see the module's docstring)."""
    pika_log = logging.getLogger("pika")  # each permission probe is a channel error the broker answers: expected
    level = pika_log.level
    pika_log.setLevel(logging.CRITICAL)
    try:
        report = run_preflight(deployment(args))
    finally:
        pika_log.setLevel(level)
    if args.format == "json":
        json_line(out, report.to_json())
    else:
        for finding in report.findings:
            for line in finding.line().splitlines():
                say(out, line)
        say(out, f"rbak doctor: {report.summary()}")
    failed = report.worst is Status.FAILURE or (args.strict and report.worst is Status.WARNING)
    return 1 if failed else 0


def deployment(args: argparse.Namespace) -> Deployment:
    """What the checks look at, resolved as the DAGs resolve it; a broker or keys that cannot be had are findings."""
    settings = cli_settings()
    conf = airflow_conf()
    keys_id = getattr(args, "encryption_conn_id", None) or settings.encryption_conn_id()
    keyring, keys_problem = _keys(keys_id)
    storage_url = location(argparse.Namespace(path=args.path, encryption_conn_id=keys_id))
    connection, name, problem = _broker(args, airflow=conf is not None)
    fernet = (conf.get("core", "fernet_key", fallback=None) if conf is not None
              else os.environ.get("AIRFLOW__CORE__FERNET_KEY"))
    facts = _airflow_facts(args.spark_conn_id, keys_id, keyring) if conf is not None else {
        "paused": PausedDags(unknown="Airflow is not installed here"), "spark_master": None,
        "keys_source": SecretSource("the RBAK_ENCRYPTION_KEYS variable", True) if keyring else None}
    return Deployment(
        storage_url=storage_url, connection=connection, broker_name=name, broker_problem=problem,
        vhosts=tuple(args.vhost) if args.vhost else None, include_definitions=not args.no_definitions,
        keyring=keyring, keys_problem=keys_problem, state_key=settings.state_key_setting(fernet),
        spark_conn_id=args.spark_conn_id, search_path=os.pathsep.join(
            filter(None, [os.path.dirname(sys.executable), os.environ.get("PATH")])),
        java_home=os.environ.get("JAVA_HOME") or None, **facts)


def _keys(keys_id: str | None) -> tuple[Keyring | None, str | None]:
    try:
        return (encryption_keyring(keys_id) if keys_id else current_keyring()), None
    except Exception as exc:  # noqa: BLE001 - a missing connection is Airflow's exception: a finding either way
        return None, f"the encryption keys cannot be read: {exc}"


def _broker(args: argparse.Namespace, airflow: bool) -> tuple[RabbitMQConnection | None, str, str | None]:
    """The broker, its name in findings, and why there is none (never its URL or password)."""
    if not args.conn_id and (args.broker_file is not None or os.environ.get(BROKER_URL_ENV, "").strip()):
        where = f"--broker-file {args.broker_file}" if args.broker_file is not None else f"${BROKER_URL_ENV}"
        try:
            return broker_connection(args), where, None
        except RbakError as exc:
            return None, where, str(exc)
    conn_id = args.conn_id or DEFAULT_CONN_ID
    name = f"connection {conn_id!r}"
    if not airflow:
        return None, name, (f"no broker named: Airflow is not installed here, so give --broker-file or "
                            f"${BROKER_URL_ENV}")
    from airflow_rbak.hooks.rabbitmq import RabbitMQHook  # Airflow's connections: only where it is installed

    try:
        return RabbitMQHook(conn_id).get_conn(), name, None
    except Exception as exc:  # noqa: BLE001 - a missing connection is Airflow's own exception
        return None, name, f"{name} cannot be read: {type(exc).__name__}: {exc}"


def _airflow_facts(spark_conn_id: str, keys_id: str | None, keyring: Keyring | None) -> dict[str, object]:
    """The paused DAGs, the Spark master, where the keys are stored: what only Airflow knows."""
    from airflow_rbak.hooks.deployment import connection_source, paused_dags, spark_master

    source = connection_source(keys_id) if keys_id else (
        SecretSource("the RBAK_ENCRYPTION_KEYS variable", True) if keyring else None)
    return {"paused": paused_dags(), "spark_master": spark_master(spark_conn_id), "keys_source": source}
