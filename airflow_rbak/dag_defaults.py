"""The environment variables the DAGs read for their defaults, in one place (see docs/configuration.md).

Everything here is read at DAG parse time, so it makes no I/O: a default
storage folder is created by the first backup, not by parsing.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
from pathlib import Path
from typing import Any

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.url import credentials_refusal, holds_credentials

STORAGE_URL_ENV = "RBAK_STORAGE_URL"
BACKUP_SCHEDULE_ENV = "RBAK_BACKUP_SCHEDULE"
VERIFY_SCHEDULE_ENV = "RBAK_VERIFY_SCHEDULE"
RETRIES_ENV = "RBAK_TASK_RETRIES"
TIMEOUT_ENV = "RBAK_TASK_TIMEOUT_MINUTES"
POOL_ENV = "RBAK_POOL"
QUEUE_TASKS_ENV = "RBAK_MAX_ACTIVE_QUEUE_TASKS"
FRESHNESS_SCHEDULE_ENV = "RBAK_FRESHNESS_SCHEDULE"
NOTIFIER_ENV = "RBAK_FAILURE_NOTIFIER"
PROGRESS_INTERVAL_ENV = "RBAK_PROGRESS_INTERVAL"
STORAGE_CONN_ID_ENV = "RBAK_STORAGE_CONN_ID"
APPROVAL_TIMEOUT_ENV = "RBAK_APPROVAL_TIMEOUT_HOURS"
UI_LOCATIONS_ENV = "RBAK_UI_LOCATIONS"


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, else ``~/airflow`` (Airflow's own default)."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


def default_storage_url() -> str:
    """``$RBAK_STORAGE_URL``, else ``$AIRFLOW_HOME/rbak-backups`` as a file URL: where every DAG looks first.

    A URL holding credentials is refused here, before it becomes a DAG param's default that every viewer sees.
    """
    configured = _configured_storage_url()
    if holds_credentials(configured):
        raise ConfigurationError(f"${STORAGE_URL_ENV}: {credentials_refusal(configured)}")
    return configured


def _configured_storage_url() -> str:
    return os.environ.get(STORAGE_URL_ENV, "").strip() or (airflow_home() / "rbak-backups").resolve().as_uri()


def ui_storage_urls() -> list[str]:
    """The locations the Airflow UI's backups view lists: the default storage URL, then ``$RBAK_UI_LOCATIONS``.

    ``$RBAK_UI_LOCATIONS`` holds further storage URLs separated by spaces or newlines (storage URLs hold
    neither, and no credentials: S3 keys come from the AWS chain); each location is listed once. They are
    returned as configured: the view shows one that holds credentials as refused, never its URL.
    """
    urls = [_configured_storage_url(), *os.environ.get(UI_LOCATIONS_ENV, "").split()]
    return list(dict.fromkeys(urls))


def default_checkpoint_state() -> str:
    """The restore DAG's checkpoints: ``backup``, objects in the backup's own storage, so any worker resumes."""
    return "backup"


def schedule_from_env(name: str, default: str | None) -> str | None:
    """A DAG schedule from ``$name`` (cron or preset); empty or ``none`` means manual runs only."""
    value = os.environ.get(name, default)
    return None if value is None or value.strip().lower() in ("", "none") else value.strip()


def _int_env(name: str, default: int, minimum: int) -> int:
    text = os.environ.get(name, "").strip()
    try:
        value = int(text) if text else default
    except ValueError:
        raise ValueError(f"${name} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"${name} must be >= {minimum}, got {value}")
    return value


def task_defaults() -> dict[str, Any]:
    """``default_args`` of every DAG: retries with exponential backoff and a time limit per task.

    Every step resumes where it stopped (capture and restore checkpoints, the lock as a lease), so a transient
    failure (a broker restart, a storage hiccup) is worth retrying; invalid settings and refusals fail at once
    (the operators raise ``AirflowFailException``), whatever the retries. The first retry waits 1 minute, each
    next one twice as long, up to 30 minutes.
    """
    return {
        "on_failure_callback": failure_notifiers(),
        "retries": _int_env(RETRIES_ENV, 3, 0),
        "retry_delay": dt.timedelta(minutes=1),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": dt.timedelta(minutes=30),
        "execution_timeout": dt.timedelta(minutes=_int_env(TIMEOUT_ENV, 360, 1)),
    }


def approval_timeout() -> dt.timedelta:
    """How long a restore waits for a person to approve its plan: ``$RBAK_APPROVAL_TIMEOUT_HOURS``, default 24.

    No answer in that time counts as a rejection (nothing is imported or published): a plan a day old describes a
    target that may have changed since, and a run waiting for ever would hold its place among the active runs.
    """
    return dt.timedelta(hours=_int_env(APPROVAL_TIMEOUT_ENV, 24, 1))


def queue_task_limits() -> dict[str, Any]:
    """The pool and per-run cap of the tasks that work on queues (capture, publish): the broker's load.

    ``$RBAK_POOL`` (create it first, ``airflow pools set rbak 4 "RabbitMQ"``) bounds them across all runs;
    ``$RBAK_MAX_ACTIVE_QUEUE_TASKS`` within one run.
    """
    return {"pool": os.environ.get(POOL_ENV, "").strip() or "default_pool",
            "max_active_tis_per_dagrun": _int_env(QUEUE_TASKS_ENV, 4, 1)}


def failure_notifiers() -> list[Any]:
    """The notifier every rbak task calls when it fails for good: ``$RBAK_FAILURE_NOTIFIER`` as ``module:name``.

    ``name`` is any Airflow Notifier (an instance, e.g. ``SlackNotifier(...)`` built in your own module, or a
    ``BaseNotifier`` subclass taking no arguments, which is instantiated) or any ``callback(context)``.
    Importing it at parse time makes a typo an import error of the DAG, not a silent lack of alerts.
    """
    spec = os.environ.get(NOTIFIER_ENV, "").strip()
    if not spec:
        return []
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"${NOTIFIER_ENV} must be module:name (e.g. my_alerts:slack_notifier), got {spec!r}")
    found = getattr(importlib.import_module(module), name)
    return [found() if isinstance(found, type) else found]


def progress_interval_s() -> float:
    """Seconds between progress lines in capture and restore task logs: ``$RBAK_PROGRESS_INTERVAL``, else 10."""
    try:
        value = float(os.environ.get(PROGRESS_INTERVAL_ENV, "") or 10.0)
    except ValueError:
        return 10.0
    return value if value > 0 else 10.0


def default_storage_conn_id() -> str | None:
    """``$RBAK_STORAGE_CONN_ID``: the Airflow connection (type aws) every task takes S3 credentials from; unset: the
    environment's (boto3's chain)."""
    return os.environ.get(STORAGE_CONN_ID_ENV, "").strip() or None
