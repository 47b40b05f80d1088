"""Each command's own options, apart from the code that runs the commands: ``rbak`` builds its whole parser from
this module, then imports only the module of the command it runs (``main.COMMANDS``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from airflow_rbak.cli.arguments import positive_int
from airflow_rbak.repository.message_search import DEFAULT_SEARCH_LIMIT
from airflow_rbak.segments.stages import DEFAULT_IN_PROCESS_MAX_BYTES, PLACEMENTS

#: Where ``rbak restore``, ``backup``, ``doctor`` and ``definitions rollback`` find the broker without a file.
BROKER_URL_ENV = "RBAK_BROKER_URL"
#: The broker connection the backup and restore DAGs name by default (what ``rbak doctor`` checks without one).
DEFAULT_CONN_ID = "rabbitmq_default"


def add_filter_args(p: argparse.ArgumentParser) -> None:
    """The filter's options (docs/operations.md#finding-and-replaying-messages lists what each tests)."""
    f = p.add_argument_group("filters (all given must hold)")
    f.add_argument("--since", metavar="TIME", help="backed up at or after: epoch ms or ISO 8601 (UTC unless a zone)")
    f.add_argument("--until", metavar="TIME", help="backed up at or before: epoch ms or ISO 8601")
    f.add_argument("--message-id", metavar="ID", help="the message_id property, exactly")
    f.add_argument("--correlation-id", metavar="ID", help="the correlation_id property, exactly")
    f.add_argument("--routing-key", metavar="GLOB", help="the routing key, a shell glob over all of it (orders.*)")
    f.add_argument("--exchange", metavar="NAME", help="the exchange it was published to, exactly")
    f.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header's value as text (repeatable)")
    f.add_argument("--content-type", metavar="TYPE", help="the content_type property, exactly")
    f.add_argument("--body-contains", metavar="TEXT", help="the body holds these bytes (TEXT as UTF-8)")
    f.add_argument("--body-regex", metavar="REGEX", help="a regular expression found in the body read as UTF-8; each "
                                                         "body's search is bounded in time (a runaway pattern stops the read)")


def add_messages_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vhost", help="only this vhost's queues (its name, exactly)")
    p.add_argument("--queue", help="only queues of this name (exactly)")
    add_filter_args(p)
    p.add_argument("--limit", type=positive_int, metavar="N", help="stop after N messages (default: all)")


def add_search_args(p: argparse.ArgumentParser) -> None:
    scope = p.add_argument_group("which backups (default: every complete backup)")
    scope.add_argument("--from-id", metavar="ID", help="from this backup on (by creation time)")
    scope.add_argument("--to-id", metavar="ID", help="up to this backup")
    scope.add_argument("--since-date", metavar="TIME", help="backups created at or after: epoch ms or ISO 8601")
    scope.add_argument("--until-date", metavar="TIME", help="backups created at or before")
    add_filter_args(p)
    p.add_argument("--limit", type=positive_int, default=DEFAULT_SEARCH_LIMIT, metavar="N",
                   help=f"list at most N distinct messages; count the rest (default {DEFAULT_SEARCH_LIMIT})")
    p.add_argument("--placement", choices=PLACEMENTS, default="auto",
                   help="auto: in this process up to --in-process-max-bytes of segment payloads, else Spark")
    p.add_argument("--in-process-max-bytes", type=int, default=DEFAULT_IN_PROCESS_MAX_BYTES, metavar="N",
                   help=f"auto's threshold (default {DEFAULT_IN_PROCESS_MAX_BYTES}, as the backup's encode)")
    p.add_argument("--spark-master", default="local[2]", help="spark-submit's --master (default local[2])")


def add_broker_args(p: argparse.ArgumentParser) -> None:
    """``--broker-file``: the one way besides ``$RBAK_BROKER_URL`` to say which broker, with its credentials."""
    p.add_argument("--broker-file", type=Path,
                   help=f"a file holding amqp://user:pass@host:5672/?management_port=15672&stream_port=5552 "
                        f"(default: ${BROKER_URL_ENV})")


def add_conf_args(p: argparse.ArgumentParser, example: str) -> None:
    """``--conf`` (the DAG run's conf, shown with an ``example`` of the command's own), ``--path``, ``--backup-id``."""
    p.add_argument("--conf", "-c", help=f"the DAG run's conf as JSON, e.g. '{example}'")
    p.add_argument("--conf-file", type=Path, help="the same, from a JSON file")
    p.add_argument("--path", help="storage URL (the storage_url setting; default: [rbak] storage_url)")
    p.add_argument("--backup-id", help="the backup_id setting")


def add_doctor_args(p: argparse.ArgumentParser) -> None:
    """The location, the broker, and what the backup will ask of them."""
    p.add_argument("--path", help="storage URL (default: [rbak] storage_url, else $AIRFLOW_HOME/rbak-backups)")
    p.add_argument("--conn-id", metavar="CONN_ID",
                   help=f"the broker's Airflow connection (loads Airflow); default: --broker-file or ${BROKER_URL_ENV}, "
                        f"else {DEFAULT_CONN_ID} where Airflow is installed")
    add_broker_args(p)
    p.add_argument("--vhost", action="append", metavar="VHOST",
                   help="a vhost the backup names (its vhosts param; repeatable); default: every vhost the user sees")
    p.add_argument("--no-definitions", action="store_true",
                   help="the backup runs with include_definitions false (no administrator tag needed)")
    p.add_argument("--spark-conn-id", default="spark_default", metavar="CONN_ID",
                   help="the Spark connection of the DAGs' Spark steps (default spark_default)")
    p.add_argument("--strict", action="store_true", help="count a warning as a failure (code 1)")


def add_export_args(p: argparse.ArgumentParser) -> None:
    """``definitions export``'s own options (``--path``/``--backup-id`` are the shared ones)."""
    p.add_argument("--vhost", action="append", metavar="VHOST",
                   help="only this vhost's definitions (repeatable); cluster-wide global parameters are then left out")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the file to write (mode 600), or - for standard output")
    p.add_argument("--include-users", action="store_true",
                   help="write the users with their password hashes, their permissions and parameter URIs' "
                        "credentials as the backup stored them (default: left out, and the summary says so)")
