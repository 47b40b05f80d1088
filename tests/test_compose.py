"""docker-compose.yml: a valid file whose Airflow runs this repository's DAGs and provider against its own services.

``docker-compose config`` (Debian's ``docker-compose`` package) parses and
renders the file without a Docker engine; .ci/run installs it and sets
``RBAK_CI=1`` (and CI services set ``CI``), where a missing command fails
these tests instead of skipping them. The stack itself cannot run on the
CI machine (no engine): the second test runs the Airflow service's environment
through the repository's real DAGs and hooks instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from tests.broker.versions import SERIES
from tests.dags.airflow_env import REPO, airflow_env, run

SERVICES = {"rabbitmq", "minio", "minio-init", "spark-master", "spark-worker", "airflow"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as ``docker-compose config`` renders it (paths absolute, anchors merged)."""
    if shutil.which("docker-compose") is None:
        if os.environ.get("RBAK_CI") or os.environ.get("CI"):
            pytest.fail("docker-compose is missing on CI: .ci/run must install the docker-compose package")
        pytest.skip("docker-compose is not installed (apt-get install docker-compose); CI installs it and runs this")
    done = subprocess.run(["docker-compose", "-f", str(REPO / "docker-compose.yml"), "config"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_file_is_valid_and_airflow_uses_this_repositorys_dags_and_provider(compose):
    services = compose["services"]
    assert set(services) == SERVICES
    airflow = services["airflow"]
    assert airflow["command"] == ["airflow", "standalone"]
    # The provider: built from this checkout, whose Dockerfile installs it (Airflow and Spark share the image)
    assert airflow["build"]["context"] == str(REPO)
    dockerfile = (REPO / airflow["build"]["dockerfile"]).read_text()
    assert "COPY airflow_rbak ./airflow_rbak" in dockerfile and 'pip install ".[airflow,spark,metrics]"' in dockerfile
    for name in ("spark-master", "spark-worker"):
        assert services[name]["build"] == airflow["build"] and services[name]["image"] == airflow["image"]
    # The DAGs: this repository's dags/ folder, mounted where the DAGs folder points
    env = airflow["environment"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in airflow["volumes"]}
    assert mounts[env["AIRFLOW__CORE__DAGS_FOLDER"]] == str(REPO / "dags")
    # RabbitMQ of the newest series the suite runs, with the management and stream plugins; MinIO creates the bucket
    # the storage URL names
    rabbitmq = services["rabbitmq"]
    newest = max(SERIES, key=lambda series: tuple(int(part) for part in series.split(".")))
    assert re.fullmatch(rf"rabbitmq:{re.escape(newest)}\.\d+-management", rabbitmq["image"])
    plugins = {v.split(":")[1]: Path(v.split(":")[0]) for v in rabbitmq["volumes"]}["/etc/rabbitmq/enabled_plugins"]
    assert {"rabbitmq_management", "rabbitmq_stream"} <= set(plugins.read_text().strip(" .\n[]").split(","))
    bucket = urlsplit(env["AIRFLOW__RBAK__STORAGE_URL"]).netloc
    assert f"mc mb --ignore-existing stack/{bucket}" in services["minio-init"]["command"][0]
    assert airflow["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    # Every published port is on loopback only
    ports = [p for s in services.values() for p in s.get("ports", [])]
    assert ports and all(p.startswith("127.0.0.1:") for p in ports)


#: A version a tag pins: a release number with every part (4.2.5, 3.11.14), or MinIO's dated release names.
_PINNED = re.compile(r"(\d+\.\d+\.\d+(-[a-z][a-z0-9.-]*)?|RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ)")


def _tag(image: str) -> str:
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag, f"{image}: no tag (Docker would take 'latest')"
    return tag


def test_every_image_is_pinned_to_a_release(compose):
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE)
    images = {name: s["image"] for name, s in compose["services"].items() if "build" not in s}

    assert bases == ["python:3.11.14-slim-bookworm"]
    assert set(images) == {"rabbitmq", "minio", "minio-init"}
    assert {name: image for name, image in images.items() if not _PINNED.fullmatch(_tag(image))} == {}
    # the image the stack builds is named for the provider's release, not a floating "dev"
    version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)[1]
    assert {s["image"] for s in compose["services"].values() if "build" in s} == {f"airflow-rbak:{version}"}


def test_airflow_is_installed_at_one_release_with_its_constraints_file():
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", dockerfile, re.MULTILINE))
    python = re.search(r"^FROM python:(\d+\.\d+)\.", dockerfile, re.MULTILINE)
    constraints = args["AIRFLOW_CONSTRAINTS"].replace("${AIRFLOW_VERSION}", args["AIRFLOW_VERSION"]).replace(
        "${PYTHON_MINOR}", args["PYTHON_MINOR"])

    # Airflow's official constraints file for that Airflow release and the base image's Python
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["AIRFLOW_VERSION"]) and python and python[1] == args["PYTHON_MINOR"]
    assert constraints == ("https://raw.githubusercontent.com/apache/airflow/"
                           f"constraints-{args['AIRFLOW_VERSION']}/constraints-{args['PYTHON_MINOR']}.txt")
    # the Airflow install uses it, and every pip install holds Airflow at that release
    installs = [" ".join(cmd.split()) for cmd in re.findall(r"pip install ([^&]+)", dockerfile.replace("\\\n", " "))]
    assert installs and all('"apache-airflow==${AIRFLOW_VERSION}"' in cmd for cmd in installs)
    assert '--constraint "${AIRFLOW_CONSTRAINTS}"' in installs[0]
    # the same Airflow release the test suite runs
    from importlib.metadata import version

    assert version("apache-airflow") == args["AIRFLOW_VERSION"]


