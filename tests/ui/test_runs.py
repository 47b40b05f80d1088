"""Matching DAG runs to backups, and the view's DAG ids, without Airflow."""

from __future__ import annotations

from pathlib import Path

from airflow_rbak.ui.runs import BACKUP_DAG_ID, RESTORE_DAG_ID, VERIFY_DAG_ID, BackupDagRun, RunIndex

URL = "file:///backups"


def _run(run_id: str, kind: str = "verify", state: str = "success", verify_state: str | None = "success",
         verify_at: int | None = 10, backup_id: str = "b1", url: str = URL) -> BackupDagRun:
    dag_id = VERIFY_DAG_ID if kind == "verify" else BACKUP_DAG_ID
    return BackupDagRun(dag_id, run_id, kind, url, backup_id, state, started_at=verify_at, verify_state=verify_state,
                     verify_at=verify_at)


def test_the_view_names_the_dags_of_the_dag_files():
    dags = Path(__file__).resolve().parents[2] / "dags"
    for dag_id in (BACKUP_DAG_ID, VERIFY_DAG_ID, RESTORE_DAG_ID):
        assert f'dag_id="{dag_id}"' in (dags / f"{dag_id}.py").read_text()


def test_the_last_verify_is_the_newest_finished_verify_task_of_any_run_of_that_backup():
    index = RunIndex([_run("made", kind="backup", verify_at=5), _run("v-old", verify_state="failed", verify_at=20),
                      _run("v-new", verify_at=30), _run("queued", state="queued", verify_state=None, verify_at=None),
                      _run("other", backup_id="b2", verify_at=99), _run("elsewhere", url="s3://b/p", verify_at=99)])
    last = index.last_verify(URL, "b1")
    assert (last.state, last.at, last.run_id) == ("success", 30, "v-new")
    assert [r.run_id for r in index.runs(URL, "b1", "backup")] == ["made"]


def test_a_verify_still_to_run_shows_as_its_run_state_and_a_backup_never_verified_as_none():
    index = RunIndex([_run("queued", state="queued", verify_state=None, verify_at=None),
                      _run("made", kind="backup", verify_state=None, verify_at=None, backup_id="b2")])
    assert index.last_verify(URL, "b1").state == "queued"
    assert index.last_verify(URL, "b2") is None
