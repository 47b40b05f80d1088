"""Restore drill: prove that a location's latest complete backup restores, byte for byte, on a broker you name.

Restores the backup (or ``sample_queues`` of its queues, picked at random) into scratch vhosts it creates on the
``rabbitmq_conn_id`` broker (``rbak-drill-<run id>-<digest>-<n>``, marked in their description), reads every restored message
back and compares body, properties, headers and order with the backup's records, deletes the scratch vhosts, and
reports. A failed drill (a damaged segment, a message that differs, a scratch vhost left) fails the ``drill`` task,
which calls the failure notifier (``[rbak] failure_notifier``) like ``rbak_freshness``; the ``rbak.drill.passed``
gauge is sent either way (docs/airflow.md#metrics). No approval: nothing outside the scratch vhosts changes.

Off by default: scheduled by ``[rbak] drill_schedule`` (``@weekly``; ``none``: manual) but paused when Airflow first
sees it, whatever ``[core] dags_are_paused_at_creation`` says (``is_paused_upon_creation``): unpause it once
``rabbitmq_conn_id`` names a broker drills may use. docs/operations.md#restore-drills.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from airflow_rbak.access import DAG_DEFAULT_CONNECTIONS
from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.operators.drill import RbakDrillCleanupOperator, RbakDrillOperator

DEFAULTS = DAG_DEFAULT_CONNECTIONS["rbak_drill"]  # always allowed (access.py)
CONFIG = rbak_settings()

with DAG(
    dag_id="rbak_drill",
    schedule=CONFIG.schedule("drill_schedule"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    render_template_as_native_obj=True,
    # a failed drill is a finding, not a transient fault: no retries, the next scheduled drill tries again
    default_args={**CONFIG.task_defaults(), "retries": 0},
    params={
        "storage_url": Param(CONFIG.storage_url(), type="string", minLength=1, description="the location to drill"),
        "rabbitmq_conn_id": Param(DEFAULTS["rabbitmq_conn_id"], type="string", minLength=1,
                                  description="the broker the scratch vhosts are made on (its user must be allowed to "
                                              "create and delete vhosts)"),
        "backup_id": Param("latest", type="string", minLength=1,
                           description="a backup id, or latest: the newest complete backup"),
        "vhosts": Param(["*"], type="array", minItems=1, items={"type": "string", "minLength": 1},
                        description="source vhosts to drill (globs)"),
        "queues": Param(["*"], type="array", minItems=1, items={"type": "string", "minLength": 1},
                        description="source queues to drill (globs)"),
        "sample_queues": Param(0, type="integer", minimum=0,
                               description="drill this many of the selected queues, picked at random; 0: every one"),
        "strip_user_id": Param(False, type="boolean",
                               description="publish records whose user_id names another user without it (RabbitMQ "
                                           "refuses them otherwise), and expect them so"),
    },
    tags=["rbak", "rabbitmq", "monitoring"],
    doc_md=__doc__,
):
    drilled = dict(storage_url="{{ params.storage_url }}", rabbitmq_conn_id="{{ params.rabbitmq_conn_id }}",
                   backup_id="{{ params.backup_id }}", vhosts="{{ params.vhosts }}", queues="{{ params.queues }}",
                   sample_queues="{{ params.sample_queues }}", strip_user_id="{{ params.strip_user_id }}")
    drill = RbakDrillOperator(task_id="drill", **drilled)
    cleanup = RbakDrillCleanupOperator(task_id="cleanup", **drilled).as_teardown()
    drill >> cleanup
