"""What ``rbak`` shares with the DAGs' tasks: the state key, so it opens what they sealed (and they what it sealed),
and the configured location's storage connection."""

from __future__ import annotations

import json
import os

import pytest

from airflow_rbak.cli.configured import state_seal
from airflow_rbak.cli.main import main
from airflow_rbak.codec import BackupManifest
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.credentials import current_credentials
from airflow_rbak.storage.sealed import KEY_FILE_NAME, default_seal
from tests.aws_role import AWS_KEY_VARIABLES, iam_enforced, keys_only_connection


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


@pytest.mark.s3
def test_rbak_opens_the_configured_location_with_the_configured_storage_connection_as_the_tasks_do(
        tmp_path, monkeypatch, s3_server, s3_storage_url, capsys):
    # Given a backup on S3, the location and an aws connection holding the only keys moto accepts as the [rbak]
    # options, and no AWS key in the environment
    ManifestStore(open_storage(s3_storage_url)).save(BackupManifest("conn-1", 1_000, "0", completed_at=2_000))
    monkeypatch.setenv("AIRFLOW_CONN_RBAK_S3", keys_only_connection(s3_server))
    for name in AWS_KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__RBAK__STORAGE_CONN_ID", "rbak_s3")
    monkeypatch.setenv("AIRFLOW__RBAK__STORAGE_URL", s3_storage_url)

    # When rbak lists the configured location, then the same location given as --path, while moto checks every request
    with iam_enforced(s3_server):
        configured = main(["--format", "json", "list"])
        listed = capsys.readouterr().out
        given = main(["list", "--path", s3_storage_url])

    # Then the configured location is read with the connection's keys; a --path uses the cloud's own chain (none
    # here), and the connection's credentials did not outlive the first command
    assert configured == 0 and [b["backup_id"] for b in json.loads(listed.splitlines()[-1])] == ["conn-1"]
    assert given == 3 and "Unable to locate credentials" in capsys.readouterr().err
    assert current_credentials() is None
