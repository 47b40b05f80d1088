"""Alert when a backup location's newest complete backup is older than ``max_age_hours`` (or missing).

Scheduled hourly (``[rbak] freshness_schedule`` changes it; ``none``: manual).
One ``check`` task per location in ``storage_urls``: a stale location fails
its task (and so the run), which calls the failure notifier
(``[rbak] failure_notifier``) like any other rbak task. Each check also sends the
location's ``rbak.freshness.age`` gauge (docs/airflow.md#metrics). It reads storage only,
so it also notices a backup DAG that is paused or a scheduler that is down. Its credentials come from
``[rbak] storage_conn_id``, as every rbak task's do.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, task

from airflow_rbak.airflow_settings import rbak_settings

CONFIG = rbak_settings()

with DAG(
    dag_id="rbak_freshness",
    schedule=CONFIG.schedule("freshness_schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    # a stale backup stays stale for the next minutes: no retries, the next scheduled run checks again
    default_args={**CONFIG.task_defaults(), "retries": 0},
    params={
        "storage_urls": Param([CONFIG.storage_url()], type="array", minItems=1, items={"type": "string", "minLength": 1},
                              description="the backup locations to check, each on its own"),
        "max_age_hours": Param(26, type="number", exclusiveMinimum=0,
                               description="the newest complete backup of each location must have finished at most this "
                                           "long ago (a daily backup plus two hours)"),
    },
    tags=["rbak", "rabbitmq", "monitoring"],
    doc_md=__doc__,
):

    @task
    def locations(params: dict | None = None) -> list[str]:
        """The locations to check, one mapped ``check`` task each; a location ``[rbak]`` does not allow fails here."""
        from airflow_rbak.operators.access import refuse_unlisted_params

        refuse_unlisted_params(params)
        return list(params["storage_urls"])

    @task(map_index_template="{{ storage_url }}")
    def check(storage_url: str, params: dict | None = None) -> dict:
        """The location's newest complete backup and its age; fails when it is too old or missing."""
        import time

        from airflow.sdk.exceptions import AirflowFailException

        from airflow_rbak.freshness import StaleBackupError, measure_freshness
        from airflow_rbak.hooks.encryption import connection_keyring
        from airflow_rbak.hooks.storage import open_connected_storage
        from airflow_rbak.operators import metrics

        settings = rbak_settings()  # as every rbak task's: the storage connection, and an encrypted location's keys
        storage = open_connected_storage(storage_url, settings.storage_conn_id(),
                                         keyring=connection_keyring(settings.encryption_conn_id()))
        found = measure_freshness(storage, float(params["max_age_hours"]), int(time.time() * 1000))
        metrics.freshness_measured(found.to_json())  # stale or not: the age gauge is what a dashboard alerts on
        try:
            found.raise_if_stale()
        except StaleBackupError as exc:
            raise AirflowFailException(str(exc)) from exc
        return found.to_json()

    check.expand(storage_url=locations())
