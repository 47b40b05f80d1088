"""The state key ``rbak`` uses is the one the DAGs' tasks use, so it opens what they sealed (and they what it sealed)."""

from __future__ import annotations

import os

from airflow_rbak.cli.configured import state_seal
from airflow_rbak.storage.sealed import KEY_FILE_NAME, default_seal


def test_without_an_airflow_cfg_rbak_takes_the_fernet_key_from_the_environment_as_the_tasks_would(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__RBAK__STATE_KEY", raising=False)
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "the deployment's fernet key")

    sealed = default_seal().seal("restore-progress", "b/state/restore/x/progress.json", {"published": 3})

    assert state_seal().open("restore-progress", "b/state/restore/x/progress.json", sealed) == {"published": 3}
    assert not (tmp_path / KEY_FILE_NAME).exists()


def test_with_nothing_configured_rbak_and_the_tasks_share_the_key_file_in_the_airflow_home(tmp_path, monkeypatch):
    for name in ("AIRFLOW__RBAK__STATE_KEY", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))

    sealed = state_seal().seal("capture-progress", "k.json", [1])

    assert default_seal().open("capture-progress", "k.json", sealed) == [1]
    assert oct(os.stat(tmp_path / KEY_FILE_NAME).st_mode & 0o777) == "0o600"
