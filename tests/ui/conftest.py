"""One real Airflow api-server for the backups view's tests, with backups in a folder and on loopback S3.

The api-server runs on a free loopback port with its own AIRFLOW_HOME and SQLite database, the
SimpleAuthManager and two users: ``admin`` (may trigger DAGs) and ``viewer`` (read only). It lists three
locations: a folder (the default, ``RBAK_STORAGE_URL``), a bucket on the moto server, and an S3
endpoint nothing listens on. Start-up is waited for by polling with a generous deadline.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from airflow_rbak.storage import open_storage
from tests.backup.sample import build_sample_backup, build_sample_chain
from tests.dags.airflow_env import VENV_BIN, airflow_env, run

USERS = {"admin": "admin-pw-7Q2", "viewer": "viewer-pw-9Z4"}
UNREACHABLE = "s3://rbak-nowhere/backups?region=us-east-1&endpoint=http://127.0.0.1:9&path_style=true"
START_DEADLINE_S = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ApiServer:
    """A running api-server: its base URL, the locations it lists, and bearer tokens per user."""

    base: str
    file_url: str
    s3_url: str
    env: dict[str, str]

    def token(self, user: str) -> str:
        reply = requests.post(f"{self.base}/auth/token", json={"username": user, "password": USERS[user]}, timeout=30)
        reply.raise_for_status()
        return reply.json()["access_token"]

    def get(self, path: str, user: str = "admin", **kwargs) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token(user)}"}
        return requests.get(f"{self.base}{path}", headers=headers, timeout=60, **kwargs)


def _wait_until_up(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"api-server exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if requests.get(f"{base}/api/v2/monitor/health", timeout=5).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise AssertionError(f"api-server not up within {START_DEADLINE_S} s:\n{log.read_text()[-4000:]}")


def _backups(file_url: str, s3_url: str) -> None:
    """The folder: a stream chain (sample-1 ← sample-2) and an incomplete backup; the bucket: one backup."""
    build_sample_chain(file_url)
    storage = open_storage(file_url)
    unfinished = build_sample_backup(storage, "sample-3-running")
    unfinished.completed_at = None
    storage.put("sample-3-running/manifest.json", unfinished.to_bytes())
    build_sample_backup(open_storage(s3_url), "s3-sample-1")


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory, s3_server: str, s3_client) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("ui-airflow-home")
    bucket = "rbak-ui-test"
    s3_client.create_bucket(Bucket=bucket)
    file_url = (home / "backups").as_uri()
    s3_url = f"s3://{bucket}/backups?region=us-east-1&endpoint={s3_server}&path_style=true"
    _backups(file_url, s3_url)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    port = free_port()
    env = airflow_env(home, **{
        "RBAK_STORAGE_URL": file_url,
        "RBAK_UI_LOCATIONS": f"{s3_url}\n{UNREACHABLE}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "rbak-ui-tests-only",
    })
    for args in (["db", "migrate"], ["dags", "reserialize"]):
        done = run([str(VENV_BIN / "airflow"), *args], env, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = home / "api-server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(VENV_BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port),
                                    "--workers", "1"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_up(base, process, log)
        yield ApiServer(base, file_url, s3_url, env)
    finally:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=60)
