"""Must show 4: S3 credentials from an Airflow connection (``storage_conn_id``, type aws) reach every task and the
Spark job, and the secret key shows up in no log, XCom, report, stored object or process command line."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_rbak.backup.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.dags.airflow_env import VENV_BIN, airflow_env, run, run_facts
from tests.reliability.secrets import CommandLines, log_files, stored_objects
from tests.restore.helpers import declare, publish

COUNT = 500


@pytest.mark.broker
@pytest.mark.spark
def test_s3_credentials_from_a_connection_reach_every_task_and_leak_nowhere(
    broker, vhost, airflow_home, s3_server, s3_bucket
):
    # Given a queue, a bucket, and S3 credentials only in an Airflow connection: none in the tasks' environment
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT)
    secret = f"rbak-s3-secret-{uuid.uuid4().hex}"
    connection = json.dumps({"conn_type": "aws", "login": "rbak-key-id", "password": secret,
                             "extra": {"endpoint_url": s3_server, "region_name": "us-east-1"}})
    env = airflow_env(airflow_home, AIRFLOW_CONN_RBAK_S3=connection, RBAK_STORAGE_CONN_ID="rbak_s3")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    url = f"s3://{s3_bucket}/backups?region=us-east-1&path_style=true"  # no endpoint: the connection names it
    conf = {"storage_url": url, "backup_id": "conn-1", "vhosts": [vhost], "verify": "deep"}

    # When the backup DAG runs (a Spark encode and a Spark verify included), watching every process's command line
    with CommandLines() as lines:
        done = run([str(VENV_BIN / "airflow"), "dags", "test", "rbak_backup", "-c", json.dumps(conf)], env)

    # Then it succeeds on S3 with the connection's credentials (the tasks had no others)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    storage = open_storage(f"{url}&endpoint={s3_server}")
    assert ManifestStore(storage).load("conn-1").total_messages == COUNT
    facts = run_facts(env)
    assert facts["xcom"]["encode[-1].return_value"]["messages"] == COUNT

    # And the secret is in no output, task log, XCom, report or stored object, nor any process's command line
    assert any(b"dags\0test\0rbak_backup" in line for line in lines.seen)  # the watch saw the run itself
    places = {"dags test output": (done.stdout + done.stderr).encode(), "xcom and events": json.dumps(facts).encode(),
              **log_files(airflow_home), **stored_objects(storage),
              **{f"cmdline {i}": line for i, line in enumerate(lines.seen)}}
    assert [place for place, text in places.items() if secret.encode() in text] == []
    assert any(key.startswith("storage conn-1/reports/") for key in places)
