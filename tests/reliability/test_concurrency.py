"""A backup and a restore at once on the same broker: each must be exactly what it would be alone."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.codec.layout import queue_prefix
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.reliability.expect import backed_up, published
from tests.reliability.faults import TriggerStorage
from tests.restore.conftest import target_vhost  # noqa: F401 - fixture
from tests.restore.helpers import declare, publish, read_queue

pytestmark = pytest.mark.broker
COUNT = 2_000


def test_a_backup_and_a_restore_into_another_vhost_at_once_are_both_exact(broker, vhost, target_vhost, tmp_path):  # noqa: F811
    # Given a queue and an earlier backup of it
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT)
    location = (tmp_path / "b").as_uri()
    selector = QueueSelector(vhosts=(vhost,))
    BackupRun(broker.connection, BackupSettings("before", location, selector=selector)).run()
    restore_storage = TriggerStorage(open_storage(location))
    restore = RestoreRun(broker.connection, RestoreRequest(
        location, backup_id="before", vhosts=[vhost], vhost_map={vhost: target_vhost}, restore_definitions=True,
        checkpoint_state=str(tmp_path / "restore.db"), max_publish_rate=1000), restore_storage)
    during = BackupRun(broker.connection, BackupSettings("during", location, selector=selector))
    times: dict[str, float] = {}
    outcome: dict[str, object] = {}

    def timed(name: str, step) -> None:
        times[f"{name} started"] = time.monotonic()
        try:
            outcome[name] = step()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            outcome[name] = exc
        times[f"{name} ended"] = time.monotonic()

    # When a new backup of the queue starts as the restore starts publishing into another vhost (2 s at 1,000/s)
    backup_thread = threading.Thread(target=timed, args=("backup", during.run))
    first_segment = queue_prefix("before", vhost, "orders") + "segment-0001"
    restore_storage.arm(lambda op, key: op == "get" and key.startswith(first_segment), backup_thread.start, nth=2)
    timed("restore", restore.run)
    backup_thread.join(timeout=300)

    # Then they overlapped, and each succeeded
    assert times["backup started"] < times["restore ended"] and times["restore started"] < times["backup ended"]
    assert not isinstance(outcome["restore"], BaseException), outcome["restore"]
    assert not isinstance(outcome["backup"], BaseException), outcome["backup"]
    # The new backup holds every message once and the source is unchanged
    expected = published(COUNT)
    assert backed_up(open_storage(location), "during", vhost, "orders") == expected
    assert outcome["restore"].published == COUNT
    assert read_queue(broker.connection, vhost, "orders", "classic", COUNT) == expected
    # And the restored queue holds every message once, in order, byte-exact
    assert read_queue(broker.connection, target_vhost, "orders", "classic", COUNT) == expected
