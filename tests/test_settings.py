"""The ``[rbak]`` options: one table of defaults, values set as Airflow sets any option, read alike by the DAGs and
``rbak``; a bad value or a retired ``RBAK_*`` variable is refused with the option's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.provider import CONFIG_OPTIONS
from airflow_rbak.settings import RETIRED_VARIABLES, RbakSettings, environment_lookup
from airflow_rbak.storage import open_storage
from tests.cli.test_cli import RBAK
from tests.dags.airflow_env import REPO, airflow_env, run
from tests.repository.sample import build_sample_backup

_DEFAULTS = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "storage_url": {d: bag.dags[d].params.get_param("storage_url").value
                                  for d in ("rbak_backup", "rbak_verify", "rbak_restore") if d in bag.dags},
                  "freshness": bag.dags["rbak_freshness"].params.get_param("storage_urls").value
                               if "rbak_freshness" in bag.dags else None}))
'''


def settings(**env: str) -> RbakSettings:
    return RbakSettings(environment_lookup(env), environ=env)


def test_unset_options_take_the_defaults_the_provider_declares():
    unset = settings()

    assert unset.schedule("backup_schedule") == CONFIG_OPTIONS["backup_schedule"]["default"] == "@daily"
    assert unset.schedule("verify_schedule") is None
    assert unset.queue_task_limits() == {"pool": "default_pool", "max_active_tis_per_dagrun": 4}
    assert (unset.task_defaults()["retries"], unset.approval_timeout().total_seconds()) == (3, 24 * 3600)
    assert (unset.progress_interval_s(), unset.storage_conn_id(), unset.failure_notifiers()) == (10.0, None, [])


def test_values_come_from_AIRFLOW__RBAK__variables_without_airflow():
    given = settings(AIRFLOW__RBAK__STORAGE_URL="s3://backups/rabbit", AIRFLOW__RBAK__BACKUP_SCHEDULE="none",
                     AIRFLOW__RBAK__TASK_RETRIES="7", AIRFLOW__RBAK__PROGRESS_INTERVAL="2.5")

    assert (given.storage_url(), given.schedule("backup_schedule")) == ("s3://backups/rabbit", None)
    assert (given.task_defaults()["retries"], given.progress_interval_s()) == (7, 2.5)


def test_the_ledger_folder_is_state_dir_else_rbak_state_in_the_airflow_home_and_never_a_relative_path(monkeypatch, tmp_path):
    from airflow_rbak.capture.limit_stops import default_state_dir

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert settings().state_dir() == tmp_path / "rbak-state" == default_state_dir({"AIRFLOW_HOME": str(tmp_path)})
    assert settings(AIRFLOW__RBAK__STATE_DIR="/mnt/shared/rbak-state").state_dir() == Path("/mnt/shared/rbak-state")
    assert default_state_dir({"AIRFLOW__RBAK__STATE_DIR": "/mnt/shared/rbak-state"}) == Path("/mnt/shared/rbak-state")
    with pytest.raises(ConfigurationError, match=r"\[rbak\] state_dir must be an absolute path, got 'rbak-state'"):
        settings(AIRFLOW__RBAK__STATE_DIR="rbak-state").state_dir()


@pytest.mark.parametrize(("option", "value", "message"), [
    ("task_retries", "three", "[rbak] task_retries must be a whole number, got 'three'"),
    ("max_active_queue_tasks", "0", "[rbak] max_active_queue_tasks must be >= 1, got 0"),
    ("progress_interval", "-1", "[rbak] progress_interval must be > 0, got '-1'"),
    ("failure_notifier", "no_colon", "[rbak] failure_notifier must be module:name"),
])
def test_a_value_the_option_cannot_take_is_refused_naming_the_option(option, value, message):
    configured = settings(**{f"AIRFLOW__RBAK__{option.upper()}": value})
    readers = {"task_retries": configured.task_defaults, "max_active_queue_tasks": configured.queue_task_limits,
               "progress_interval": configured.progress_interval_s, "failure_notifier": configured.failure_notifiers}

    with pytest.raises(ConfigurationError) as refused:
        readers[option]()
    assert str(refused.value).startswith(message)


def test_a_retired_RBAK_variable_is_refused_naming_the_option_that_replaced_it():
    with pytest.raises(ConfigurationError) as refused:
        settings(RBAK_STORAGE_URL="s3://old/place", RBAK_POOL="rbak")

    assert str(refused.value) == (
        "no longer read: $RBAK_POOL (set [rbak] pool in airflow.cfg, or $AIRFLOW__RBAK__POOL); "
        "$RBAK_STORAGE_URL (set [rbak] storage_url in airflow.cfg, or $AIRFLOW__RBAK__STORAGE_URL)")
    # every variable names the option that replaced it (options added since, such as the access rules, had none)
    assert set(RETIRED_VARIABLES.values()) <= set(CONFIG_OPTIONS)


def _rbak(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RBAK, *args], env=env, capture_output=True, text=True, timeout=180)


def test_a_location_set_through_AIRFLOW__RBAK__STORAGE_URL_is_every_dags_default_and_rbaks_location(tmp_path):
    # Given a backup in a location set as Airflow takes any option
    location = (tmp_path / "elsewhere").as_uri()
    build_sample_backup(open_storage(location))
    env = airflow_env(tmp_path / "airflow", AIRFLOW__RBAK__STORAGE_URL=location)

    # When Airflow parses the DAGs and rbak runs without --path
    parsed = run([sys.executable, "-c", _DEFAULTS, str(REPO / "dags")], env, timeout=180)
    listed = _rbak(env, "list", "--format", "json")

    # Then every DAG's default location is it, and rbak lists the backup there
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    facts = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert facts["errors"] == {}
    assert facts["storage_url"] == {"rbak_backup": location, "rbak_verify": location, "rbak_restore": location}
    assert facts["freshness"] == [location]
    assert listed.returncode == 0, listed.stderr
    assert [b["backup_id"] for b in json.loads(listed.stdout)] == ["sample-1"]


def test_rbak_reads_the_option_from_airflow_cfg_where_airflow_is_installed(tmp_path):
    # Given the location only in airflow.cfg's [rbak] section
    location = (tmp_path / "from-cfg").as_uri()
    build_sample_backup(open_storage(location))
    home = tmp_path / "airflow"
    home.mkdir()
    (home / "airflow.cfg").write_text(f"[rbak]\nstorage_url = {location}\n")
    env = {k: v for k, v in airflow_env(home).items() if not k.startswith("AIRFLOW__RBAK__")}

    listed = _rbak(env, "list", "--format", "json")

    assert listed.returncode == 0, listed.stderr
    assert [b["backup_id"] for b in json.loads(listed.stdout)] == ["sample-1"]


def test_a_retired_variable_stops_the_dags_from_loading_and_rbak_from_running_with_the_replacement_named(tmp_path):
    env = airflow_env(tmp_path / "airflow", RBAK_STORAGE_URL=(tmp_path / "old").as_uri())

    parsed = run([sys.executable, "-c", _DEFAULTS, str(REPO / "dags")], env, timeout=180)
    listed = _rbak(env, "list")

    errors = json.loads(parsed.stdout.strip().splitlines()[-1])["errors"]
    assert len(errors) == 6 and all("$RBAK_STORAGE_URL (set [rbak] storage_url" in e for e in errors.values())
    assert listed.returncode == 2  # a usage error
    assert listed.stderr.startswith("rbak: error: no longer read: $RBAK_STORAGE_URL (set [rbak] storage_url")


def test_rbak_without_airflow_reads_AIRFLOW__RBAK__variables(tmp_path):
    # Given a Python that cannot import Airflow (a path entry shadows it with a package that fails to import)
    location = (tmp_path / "plain").as_uri()
    build_sample_backup(open_storage(location))
    blocker = tmp_path / "blocker" / "airflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('Airflow is not installed here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"PYTHONPATH": os.pathsep.join([str(blocker.parent), str(REPO)]), "HOME": str(tmp_path),
                "AIRFLOW__RBAK__STORAGE_URL": location})

    listed = subprocess.run([sys.executable, "-m", "airflow_rbak.cli.main", "list", "--format", "json"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=Path(tmp_path))

    assert listed.returncode == 0, listed.stderr
    assert [b["backup_id"] for b in json.loads(listed.stdout)] == ["sample-1"]
