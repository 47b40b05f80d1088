"""An isolated Airflow for the DAG tests: its own AIRFLOW_HOME and SQLite DB, driven through subprocesses.

Airflow reads its configuration when first imported, so every Airflow
command runs in a child process with this environment; the test process
itself never imports Airflow with the developer's settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def rabbitmq_conn(host: str = "127.0.0.1", amqp_port: int | None = None, management_port: int | None = None,
                  stream_port: int | None = None, login: str = "guest", password: str = "guest") -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON form) for a rabbitmq connection; ports default to the private broker's
    (``RBAK_AMQP_PORT``, ``RBAK_MGMT_PORT``, ``RBAK_STREAM_PORT``, as scripts/rabbitmq.sh uses them)."""
    amqp_port = amqp_port or int(os.environ.get("RBAK_AMQP_PORT", 5672))
    management_port = management_port or int(os.environ.get("RBAK_MGMT_PORT", 15672))
    stream_port = stream_port or int(os.environ.get("RBAK_STREAM_PORT", 5552))
    return json.dumps({"conn_type": "rabbitmq", "host": host, "port": amqp_port, "login": login, "password": password,
                       "extra": {"management_port": management_port, "stream_port": stream_port, "timeout": 5}})


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of every Airflow child process (inherits the loopback S3 credentials the fixtures set)."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_RABBITMQ_DEFAULT": rabbitmq_conn(),
        "AIRFLOW__RBAK__BACKUP_SCHEDULE": "none",
        # a failing task fails the test at once (retries wait minutes; tests/dags/test_task_defaults.py covers them)
        "AIRFLOW__RBAK__TASK_RETRIES": "0",
        # the tests name fresh folders, buckets and connections, and `dags test` cannot wait for a person: the access
        # rules are opened here, and tests/dags/test_access.py closes them again to test them (docs/security.md)
        "AIRFLOW__RBAK__ALLOWED_STORAGE_URLS": "*",
        "AIRFLOW__RBAK__ALLOWED_CONN_IDS": "*",
        "AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL": "True",
        "RBAK_SPARK_PACKAGE_DIR": str(home / "spark-package"),
        "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    })
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run a command in the Airflow environment; output captured as text."""
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def dags_test(env: dict[str, str], conf: dict[str, Any], dag_id: str = "rbak_backup") -> subprocess.CompletedProcess[str]:
    """``airflow dags test <dag_id> -c '<conf>'``."""
    return run([str(VENV_BIN / "airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)], env)


_RUN_FACTS = r"""
import json, sys
from airflow.models.asset import AssetEvent
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

facts = {}
with create_session() as s:
    for dag_id in sys.argv[1:]:
        run = s.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        tis = s.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        xcoms = s.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id)
        events = s.query(AssetEvent).filter(AssetEvent.source_run_id == run.run_id)
        facts[dag_id] = {
            "state": str(run.state),
            "tasks": {f"{t.task_id}[{t.map_index}]": str(t.state) for t in tis},
            "xcom": {f"{x.task_id}[{x.map_index}].{x.key}": x.value for x in xcoms},
            "events": [{"uri": e.asset.uri, "name": e.asset.name, "extra": e.extra, "task": e.source_task_id} for e in events],
        }
print(json.dumps(facts, default=str))
"""


def run_facts(env: dict[str, str], dag_id: str = "rbak_backup") -> dict[str, Any]:
    """The latest run of ``dag_id``: its state, task states, XComs (by ``task[map_index].key``) and Asset events."""
    return runs_facts(env, dag_id)[dag_id]


def runs_facts(env: dict[str, str], *dag_ids: str) -> dict[str, dict[str, Any]]:
    """:func:`run_facts` of several DAGs, read by one process (one Airflow start-up)."""
    done = run([sys.executable, "-c", _RUN_FACTS, *dag_ids], env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def capture_results(xcom: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every queue's capture result in a run's XCom, by queue name (a capture task returns a group's list)."""
    found = [v for k, v in xcom.items() if k.startswith("capture[") and k.endswith(".return_value")]
    return {r["queue"]: r for item in found for r in (item if isinstance(item, list) else [item])}
