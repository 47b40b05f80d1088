"""The DAG folder parses quickly, without errors and without touching the network; params reject bad values."""

from __future__ import annotations

import json
import sys

from tests.dags.airflow_env import REPO, airflow_env, run

_PARSE = r'''
import copy, json, socket, sys
import airflow  # configuration and logging first: only the parse itself is watched
from airflow.dag_processing.dagbag import DagBag

calls = []
def refuse(*args, **kwargs):
    calls.append(repr(args)[:200])
    raise OSError("network call during DAG parsing")
socket.socket.connect = refuse
socket.create_connection = refuse
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags["rbak_backup"]
errors = {}
for name, value in [("compression", "brotli"), ("segment_max_bytes", -1), ("compression_level", 99),
                    ("verify", "sometimes"), ("retention", {"keep_last": 0}), ("queue_types", ["lazy"]),
                    ("segment_work", "gpu"), ("compact_below_bytes", 0)]:
    params = copy.deepcopy(dag.params)
    try:
        params[name] = value  # setting a value validates it
        params.validate()
        errors[name] = None
    except Exception as exc:
        errors[name] = str(exc)
copy.deepcopy(dag.params).validate()
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
                  "calls": calls, "param_errors": errors,
                  "tasks": [t.task_id for t in dag.tasks], "schedule": str(dag.schedule),
                  "drill": [bag.dags["rbak_drill"].is_paused_upon_creation, str(bag.dags["rbak_drill"].schedule)]}))
'''


def _parse(tmp_path, **env: str) -> dict:
    done = run([sys.executable, "-c", _PARSE, str(REPO / "dags")], airflow_env(tmp_path, **env), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_dags_load_without_errors_or_network_calls_and_bad_params_are_rejected(tmp_path):
    facts = _parse(tmp_path, AIRFLOW__RBAK__BACKUP_SCHEDULE="@daily")

    assert facts["errors"] == {} and {"rbak_backup", "rbak_verify"} <= set(facts["dags"])
    assert facts["calls"] == []
    assert facts["tasks"] == ["discover", "export_definitions", "capture", "encode", "finalize", "copy"]
    assert facts["schedule"] == "@daily"
    assert facts["drill"] == [True, "@weekly"]  # rbak_drill: scheduled, but paused when Airflow first sees it
    rejected = facts["param_errors"]
    assert "'brotli' is not one of ['zstd', 'lz4', 'none']" in rejected["compression"]
    assert "Invalid input for param segment_max_bytes: -1 is less than the minimum of 1" in rejected["segment_max_bytes"]
    assert "99 is greater than the maximum of 22" in rejected["compression_level"]
    assert all(rejected.values()), rejected
