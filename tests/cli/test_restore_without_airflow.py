"""``rbak backup`` and ``rbak restore``: the DAGs' engines on the day Airflow is down.

Both run as real processes without an ``AIRFLOW_HOME``, ``-X importtime``
records every module they import, and the broker's password reaches them
only through a file or the environment, never argv or their output.
"""

from __future__ import annotations

import json

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli.without_airflow import (
    assert_restored_as_published,
    broker_url,
    deleted_afterwards,
    rbak_backup,
    rbak_restore,
    rbak_without_airflow,
    seed_with_broker_file,
)
from tests.reliability.secrets import leaks, secret_user  # noqa: F401 - a fixture

QUEUES = {"orders": ("classic", 50), "payments": ("quorum", 30)}


@pytest.mark.broker
def test_rbak_backs_up_and_restores_into_another_vhost_byte_exact_without_airflow(broker, vhost, secret_user, tmp_path):  # noqa: F811
    # Given two seeded queues and a user whose password only a file (backup) and the environment (restore) hold
    user = secret_user
    secret_file = seed_with_broker_file(broker, vhost, QUEUES, user, tmp_path)
    location, home = (tmp_path / "backups").as_uri(), tmp_path / "home"
    home.mkdir()
    with deleted_afterwards(broker, f"{vhost}-dr") as target:
        # When `rbak backup` and then `rbak restore` run, with no Airflow anywhere
        backed_up, backup_modules = rbak_backup(location, "dr-1", vhost, secret_file, home)
        restored, restore_modules = rbak_restore(location, vhost, target, broker_url(broker.connection, user), tmp_path,
                                                 home)

        # Then both succeed without importing Airflow
        assert backed_up.returncode == 0, backed_up.stdout + backed_up.stderr
        assert restored.returncode == 0, restored.stdout + restored.stderr
        assert "airflow_rbak.restore.run" in restore_modules and "airflow_rbak.backup.run" in backup_modules
        assert [m for m in backup_modules | restore_modules if m == "airflow" or m.startswith("airflow.")] == []
        assert ManifestStore(open_storage(location)).load("dr-1").completed_at is not None
        report = json.loads(restored.stdout)
        assert report["planned"] == report["published"] == sum(c for _, c in QUEUES.values())
        # and the other vhost holds every message as it was published, byte for byte, every property and typed
        # header, in order (but the user_id stripped)
        assert_restored_as_published(broker, target, QUEUES)
        # and the password is in neither command's output
        places = {"backup output": backed_up.stdout + backed_up.stderr, "restore output": restored.stdout + restored.stderr}
        assert leaks(user, places) == []


def test_rbak_restore_without_a_broker_says_where_to_put_one_and_repeats_no_secret(tmp_path):
    done, _ = rbak_without_airflow(["restore", "--path", (tmp_path / "b").as_uri(), "--backup-id", "latest"], tmp_path)

    assert done.returncode == 2  # a usage error
    assert "RBAK_BROKER_URL" in done.stderr and "--broker-file" in done.stderr
    assert "Traceback" not in done.stderr


def test_rbak_restore_refuses_a_setting_the_dag_does_not_have(tmp_path):
    done, _ = rbak_without_airflow(["restore", "--conf", '{"publish_mod": "queue"}'], tmp_path,
                                   RBAK_BROKER_URL="amqp://u:Hidden-Pw-1@127.0.0.1:1/")

    assert done.returncode == 2
    assert "unknown restore settings ['publish_mod']" in done.stderr
    assert "Hidden-Pw-1" not in done.stdout + done.stderr
