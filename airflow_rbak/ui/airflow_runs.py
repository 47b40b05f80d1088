"""Reads the ``rbak_backup``, ``rbak_verify`` and ``rbak_restore`` runs from Airflow's metadata database (Airflow side).

Three small queries (runs, the tasks that verify, the XComs that name a resolved backup id or hold a
restore's report) read every run of the three DAGs at once, newest first up to ``limit``;
:class:`~airflow_rbak.ui.runs.RunIndex` then matches them to backups without Airflow. A restore of
``latest`` names its backup in its report, so it is listed once it has one. A fourth names the task that failed
each failed run; why it failed is read from that task's note or log (:func:`with_reasons`) for one backup's page
only, since a log may sit on remote storage.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Iterator, Mapping
from typing import Any

from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.display import package_logger
from airflow_rbak.restore.run import report_line
from airflow_rbak.ui.damage import failure_reason, restore_outcome
from airflow_rbak.ui.runs import BACKUP_DAG_ID, RESTORE_DAG_ID, VERIFY_DAG_ID, BackupDagRun

#: The XCom that names the backup a run chose itself: discover's summary, resolve_backup's return value, the
#: restore's report (which is also the restore's outcome).
_RESOLVED = {BACKUP_DAG_ID: ("discover", "summary"), VERIFY_DAG_ID: ("resolve_backup", "return_value"),
             RESTORE_DAG_ID: ("report", "return_value")}
_KIND = {BACKUP_DAG_ID: "backup", VERIFY_DAG_ID: "verify", RESTORE_DAG_ID: "restore"}
#: The task whose end is a run's verify: the backup's encode task verifies what it wrote.
_VERIFIES = {BACKUP_DAG_ID: "encode", VERIFY_DAG_ID: "verify"}
_FAILED = ("failed",)

log = package_logger(__name__)


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
    failed = _failed_tasks(session)
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
            outcome=_outcome(run.dag_id, xcoms.get((run.dag_id, run.run_id, "report")))
            or restore_outcome(_state(run.state) or "", failed.get((run.dag_id, run.run_id)), None)
            if run.dag_id == RESTORE_DAG_ID else None,
            failed_task=failed.get((run.dag_id, run.run_id))))
    return found


def _failed_tasks(session: Session) -> dict[tuple[str, str], str]:
    """The first task (by when it ended) that failed in each failed restore or verify run."""
    rows = session.execute(
        select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id)
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(TaskInstance.dag_id.in_((RESTORE_DAG_ID, VERIFY_DAG_ID)), TaskInstance.state.in_(_FAILED),
               DagRun.state.in_(_FAILED))
        .order_by(TaskInstance.end_date.desc()))
    return {(dag_id, run_id): task_id for dag_id, run_id, task_id in rows}  # the earliest, written last


def _log_events(ti: Any) -> Iterator[Mapping[str, Any]]:
    """The task's latest try's log as events (Airflow's own reader: local files or remote logging alike)."""
    from airflow.utils.log.log_reader import TaskLogReader

    if not ti.try_number:
        return
    metadata: Any = {}  # from the start; Airflow's reader fills in where it stopped
    chunks, _ = TaskLogReader().read_log_chunks(ti, ti.try_number, metadata)
    for message in chunks:
        yield message.model_dump() if hasattr(message, "model_dump") else dict(message)


@functools.lru_cache(maxsize=1024)
def _reason(dag_id: str, run_id: str, task_id: str, try_number: int) -> tuple[str | None, bool]:
    """A finished try's reason (its log no longer changes, so it is read once per api-server)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id,
            TaskInstance.map_index == -1)).first()
        if ti is None:
            ti = session.scalars(select(TaskInstance).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)).first()
        if ti is None:
            return None, False
        if ti.note:
            return failure_reason([{"level": "error", "event": ti.note}])
        try:
            return failure_reason(_log_events(ti))
        except Exception as exc:  # noqa: BLE001 - a log that cannot be read leaves the reason in Airflow's UI
            log.warning("rbak UI: cannot read the log of %s %s %s: %s", dag_id, run_id, task_id, exc)
            return None, False


def with_reasons(session: Session, runs: list[BackupDagRun]) -> list[BackupDagRun]:
    """The runs, each failed restore or verify run with its failed task's reason (and whether it names damage)."""
    tries = {(t.dag_id, t.run_id, t.task_id): t.try_number for t in session.execute(
        select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.try_number).where(
            or_(*(and_(TaskInstance.dag_id == r.dag_id, TaskInstance.run_id == r.run_id,
                       TaskInstance.task_id == r.failed_task) for r in runs if r.failed_task))))} \
        if any(r.failed_task for r in runs) else {}
    found = []
    for run in runs:
        if not run.failed_task:
            found.append(run)
            continue
        reason, damaged = _reason(run.dag_id, run.run_id, run.failed_task,
                                  int(tries.get((run.dag_id, run.run_id, run.failed_task)) or 0))
        outcome = restore_outcome(run.state, run.failed_task, reason) if run.kind == "restore" else run.outcome
        found.append(dataclasses.replace(run, reason=reason, damaged=damaged, outcome=outcome))
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