_CHECK = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow_rbak.hooks.rabbitmq import RabbitMQHook
from airflow_rbak.hooks.spark import stored_connection
from airflow_rbak.storage.url import parse_storage_url

bag = DagBag(dag_folder=sys.argv[1])
broker = RabbitMQHook("rabbitmq_default").get_conn()
spark = stored_connection("spark_default")
storage = parse_storage_url(bag.dags["rbak_backup"].params["storage_url"])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
    "defaults": {d: bag.dags[d].params["storage_url"] for d in ("rbak_backup", "rbak_verify", "rbak_restore")},
    "schedule": str(bag.dags["rbak_backup"].schedule),
    "broker": [broker.host, broker.amqp_port, broker.management_base_url, broker.stream_port, broker.username],
    "spark": [spark.host, spark.port, spark.extra_dejson.get("deploy-mode")],
    "storage": [storage.bucket, storage.endpoint, storage.path_style, storage.region],
}))
'''


def test_the_airflow_services_environment_points_the_unchanged_dags_at_the_stacks_services(compose, tmp_path):
    # Given the Airflow service's environment (connections, storage URL, schedule), with the DAGs it mounts
    env = {k: str(v) for k, v in compose["services"]["airflow"]["environment"].items()}
    env.pop("AIRFLOW__CORE__DAGS_FOLDER")  # the mount maps it to the repository's dags/
    env.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS")

    # When the repository's DAGs and hooks read it
    done = run([sys.executable, "-c", _CHECK, str(REPO / "dags")], airflow_env(tmp_path, **env), timeout=180)

    # Then every DAG loads, defaults to MinIO, and the preset connections reach the services by name
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["errors"] == {} and facts["dags"] == [
        "rbak_backup", "rbak_drill", "rbak_freshness", "rbak_journal", "rbak_restore", "rbak_verify"]
    assert set(facts["defaults"].values()) == {env["AIRFLOW__RBAK__STORAGE_URL"]}
    assert facts["schedule"] == "None"
    assert facts["broker"] == ["rabbitmq", 5672, "http://rabbitmq:15672", 5552, "rbak"]
    assert facts["spark"] == ["spark://spark-master", 7077, "client"]
    assert facts["storage"] == ["rbak-backups", "http://minio:9000", True, "us-east-1"]
    assert parse_qs(urlsplit(env["AIRFLOW__RBAK__STORAGE_URL"]).query)["endpoint"] == ["http://minio:9000"]
