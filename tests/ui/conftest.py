"""One real Airflow api-server for the backups view's tests, with backups in a folder and on loopback S3.

The api-server (``tests/airflow_stack.py``, started alone) runs on a free loopback port with its own
AIRFLOW_HOME and SQLite database, the SimpleAuthManager and two users besides the stack's own: ``admin`` (may
trigger DAGs) and ``viewer`` (read only). It lists five locations: a folder (the default,
``AIRFLOW__RBAK__STORAGE_URL``), a bucket on the moto server, an S3 endpoint nothing listens on, a URL with credentials in
it (refused), a folder with manifests planted beside a real backup, and a folder of backups whose messages the
message pages show (tests/ui/message_samples.py). Start-up is waited for by polling with a
generous deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from airflow_rbak.storage import open_storage
from tests.airflow_stack import AirflowStack, airflow_stack
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.repository.sample import build_sample_backup, build_sample_chain
from tests.ui.message_samples import build_message_backups

UNREACHABLE = "s3://rbak-nowhere/backups?region=us-east-1&endpoint=http://127.0.0.1:9&path_style=true"
#: A location configured with credentials in it (the secret holds '/' and '?'): the view shows it refused, never its URL.
WITH_SECRET = "s3://AKIAEXAMPLE:wJalr/XUtnFE?MIK7MDENG@rbak-ui-test/backups"
SECRET_PARTS = ("AKIAEXAMPLE", "wJalr", "XUtnFE", "MIK7MDENG")


@dataclass
class ApiServer:
    """A running api-server: its base URL, the locations it lists, and bearer tokens per user."""

    stack: AirflowStack
    file_url: str
    s3_url: str
    hostile_url: str
    messages_url: str

    @property
    def base(self) -> str:
        return self.stack.url

    @property
    def env(self) -> dict[str, str]:
        return self.stack.env

    def token(self, user: str) -> str:
        found = self.stack.token_of(user)
        assert found is not None, f"no token for {user}"
        return found

    def get(self, path: str, user: str = "admin", headers: dict[str, str] | None = None, **kwargs) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token(user)}", **(headers or {})}
        return requests.get(f"{self.base}{path}", headers=headers, timeout=60, **kwargs)


def _backups(file_url: str, s3_url: str) -> None:
    """The folder: a stream chain (sample-1 ← sample-2) and an incomplete backup; the bucket: one backup."""
    build_sample_chain(file_url)
    storage = open_storage(file_url)
    unfinished = build_sample_backup(storage, "sample-3-running")
    unfinished.completed_at = None
    storage.put("sample-3-running/manifest.json", unfinished.to_bytes())
    build_sample_backup(open_storage(s3_url), "s3-sample-1")


def _hostile(url: str) -> None:
    """A folder with one real backup beside planted manifests: one from the year 2100, one whose time no
    calendar holds, one that is not JSON."""
    storage = open_storage(url)
    real = build_sample_backup(storage, "real-1")
    for backup_id, created in (("planted-2100", 4_102_444_800_000), ("huge-time", 9_000_000_000_000_000_000)):
        body = {**real.to_json(), "backup_id": backup_id, "created_at": created, "completed_at": created,
                "queues": [], "definitions": None, "total_messages": 0, "total_bytes": 0, "total_segments": 0}
        storage.put(f"{backup_id}/manifest.json", json.dumps(body).encode())
    storage.put("garbage/manifest.json", b"\x00not json")


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory, s3_server: str, s3_client) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("ui-airflow-home")
    bucket = "rbak-ui-test"
    s3_client.create_bucket(Bucket=bucket)
    file_url = (home / "backups").as_uri()
    s3_url = f"s3://{bucket}/backups?region=us-east-1&endpoint={s3_server}&path_style=true"
    _backups(file_url, s3_url)
    hostile_url = (home / "hostile").as_uri()
    _hostile(hostile_url)
    messages_url = (home / "messages").as_uri()
    build_message_backups(messages_url)
    stack = airflow_stack(home, {"admin": "admin", "viewer": "viewer"}, AIRFLOW__RBAK__STORAGE_URL=file_url,
                          AIRFLOW__RBAK__UI_LOCATIONS=f"{s3_url}\n{UNREACHABLE}\n{WITH_SECRET}\n{hostile_url}\n{messages_url}")
    stack.start(only_api_server=True)
    try:
        yield ApiServer(stack, file_url, s3_url, hostile_url, messages_url)
    finally:
        stack.stop()
