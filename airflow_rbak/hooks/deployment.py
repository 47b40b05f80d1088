"""What only Airflow can tell the preflight (``airflow_rbak.doctor``): where a connection is stored, the Spark
connection's master, which rbak DAGs are paused; and the check the backup DAG's first task runs.

A connection's source is told the way Airflow looks it up: an ``AIRFLOW_CONN_<ID>`` variable, else the configured
``[secrets] backend`` (asked for it), else the metadata database. Only the first two are evidence of a copy outside
Airflow; a connection found in the database alone is reported so (it may have a copy in someone's vault that no
program can see, which is why that is a warning, not a failure).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from airflow.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.display import package_logger, printable
from airflow_rbak.doctor import Deployment, Report, SecretSource, Status, run_preflight
from airflow_rbak.doctor.deployment import PausedDags
from airflow_rbak.hooks.spark import DEFAULT_MASTER, local_python_env, stored_connection
from airflow_rbak.settings import RbakSettings, airflow_lookup
from airflow_rbak.storage.keyring import current_keyring

log = package_logger(__name__)

#: The DAGs whose paused state ``rbak doctor`` reads.
RBAK_DAGS = ("rbak_backup", "rbak_verify", "rbak_restore", "rbak_freshness", "rbak_drill")


def connection_source(conn_id: str) -> SecretSource:
    """Where Airflow reads connection ``conn_id`` from, and whether that is outside Airflow (never its value)."""
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    if os.environ.get(variable):
        return SecretSource(f"the {variable} environment variable", True)
    backend = conf.get("secrets", "backend", fallback="") or ""
    if backend.strip():
        try:
            from airflow.utils.module_loading import import_string

            kwargs = json.loads(conf.get("secrets", "backend_kwargs", fallback="") or "{}")
            if import_string(backend.strip())(**kwargs).get_conn_value(conn_id):
                return SecretSource(f"the secrets backend {backend.strip()}", True)
        except Exception as exc:  # noqa: BLE001 - any backend's failure: then it cannot be told
            return SecretSource(f"connection {conn_id!r} (the secrets backend {backend.strip()} could not be asked: "
                                f"{type(exc).__name__})", None)
    return SecretSource(f"connection {conn_id!r} in Airflow's metadata database", False)


def spark_master(conn_id: str) -> str:
    """The master a Spark step of ``conn_id`` submits to (``local[*]`` when the connection does not exist)."""
    found = stored_connection(conn_id)
    return (found.host if found else None) or DEFAULT_MASTER


def paused_dags(dag_ids: Iterable[str] = RBAK_DAGS) -> PausedDags:
    """The DAGs' paused state from the metadata database (the command line's environment: no task may read it)."""
    at_creation = conf.getboolean("core", "dags_are_paused_at_creation", fallback=True)
    try:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(DagModel.dag_id, DagModel.is_paused).filter(DagModel.dag_id.in_(list(dag_ids))).all()
    except Exception as exc:  # noqa: BLE001 - no database here, or not migrated: say so
        return PausedDags(paused_at_creation=at_creation, unknown=f"the metadata database cannot be read: "
                                                                  f"{type(exc).__name__}")
    return PausedDags({dag_id: bool(paused) for dag_id, paused in rows}, at_creation)


def backup_preflight(connection: RabbitMQConnection, conn_id: str, storage_url: str, vhosts: Any,
                     include_definitions: bool, spark_conn_id: str | None) -> Report:
    """The backup DAG's first task's check: cheap (no AMQP probes, no paused state), every finding logged.

    Fails the task without retries on a failure of the settings; a broker or location it could not reach is left to
    the step, which says so and retries.
    """
    settings = RbakSettings(airflow_lookup(conf))
    keys_id = settings.encryption_conn_id()
    deployment = Deployment(
        storage_url=storage_url, connection=connection, broker_name=f"connection {conn_id!r}",
        vhosts=tuple(vhosts) if vhosts else None, include_definitions=include_definitions, probe_rights=False,
        keyring=current_keyring(), keys_source=connection_source(keys_id) if keys_id else None,
        state_key=settings.state_key_setting(conf.get("core", "fernet_key", fallback=None)),
        spark_master=spark_master(spark_conn_id) if spark_conn_id else None, spark_conn_id=spark_conn_id or "",
        search_path=local_python_env()["PATH"], java_home=os.environ.get("JAVA_HOME") or None)
    report = run_preflight(deployment)
    for finding in report.findings:
        (log.info if finding.status is Status.OK else log.warning)("preflight %s", printable(finding.line()))
    refused = [f for f in report.of(Status.FAILURE) if not f.unreachable]
    if refused:
        raise AirflowFailException(printable("rbak preflight failed: " + "; ".join(
            f"{f.item}: {f.detail} (fix: {f.fix})" for f in refused)))
    return report

