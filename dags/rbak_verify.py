"""Re-verify a stored backup deeply with Spark (every segment, or a sample): ``backup_id`` or ``latest``.

Manual by default (``RBAK_VERIFY_SCHEDULE`` sets a schedule, e.g. ``@weekly``).
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, task

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.dag_defaults import VERIFY_SCHEDULE_ENV, default_storage_url, schedule_from_env, task_defaults
from airflow_rbak.operators.spark import RbakVerifyBackupOperator

with DAG(
    dag_id="rbak_verify",
    schedule=schedule_from_env(VERIFY_SCHEDULE_ENV, None),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    default_args=task_defaults(),
    params={
        "storage_url": Param(default_storage_url(), type="string", minLength=1),
        "backup_id": Param("latest", type="string", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$",
                           description="a backup id, or latest (the newest complete backup)"),
        "sample_percent": Param(100, type="number", exclusiveMinimum=0, maximum=100),
        "spark_conn_id": Param("spark_default", type="string", minLength=1),
        "max_decompressed_bytes": Param(DEFAULT_MAX_DECOMPRESSED_BYTES, type="integer", minimum=1,
                                        description="refuse a segment whose records take more than this many bytes "
                                                    "uncompressed; the default holds any segment this provider writes"),
    },
    tags=["rbak", "rabbitmq", "verify"],
    doc_md=__doc__,
):

    @task
    def resolve_backup(params: dict | None = None) -> str:
        """The backup to verify: the given id, or the newest complete one for ``latest``."""
        from airflow_rbak.dag_defaults import default_storage_conn_id
        from airflow_rbak.hooks.storage import use_storage_connection
        from airflow_rbak.repository.catalog import latest_complete
        from airflow_rbak.storage import open_storage

        use_storage_connection(default_storage_conn_id())
        if params["backup_id"] != "latest":
            return params["backup_id"]
        found = latest_complete(open_storage(params["storage_url"]))
        if found is None:
            raise ValueError(f"no complete backup under {open_storage(params['storage_url']).url}; run rbak_backup first")
        return found.backup_id

    backup_id = resolve_backup()
    RbakVerifyBackupOperator(
        task_id="verify", storage_url="{{ params.storage_url }}", backup_id=backup_id,
        sample_percent="{{ params.sample_percent }}", conn_id="{{ params.spark_conn_id }}",
        max_decompressed_bytes="{{ params.max_decompressed_bytes }}")
