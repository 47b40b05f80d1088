"""Shared pytest fixtures for the airflow_rbak test suite."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.versions import report_lines, session_series, skip_unless_series
from tests.wheel import build_wheel, install_wheel

#: The state key of the whole session (``[rbak] state_key`` as a deployment sets it for every worker and ``rbak``):
#: the engines' default seal, Airflow's tasks and the ``rbak`` command all read it, as they would in production.
TEST_STATE_KEY = "rbak-test-state-key-" + "5" * 44
os.environ.setdefault("AIRFLOW__RBAK__STATE_KEY", TEST_STATE_KEY)
#: The deployment's ledger of delivery-limit stops (``[rbak] state_dir``) for the whole session: one folder, as every
#: worker of a deployment shares one; never the user's own ``~/airflow``.
if not os.environ.get("AIRFLOW__RBAK__STATE_DIR"):
    os.environ["AIRFLOW__RBAK__STATE_DIR"] = tempfile.mkdtemp(prefix="rbak-test-state-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW__RBAK__STATE_DIR"], True)

# --- The RabbitMQ series of the session (tests/broker/versions.py) ---------------


def pytest_report_header(config: pytest.Config) -> str:
    return f"rabbitmq: series {session_series()} (RBAK_RABBITMQ_VERSION)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_unless_series(item)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each part's log says which broker it ran against, exactly (``rabbitmq: 4.3.6 (rabbit-x@localhost)``)."""
    for line in report_lines() or [f"rabbitmq: series {session_series()}, no node used"]:
        terminalreporter.write_line(line)

# --- The checkout's wheel, built once per session ----------------------------------


@pytest.fixture(scope="session")
def rbak_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel a user's ``pip`` builds from this checkout (:func:`tests.wheel.build_wheel`)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def rbak_wheel_site(rbak_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only the installed wheel: first on ``PYTHONPATH``, the package and its metadata come from it."""
    return install_wheel(rbak_wheel, tmp_path_factory.mktemp("wheel-site"))

# --- Loopback S3 (moto server, driven by real boto3 over HTTP) -------------------

S3_TEST_REGION = "us-east-1"
_S3_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": S3_TEST_REGION,
    # Never read the developer's real profile, and never wait on instance metadata.
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Start one moto S3 server on a free loopback port for the session; yield its endpoint URL.

    Dummy credentials are set in the environment for the session so that no
    test can reach a real AWS account by accident.
    """
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as env:
        env.delenv("AWS_PROFILE", raising=False)
        env.delenv("AWS_ENDPOINT_URL", raising=False)
        env.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        for name, value in _S3_TEST_ENV.items():
            env.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture(scope="session")
def s3_client(s3_server: str) -> Any:
    """A boto3 S3 client on the loopback server, for arranging and inspecting buckets directly."""
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=s3_server, region_name=S3_TEST_REGION)


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """Create a fresh, empty bucket on the loopback server and return its name."""
    name = f"rbak-test-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_storage_url(s3_server: str, s3_bucket: str) -> str:
    """Return an ``s3://`` URL for a fresh bucket (with a key prefix) on the loopback server."""
    return f"s3://{s3_bucket}/backups?region={S3_TEST_REGION}&endpoint={s3_server}&path_style=true"


# --- Backup locations: every storage-facing test runs on a folder and on loopback S3 ---


@pytest.fixture(params=["file", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A fresh, empty storage URL: a ``file://`` folder, then a loopback S3 bucket."""
    if request.param == "file":
        return (tmp_path / "backups").as_uri()
    return request.getfixturevalue("s3_storage_url")


# --- Loopback Azure Blob Storage (Azurite) and Google Cloud Storage (fake-gcs-server) ---

_AZURE_ENV = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start Azurite for the session; yield its blob endpoint. Its public account key is set as the credentials."""
    from tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite

    with pytest.MonkeyPatch.context() as env, azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        for name in _AZURE_ENV:
            env.delenv(name, raising=False)
        env.setenv("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT)
        env.setenv("AZURE_STORAGE_KEY", AZURITE_KEY)
        yield endpoint


@pytest.fixture
def azure_storage_url(azurite_server: str) -> str:
    """An ``azure://`` URL for a fresh container (with a blob prefix) on the loopback Azurite."""
    from azure.storage.blob import BlobServiceClient

    from tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY

    name = f"rbak-test-{uuid.uuid4().hex[:16]}"
    service = BlobServiceClient(azurite_server, credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY})
    service.create_container(name)
    return f"azure://{name}/backups?endpoint={azurite_server}"


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """Start fake-gcs-server for the session; yield its endpoint (plain http: reached without credentials)."""
    from tests.emulators import fake_gcs

    with fake_gcs() as endpoint:
        yield endpoint


@pytest.fixture
def gcs_storage_url(gcs_server: str) -> str:
    """A ``gcs://`` URL for a fresh bucket (with an object prefix) on the loopback fake-gcs-server."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"rbak-test-{uuid.uuid4().hex[:16]}"
    client = storage.Client(project="rbak-test", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": gcs_server})
    client.create_bucket(name)
    return f"gcs://{name}/backups?endpoint={gcs_server}"
