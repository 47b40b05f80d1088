"""The backups view reads a location with the keys of ``[rbak] storage_conn_id``, as the DAGs' tasks do.

Its own api-server (not the shared one of tests/ui/conftest.py): an environment without any AWS key, an ``aws``
connection holding the only keys moto accepts, and moto checking every request's signature and policy. Run in part
``cluster`` (scripts/test.sh), beside the freshness DAG's test of the same rule.
"""

from __future__ import annotations

import pytest
import requests

from airflow_rbak.storage import open_storage
from tests.airflow_stack import airflow_stack
from tests.aws_role import AWS_KEY_VARIABLES, iam_enforced, keys_only_connection
from tests.repository.sample import build_sample_backup


@pytest.mark.s3
def test_the_view_lists_and_opens_an_s3_backup_with_keys_only_its_storage_connection_holds(tmp_path, s3_server,
                                                                                           s3_storage_url):
    build_sample_backup(open_storage(s3_storage_url), "s3-view-1")
    stack = airflow_stack(tmp_path, AIRFLOW__RBAK__STORAGE_URL=s3_storage_url,
                          AIRFLOW_CONN_RBAK_S3=keys_only_connection(s3_server),
                          AIRFLOW__RBAK__STORAGE_CONN_ID="rbak_s3")
    for name in AWS_KEY_VARIABLES:
        stack.env.pop(name, None)
    stack.start(only_api_server=True)
    try:
        headers = {"Authorization": f"Bearer {stack.token}"}

        def get(path: str) -> requests.Response:
            return requests.get(f"{stack.url}/rbak/api{path}", headers=headers, timeout=60)

        with iam_enforced(s3_server):
            location = get("/locations").json()[0]
            listed = get(f"/locations/{location['id']}/backups").json()
            detail = get(f"/locations/{location['id']}/backups/s3-view-1")
    finally:
        stack.stop()

    assert location["url"] == s3_storage_url and location.get("error") is None, location
    assert listed["error"] is None and [b["backup_id"] for b in listed["backups"]] == ["s3-view-1"]
    assert listed["backups"][0]["status"] == "complete"
    assert detail.status_code == 200, detail.text
    page = detail.json()
    assert page["backup"]["backup_id"] == "s3-view-1" and page["queues"] and "hidden" not in page
