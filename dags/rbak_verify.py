"""Re-verify a stored backup deeply with Spark (every segment, or a sample): ``backup_id`` or ``latest``.

Manual by default (``[rbak] verify_schedule`` sets a schedule, e.g. ``@weekly``).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, task

from airflow_rbak.access import DAG_DEFAULT_CONNECTIONS
from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.operators.spark import RbakVerifyBackupOperator

DEFAULTS = DAG_DEFAULT_CONNECTIONS["rbak_verify"]  # always allowed (access.py)
CONFIG = rbak_settings()

with DAG(
    dag_id="rbak_verify",
    schedule=CONFIG.schedule("verify_schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    default_args=CONFIG.task_defaults(),
    params={
        "storage_url": Param(CONFIG.storage_url(), type="string", minLength=1),
        "backup_id": Param("latest", type="string", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$",
                           description="a backup id, or latest (the newest complete backup)"),
        "sample_percent": Param(100, type="number", exclusiveMinimum=0, maximum=100),
        "spark_conn_id": Param(DEFAULTS["spark_conn_id"], type="string", minLength=1),
        "max_decompressed_bytes": Param(DEFAULT_MAX_DECOMPRESSED_BYTES, type="integer", minimum=1,
                                        description="refuse a segment whose records take more than this many bytes "
                                                    "uncompressed; the default holds any segment this provider writes"),
    },
    tags=["rbak", "rabbitmq", "verify"],
    doc_md=__doc__,
):

    @task
    def resolve_backup(params: dict | None = None) -> str:
        """The backup to verify: the given id, or the newest complete one for ``latest``; first, the access rules."""
        from airflow_rbak.hooks.encryption import encryption_connection
        from airflow_rbak.hooks.storage import storage_connection
        from airflow_rbak.operators.access import refuse_unlisted_params
        from airflow_rbak.repository.catalog import resolve_backup_id
        from airflow_rbak.storage import open_storage

        refuse_unlisted_params(params)  # a location or connection [rbak] does not allow: nothing runs
        settings = rbak_settings()
        with storage_connection(settings.storage_conn_id()), encryption_connection(settings.encryption_conn_id()):
            return resolve_backup_id(open_storage(params["storage_url"]), params["backup_id"])

    backup_id = resolve_backup()
    RbakVerifyBackupOperator(
        task_id="verify", storage_url="{{ params.storage_url }}", backup_id=backup_id,
        sample_percent="{{ params.sample_percent }}", conn_id="{{ params.spark_conn_id }}",
        max_decompressed_bytes="{{ params.max_decompressed_bytes }}")
