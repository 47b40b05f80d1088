"""``rbak doctor`` as a deployment runs it: a child process in an Airflow environment (tests/dags/airflow_env.py),
the session's broker named by ``--broker-file``, the DAGs' paused state read from the metadata database.

The checks one by one, each broken: tests/doctor/test_preflight.py.
"""

from __future__ import annotations

import json

import pytest

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.dags.airflow_env import VENV_BIN, airflow_env, run
from tests.dags.conftest import airflow_home  # noqa: F401 - fixture

pytestmark = pytest.mark.broker
STATE_KEY = "s" * 48


def doctor(env: dict[str, str], *args: str):
    return run([str(VENV_BIN / "rbak"), "doctor", *args], env, timeout=300)


def test_rbak_doctor_exits_by_the_worst_finding_names_paused_dags_and_never_shows_the_password(
        broker, vhost, airflow_home, tmp_path):  # noqa: F811 - the imported fixtures
    # Given a deployment: the broker in a file, [rbak] state_key in the environment, local Spark, a new location
    c = broker.connection
    broker_file = tmp_path / "broker"
    broker_file.write_text(f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port="
                           f"{c.management_port}&stream_port={c.stream_port}")
    env = airflow_env(airflow_home, AIRFLOW__RBAK__STATE_KEY=STATE_KEY)
    location = (tmp_path / "backups").as_uri()
    common = ("--broker-file", str(broker_file), "--path", location, "--vhost", vhost)
    assert run([str(VENV_BIN / "airflow"), "dags", "reserialize"], env).returncode == 0  # as the scheduler would

    # When rbak doctor runs while the DAGs are still paused, as new DAGs start
    done = doctor(env, *common, "--format", "json")

    # Then it exits 0 (only warnings), and names the paused DAGs with the command that unpauses them
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])  # the report is the last line
    found = {f["item"]: f for f in report["findings"]}
    assert report["status"] == "warning" and found["DAGs"]["status"] == "warning"
    assert "rbak_backup" in found["DAGs"]["detail"] and found["DAGs"]["fix"].startswith("airflow dags unpause rbak_backup")
    assert {f["status"] for i, f in found.items() if i != "DAGs"} == {"ok"}, report
    # and with --strict a warning fails it
    assert doctor(env, *common, "--strict").returncode == 1

    # When the scheduled DAGs are unpaused
    for dag in ("rbak_backup", "rbak_verify", "rbak_freshness"):
        assert run([str(VENV_BIN / "airflow"), "dags", "unpause", dag], env).returncode == 0
    done = doctor(env, *common)

    # Then everything is ok, one line each, and the exit code is 0
    assert done.returncode == 0 and "0 warning(s), 0 failure(s)" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "[ok] DAGs: rbak_backup, rbak_verify, rbak_freshness are unpaused" in done.stdout

    # When the broker's password is wrong
    broker_file.write_text(broker_file.read_text().replace(f":{c.password}@", ":Wr0ng-Pa55@"))
    done = doctor(env, *common)

    # Then it fails (exit 1) naming the broker and its fix, every other check still ran, and no password is shown
    assert done.returncode == 1 and "[failure] broker:" in done.stdout and "fix: " in done.stdout
    assert "[ok] storage:" in done.stdout and "[ok] state key:" in done.stdout
    assert "Wr0ng-Pa55" not in done.stdout + done.stderr and STATE_KEY not in done.stdout + done.stderr
