"""The DAGs' operating defaults: retries with backoff, time limits, the pool and the per-run cap of queue tasks."""

from __future__ import annotations

import json
import sys

from tests.dags.airflow_env import REPO, airflow_env, run

_TASKS = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
facts = {"errors": {k: str(v) for k, v in bag.import_errors.items()}}
for dag_id, task_id in [("rbak_backup", "capture"), ("rbak_backup", "finalize"), ("rbak_restore", "publish"),
                        ("rbak_restore", "plan"), ("rbak_restore", "approve"), ("rbak_verify", "verify")]:
    t = bag.dags[dag_id].get_task(task_id)
    facts[f"{dag_id}.{task_id}"] = {
        "retries": t.retries, "backoff": t.retry_exponential_backoff, "delay_s": t.retry_delay.total_seconds(),
        "max_delay_s": t.max_retry_delay.total_seconds(), "timeout_s": t.execution_timeout.total_seconds(),
        "pool": t.pool, "per_run": t.max_active_tis_per_dagrun}
    if task_id == "approve":
        facts[f"{dag_id}.{task_id}"]["response_timeout_s"] = t.response_timeout.total_seconds()
print(json.dumps(facts))
'''


def task_facts(tmp_path, **env: str) -> dict:
    done = run([sys.executable, "-c", _TASKS, str(REPO / "dags")], airflow_env(tmp_path, **env), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts.pop("errors") == {}
    return facts


def test_every_task_retries_with_exponential_backoff_and_queue_tasks_share_a_pool_and_a_per_run_cap(tmp_path):
    # Given no settings (the tests' own AIRFLOW__RBAK__TASK_RETRIES=0 removed)
    facts = task_facts(tmp_path, AIRFLOW__RBAK__TASK_RETRIES="")

    # Then every task retries 3 times after 1, 2, 4 minutes (at most 30) and stops after 6 hours
    for task, f in facts.items():
        assert (f["retries"], f["backoff"], f["delay_s"], f["max_delay_s"], f["timeout_s"]) == (3, 2.0, 60, 1800, 21600), task
    # and the tasks that load the broker run in the default pool, 4 at a time per run; the others are not capped
    assert {t: (f["pool"], f["per_run"]) for t, f in facts.items() if f["per_run"]} == {
        "rbak_backup.capture": ("default_pool", 4), "rbak_restore.publish": ("default_pool", 4)}
    # and the restore waits a day for a person to approve its plan
    assert facts["rbak_restore.approve"]["response_timeout_s"] == 24 * 3600


def test_the_environment_sets_retries_time_limit_pool_and_cap(tmp_path):
    facts = task_facts(tmp_path, AIRFLOW__RBAK__TASK_RETRIES="5", AIRFLOW__RBAK__TASK_TIMEOUT_MINUTES="30", AIRFLOW__RBAK__POOL="rbak",
                       AIRFLOW__RBAK__MAX_ACTIVE_QUEUE_TASKS="2", AIRFLOW__RBAK__APPROVAL_TIMEOUT_HOURS="2")

    assert {(f["retries"], f["timeout_s"]) for f in facts.values()} == {(5, 1800)}
    assert (facts["rbak_backup.capture"]["pool"], facts["rbak_backup.capture"]["per_run"]) == ("rbak", 2)
    assert (facts["rbak_restore.publish"]["pool"], facts["rbak_restore.publish"]["per_run"]) == ("rbak", 2)
    assert facts["rbak_restore.approve"]["response_timeout_s"] == 2 * 3600


_FORMS = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({d: [[n, bag.dags[d].params.get_param(n).schema.get("section"), bag.dags[d].params.get_param(n).description]
                      for n in bag.dags[d].params] for d in ("rbak_backup", "rbak_restore")}))
'''


def test_the_backup_and_restore_forms_put_every_param_in_a_section_with_a_description(tmp_path):
    done = run([sys.executable, "-c", _FORMS, str(REPO / "dags")], airflow_env(tmp_path), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    forms = json.loads(done.stdout.strip().splitlines()[-1])

    for dag_id, params in forms.items():
        assert [name for name, section, description in params if not section or not description] == [], dag_id
    assert {s for _, s, _ in forms["rbak_restore"]} >= {"Backup", "Target and selection", "Definitions", "Publishing"}
