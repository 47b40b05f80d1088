"""``rbak backup``, ``rbak validate --deep`` and ``rbak restore`` on Azure Blob Storage and GCS, through their emulators.

The commands run as real processes that find the storage's credentials where a user's shell would hold them
(``AZURE_STORAGE_*``, or none for a GCS emulator); what they restore into another vhost is compared byte for byte.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
import requests

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli.test_restore_without_airflow import broker_url, rbak_without_airflow, without_user_id
from tests.reliability.secrets import create_user
from tests.restore.helpers import declare, expected_view, publish, read_queue

QUEUES = {"orders": ("classic", 40), "payments": ("quorum", 25)}


@pytest.mark.broker
@pytest.mark.parametrize("cloud", [pytest.param("azure", marks=pytest.mark.azure), pytest.param("gcs", marks=pytest.mark.gcs)])
def test_rbak_backs_up_validates_and_restores_byte_exact_on_a_cloud_location(broker, vhost, tmp_path, request, cloud):  # noqa: F811
    # Given two seeded queues and an empty container or bucket on the cloud's emulator
    location = request.getfixturevalue(f"{cloud}_storage_url")
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    user = create_user(broker, vhost)
    secret_file = tmp_path / "broker-url"
    secret_file.write_text(broker_url(broker.connection, user))
    target, home = f"{vhost}-{cloud}", tmp_path / "home"
    home.mkdir()
    try:
        # When the backup, a deep validation and a restore into another vhost run against that location
        backed_up, _ = rbak_without_airflow(
            ["backup", "--path", location, "--backup-id", f"{cloud}-1", "--broker-file", str(secret_file), "--format",
             "json", "--conf", json.dumps({"vhosts": [vhost]})], home)
        validated, _ = rbak_without_airflow(["validate", "--path", location, "--backup-id", f"{cloud}-1", "--deep"], home)
        conf = {"vhosts": [vhost], "restore_definitions": True, "checkpoint_state": str(tmp_path / "restore.db"),
                "strip_user_id": True}
        restored, _ = rbak_without_airflow(
            ["restore", "--path", location, "--backup-id", "latest", "--vhost-map", f"{vhost}={target}",
             "--conf", json.dumps(conf), "--format", "json"], home, RBAK_BROKER_URL=broker_url(broker.connection, user))

        # Then all three succeed, and the other vhost holds every message as published, byte for byte
        assert backed_up.returncode == 0, backed_up.stdout + backed_up.stderr
        assert validated.returncode == 0 and "valid" in validated.stdout, validated.stdout + validated.stderr
        assert restored.returncode == 0, restored.stdout + restored.stderr
        report = json.loads(restored.stdout)
        assert report["planned"] == report["published"] == sum(c for _, c in QUEUES.values())
        broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        for name, (queue_type, count) in QUEUES.items():
            published = [without_user_id(expected_view(i, queue_type)) for i in range(count)]
            assert read_queue(broker.connection, target, name, queue_type, count) == published, name
    finally:
        try:
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")
        except requests.RequestException:
            pass
        broker.api("DELETE", f"users/{user.name}")
