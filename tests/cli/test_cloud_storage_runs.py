"""``rbak backup``, ``rbak validate --deep`` and ``rbak restore`` on Azure Blob Storage and GCS, through their emulators.

The commands run as real processes that find the storage's credentials where a user's shell would hold them
(``AZURE_STORAGE_*``, or none for a GCS emulator); what they restore into another vhost is compared byte for byte.
"""

from __future__ import annotations

import json

import pytest

from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli import without_airflow as cli
from tests.reliability.secrets import secret_user  # noqa: F401 - a fixture

QUEUES = {"orders": ("classic", 40), "payments": ("quorum", 25)}


@pytest.mark.broker
@pytest.mark.parametrize("cloud", [pytest.param("azure", marks=pytest.mark.azure), pytest.param("gcs", marks=pytest.mark.gcs)])
def test_rbak_backs_up_validates_and_restores_byte_exact_on_a_cloud_location(broker, vhost, secret_user, tmp_path, request, cloud):  # noqa: F811
    # Given two seeded queues and an empty container or bucket on the cloud's emulator
    location = request.getfixturevalue(f"{cloud}_storage_url")
    secret_file = cli.seed_with_broker_file(broker, vhost, QUEUES, secret_user, tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    with cli.deleted_afterwards(broker, f"{vhost}-{cloud}") as target:
        # When the backup, a deep validation and a restore into another vhost run against that location
        backed_up, _ = cli.rbak_backup(location, f"{cloud}-1", vhost, secret_file, home)
        validated, _ = cli.rbak_without_airflow(["validate", "--path", location, "--backup-id", f"{cloud}-1", "--deep"], home)
        restored, _ = cli.rbak_restore(location, vhost, target, cli.broker_url(broker.connection, secret_user), tmp_path, home)

        # Then all three succeed, and the other vhost holds every message as published, byte for byte
        assert backed_up.returncode == 0, backed_up.stdout + backed_up.stderr
        assert validated.returncode == 0 and "valid" in validated.stdout, validated.stdout + validated.stderr
        assert restored.returncode == 0, restored.stdout + restored.stderr
        report = json.loads(restored.stdout)
        assert report["planned"] == report["published"] == sum(c for _, c in QUEUES.values())
        cli.assert_restored_as_published(broker, target, QUEUES)
