"""Matching DAG runs to backups, and the view's DAG ids, without Airflow."""

from __future__ import annotations

import re
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


def test_a_verify_still_to_run_is_no_last_verify_but_the_pending_one():
    index = RunIndex([_run("queued", state="queued", verify_state=None, verify_at=None),
                      _run("made", kind="backup", verify_state=None, verify_at=None, backup_id="b2")])
    assert index.last_verify(URL, "b1") is None
    assert index.pending_verify(URL, "b1").run_id == "queued"
    assert index.last_verify(URL, "b2") is None and index.pending_verify(URL, "b2") is None


def test_the_next_verify_run_id_stays_the_same_until_that_run_exists_then_moves_on():
    # Given a backup verified once by the view (and once by someone else's run id)
    first = RunIndex([]).next_verify_run_id("loc1", URL, "b1")
    index = RunIndex([_run(first), _run("manual__2026-01-01")])

    # Then the next one is numbered after it, for that backup and location only
    assert first == "rbak_verify__loc1__b1__1"
    assert index.next_verify_run_id("loc1", URL, "b1") == "rbak_verify__loc1__b1__2"
    assert index.next_verify_run_id("loc2", URL, "b1") == "rbak_verify__loc2__b1__1"


def test_a_backup_id_from_storage_becomes_a_run_id_airflow_accepts():
    run_id = RunIndex([]).next_verify_run_id("loc1", URL, "b 1/é\n" + "x" * 300)
    assert run_id.startswith("rbak_verify__loc1__b_1___") and run_id.endswith("__1")
    assert re.fullmatch(r"[A-Za-z0-9_.~:+-]{1,250}", run_id)


def test_a_restore_run_is_listed_with_its_outcome():
    restore = BackupDagRun(RESTORE_DAG_ID, "r1", "restore", URL, "b1", "success", outcome="dry run: 3 planned")
    index = RunIndex([restore, _run("v1")])
    assert index.runs(URL, "b1", "restore") == [restore]
    assert index.last_verify(URL, "b1").run_id == "v1"
