"""Reads the ``rbak_backup``, ``rbak_verify`` and ``rbak_restore`` runs from Airflow's metadata database (Airflow side).

Three small queries (runs, the tasks that verify, the XComs that name a resolved backup id or hold a
restore's report) read every run of the three DAGs at once, newest first up to ``limit``;
:class:`~airflow_rbak.ui.runs.RunIndex` then matches them to backups without Airflow. A restore of
``latest`` names its backup in its report, so it is listed once it has one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.restore.run import report_line
from airflow_rbak.ui.runs import BACKUP_DAG_ID, RESTORE_DAG_ID, VERIFY_DAG_ID, BackupDagRun

#: The XCom that names the backup a run chose itself: discover's summary, resolve_backup's return value, the
#: restore's report (which is also the restore's outcome).
_RESOLVED = {BACKUP_DAG_ID: ("discover", "summary"), VERIFY_DAG_ID: ("resolve_backup", "return_value"),
             RESTORE_DAG_ID: ("report", "return_value")}
_KIND = {BACKUP_DAG_ID: "backup", VERIFY_DAG_ID: "verify", RESTORE_DAG_ID: "restore"}
#: The task whose end is a run's verify: the backup's encode task verifies what it wrote.
_VERIFIES = {BACKUP_DAG_ID: "encode", VERIFY_DAG_ID: "verify"}


def _verify_tasks(dag_id: Any, task_id: Any) -> Any:
    return or_(*(and_(dag_id == dag, task_id == task) for dag, task in _VERIFIES.items()))


def _ms(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def _xcoms(session: Session) -> dict[tuple[str, str, str], Any]:
    wanted = [and_(XComModel.dag_id == dag_id, XComModel.task_id == task, XComModel.key == key)
              for dag_id, (task, key) in _RESOLVED.items()]
    wanted.append(and_(_verify_tasks(XComModel.dag_id, XComModel.task_id), XComModel.key == "return_value"))
    rows = session.scalars(select(XComModel).where(or_(*wanted), XComModel.map_index == -1))
    return {(x.dag_id, x.run_id, x.task_id): XComModel.deserialize_value(x) for x in rows}


def load_backup_runs(session: Session, limit: int = 5000) -> list[BackupDagRun]:
    """Every run of the backup and verify DAGs (newest ``limit``) with the backup it made or verified."""
    runs = session.scalars(select(DagRun).where(DagRun.dag_id.in_(_KIND)).order_by(DagRun.id.desc()).limit(limit)).all()
    verify_tis = {(t.dag_id, t.run_id): t for t in session.execute(
        select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.state, TaskInstance.end_date)
        .where(_verify_tasks(TaskInstance.dag_id, TaskInstance.task_id), TaskInstance.map_index == -1))}
    xcoms = _xcoms(session)
    default_url = rbak_settings().ui_storage_urls()[0]  # as configured: never raises, unlike default_storage_url()
    found = []
    for run in runs:
        conf = run.conf if isinstance(run.conf, dict) else {}
        backup_id = _backup_id(run.dag_id, run.run_id, conf, xcoms)
        if not backup_id:
            continue  # still queued without an id of its own: nothing to show yet
        ti = verify_tis.get((run.dag_id, run.run_id))
        verified = xcoms.get((run.dag_id, run.run_id, _VERIFIES.get(run.dag_id, "")))
        if isinstance(verified, dict) and isinstance(verified.get("verify"), dict):
            verified = verified["verify"]  # the encode task's summary holds its verify's
        verify_state = _state(ti.state) if ti is not None else None
        if isinstance(verified, dict) and verified.get("mode") == "none":
            verify_state = None  # verify: none checks nothing
        found.append(BackupDagRun(
            dag_id=run.dag_id, run_id=run.run_id, kind=_KIND[run.dag_id],
            storage_url=str(conf.get("storage_url") or default_url), backup_id=backup_id,
            state=_state(run.state) or "none", started_at=_ms(run.start_date), ended_at=_ms(run.end_date),
            verify_state=verify_state, verify_at=_ms(ti.end_date) if ti is not None else None,
            outcome=_outcome(run.dag_id, xcoms.get((run.dag_id, run.run_id, "report")))))
    return found


def _outcome(dag_id: str, report: Any) -> str | None:
    if dag_id != RESTORE_DAG_ID or not isinstance(report, dict):
        return None
    try:
        return report_line(report)
    except (KeyError, TypeError, ValueError):  # a report of another version: the run's state still shows
        return None


def _backup_id(dag_id: str, run_id: str, conf: dict[str, Any], xcoms: dict[tuple[str, str, str], Any]) -> str | None:
    given = conf.get("backup_id")
    if isinstance(given, str) and given and given != "latest":
        return given
    task, _ = _RESOLVED[dag_id]
    resolved = xcoms.get((dag_id, run_id, task))
    if isinstance(resolved, dict):
        resolved = resolved.get("backup_id")
    return resolved if isinstance(resolved, str) and resolved else None
