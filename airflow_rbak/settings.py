"""The environment variables the DAGs read for their defaults, in one place (see docs/configuration.md).

Everything here is read at DAG parse time, so it makes no I/O: a default
storage folder is created by the first backup, not by parsing.
"""

from __future__ import annotations

import os
from pathlib import Path

STORAGE_URL_ENV = "RBAK_STORAGE_URL"
BACKUP_SCHEDULE_ENV = "RBAK_BACKUP_SCHEDULE"
VERIFY_SCHEDULE_ENV = "RBAK_VERIFY_SCHEDULE"
PROGRESS_INTERVAL_ENV = "RBAK_PROGRESS_INTERVAL"
STORAGE_CONN_ID_ENV = "RBAK_STORAGE_CONN_ID"


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, else ``~/airflow`` (Airflow's own default)."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


def default_storage_url() -> str:
    """``$RBAK_STORAGE_URL``, else ``$AIRFLOW_HOME/rbak-backups`` as a file URL: where every DAG looks first."""
    configured = os.environ.get(STORAGE_URL_ENV, "").strip()
    return configured or (airflow_home() / "rbak-backups").resolve().as_uri()


def default_checkpoint_state() -> str:
    """The restore DAG's checkpoints: ``backup``, objects in the backup's own storage, so any worker resumes."""
    return "backup"


def schedule_from_env(name: str, default: str | None) -> str | None:
    """A DAG schedule from ``$name`` (cron or preset); empty or ``none`` means manual runs only."""
    value = os.environ.get(name, default)
    return None if value is None or value.strip().lower() in ("", "none") else value.strip()


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
