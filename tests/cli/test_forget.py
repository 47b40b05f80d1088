"""``rbak forget`` and ``rbak backup``'s retention: the rbak_backup DAG's retention on demand, chain-aware (a stream
chain a kept backup lists stays whole), with ``--dry-run`` deleting nothing."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli.test_cli import rbak
from tests.cli.test_restore_without_airflow import broker_url
from tests.reliability.secrets import create_user
from tests.restore.helpers import declare, publish


@pytest.mark.broker
def test_forget_keeps_the_stream_chain_a_kept_backup_lists_and_dry_run_deletes_nothing(broker, vhost, tmp_path,  # noqa: F811
                                                                                      monkeypatch):
    # Given a stream backed up twice (the second backup continues the first's chain) and once more with retention
    declare(broker.connection, vhost, {"events": "stream", "orders": "classic"})
    monkeypatch.setenv("RBAK_BROKER_URL", broker_url(broker.connection, create_user(broker, vhost)))
    location = (tmp_path / "backups").as_uri()
    storage = open_storage(location)
    conf = json.dumps({"vhosts": [vhost]})
    for backup_id, (first, count) in (("s1", (0, 30)), ("s2", (30, 20))):
        publish(broker.connection, vhost, "events", first, count, decimal=False)  # a stream refuses decimal headers
        publish(broker.connection, vhost, "orders", first, count)
        done = rbak("backup", "--path", location, "--backup-id", backup_id, "-c", conf)
        assert done.returncode == 0, done.stderr
    s2 = ManifestStore(storage).load("s2")
    assert s2.extensions["depends_on"] == ["s1"]
    listed = {seg.key for q in s2.queues for seg in q.segments}
    before = sorted(info.key for info in storage.list(""))

    # When forget runs with --dry-run, then for real, keeping the newest backup
    dry = rbak("--format", "json", "forget", "--path", location, "--keep-last", "1", "--dry-run")
    after_dry = sorted(info.key for info in storage.list(""))
    real = rbak("forget", "--path", location, "--keep-last", "1", "--format", "json")

    # Then the dry run said what the real one did and deleted nothing; s1 is gone but for the stream segments s2 lists,
    # and s2 validates deeply
    assert dry.returncode == 0 and real.returncode == 0, dry.stderr + real.stderr
    said, did = json.loads(dry.stdout), json.loads(real.stdout)
    assert after_dry == before and said["dry_run"] is True
    assert said["deleted"] == did["deleted"] == ["s1"] and said["objects_deleted"] == did["objects_deleted"] > 0
    assert did["segments_kept_for_chains"] == said["segments_kept_for_chains"] == {"s1": len([k for k in listed if k.startswith("s1/")])}
    assert not storage.exists("s1/manifest.json") and storage.exists("s2/manifest.json")
    assert all(storage.exists(key) for key in listed)
    validated = rbak("validate", "--path", location, "--backup-id", "latest", "--deep")
    assert validated.returncode == 0, validated.stdout + validated.stderr

    # When a third backup runs with verify and retention settings, they are applied after it succeeds
    publish(broker.connection, vhost, "events", 50, 5, decimal=False)
    third = rbak("--format", "json", "backup", "--path", location, "--backup-id", "s3", "-c",
                 json.dumps({"vhosts": [vhost], "verify": "deep", "retention": {"keep_last": 1}, "max_capture_tasks": 4}))
    assert third.returncode == 0, third.stderr
    summary = json.loads(third.stdout)
    assert summary["verify"] == {"mode": "deep", "valid": True, "defects": 0}
    assert summary["retention"]["deleted"] == ["s2"]
    assert "rbak: note: not used without Airflow: max_capture_tasks" in third.stderr
    assert not storage.exists("s2/manifest.json") and storage.exists("s3/manifest.json")
    assert rbak("validate", "--path", location, "--backup-id", "s3", "--deep").returncode == 0
