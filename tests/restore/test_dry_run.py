"""Must show 5: a dry run publishes and imports nothing, and reports what the real run then publishes."""

from __future__ import annotations

import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, publish, read_queue

pytestmark = pytest.mark.broker

QUEUES = {"orders": ("classic", 120), "payments": ("quorum", 80), "events": ("stream", 50), "skipped": ("classic", 10)}


def test_a_dry_run_reports_the_counts_the_real_run_publishes(broker, vhost, target_vhost, tmp_path):
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (queue_type, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count, decimal=queue_type != "stream")
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "dry-1", vhost)
    common = {"storage_url": location, "backup_id": "latest", "vhosts": [vhost], "queues": ["orders", "pay*", "events"],
              "vhost_map": {vhost: target_vhost}, "restore_definitions": True, "checkpoint_state": str(tmp_path / "r.db"),
              "time_window_start": manifest.created_at}

    dry = RestoreRun(broker.connection, RestoreRequest(**common, dry_run=True)).run()

    assert dry.dry_run and dry.published == dry.planned == 250
    assert target_vhost not in [v["name"] for v in broker.api("GET", "vhosts").json()]  # nothing imported
    assert not list(open_storage(location).list("dry-1/definitions/rollback-"))  # no snapshot either
    assert dry.definitions["vhosts"] == {target_vhost: {"queues": 3, "exchanges": 0, "bindings": 0, "policies": 0}}
    real = RestoreRun(broker.connection, RestoreRequest(**common)).run()
    per_queue = {r["source_queue"]: r["published"] for r in real.queues}
    assert per_queue == {r["source_queue"]: r["published"] for r in dry.queues} == {"orders": 120, "payments": 80, "events": 50}
    for name in per_queue:
        queue_type, count = QUEUES[name]
        assert len(read_queue(broker.connection, target_vhost, name, queue_type, count)) == count
