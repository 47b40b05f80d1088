"""Alert when a backup location's newest complete backup is older than ``max_age_hours`` (or missing).

Scheduled hourly (``RBAK_FRESHNESS_SCHEDULE`` changes it; ``none``: manual).
One ``check`` task per location in ``storage_urls``: a stale location fails
its task (and so the run), which calls the failure notifier
(``RBAK_FAILURE_NOTIFIER``) like any other rbak task. It reads storage only,
so it also notices a backup DAG that is paused or a scheduler that is down.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, task

from airflow_rbak.dag_defaults import FRESHNESS_SCHEDULE_ENV, default_storage_url, schedule_from_env, task_defaults

with DAG(
    dag_id="rbak_freshness",
    schedule=schedule_from_env(FRESHNESS_SCHEDULE_ENV, "@hourly"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    # a stale backup stays stale for the next minutes: no retries, the next scheduled run checks again
    default_args={**task_defaults(), "retries": 0},
    params={
        "storage_urls": Param([default_storage_url()], type="array", minItems=1, items={"type": "string", "minLength": 1},
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
        """The locations to check, one mapped ``check`` task each."""
        return list(params["storage_urls"])

    @task(map_index_template="{{ storage_url }}")
    def check(storage_url: str, params: dict | None = None) -> dict:
        """The location's newest complete backup and its age; fails when it is too old or missing."""
        import time

        from airflow.sdk.exceptions import AirflowFailException

        from airflow_rbak.freshness import StaleBackupError, check_freshness
        from airflow_rbak.storage import open_storage

        try:
            return check_freshness(open_storage(storage_url), float(params["max_age_hours"]), int(time.time() * 1000)).to_json()
        except StaleBackupError as exc:
            raise AirflowFailException(str(exc)) from exc

    check.expand(storage_url=locations())
