"""``rbak forget`` and ``rbak backup``'s retention: the rbak_backup DAG's retention on demand, chain-aware (a stream
chain a kept backup lists stays whole), with ``--dry-run`` deleting nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli.test_cli import rbak
from tests.cli.without_airflow import broker_url
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


def test_forget_abandoned_removes_a_gone_run_leaves_a_live_one_and_notes_flags_below_the_configured_rule(
        tmp_path, monkeypatch):
    # Given a location with complete backups, a run whose lock was last renewed two days ago, and a live run
    # (renewed now), in a deployment whose [rbak] retention keeps 3 and whose grace is the default 24 hours
    import time

    from airflow_rbak.codec import BackupManifest
    from airflow_rbak.repository.lock import BackupLock, LockInfo

    monkeypatch.setenv("AIRFLOW__RBAK__RETENTION", '{"keep_last": 3}')
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # rbak runs this tree's code
    location = (tmp_path / "backups").as_uri()
    storage, now = open_storage(location), int(time.time() * 1000)
    store = ManifestStore(storage)
    for n in range(1, 5):
        store.save(BackupManifest(f"c{n}", now - (10 - n) * 3_600_000, "0", completed_at=now - (10 - n) * 3_600_000 + 1))
    two_days_ago = now - 48 * 3_600_000
    store.save(BackupManifest("gone", two_days_ago, "0"))
    storage.put("gone/staging/v/q/chunk-000001", b"staged")
    storage.put("gone/lock.json", LockInfo("gone", "rbak_backup/x", "t", "h", 1, two_days_ago, two_days_ago).to_bytes())
    BackupLock(storage, "live", "rbak_backup/y").acquire()
    store.save(BackupManifest("live", two_days_ago, "0"))
    storage.put("live/staging/v/q/chunk-000001", b"staged")

    # When rbak lists the location, then forgets abandoned backups (a dry run first) with flags below the rule
    listed = {b["backup_id"]: b["status"] for b in json.loads(rbak("list", "--path", location, "--format", "json").stdout)}
    dry = rbak("forget", "--path", location, "--abandoned", "--dry-run")
    after_dry = sorted(i.key for i in storage.list(""))
    real = rbak("--format", "json", "forget", "--path", location, "--abandoned", "--keep-last", "2")

    # Then the gone run was listed abandoned and removed whole; the live one stays; the note named the rule
    assert listed == {"c1": "complete", "c2": "complete", "c3": "complete", "c4": "complete", "gone": "abandoned",
                      "live": "incomplete"}
    assert dry.returncode == 0 and "would remove 1 abandoned backup(s), 3 objects" in dry.stdout, dry.stdout + dry.stderr
    assert "gone/lock.json" in after_dry
    assert real.returncode == 0, real.stderr
    said = json.loads(real.stdout)
    assert said["abandoned"]["removed"] == ["gone"] and said["deleted"] == ["c1", "c2"]
    assert 'rbak: note: these flags keep less than [rbak] retention {"keep_last": 3} (keep_last 2 < 3)' in real.stderr
    assert not list(storage.list("gone/")) and storage.exists("live/lock.json")
    assert store.backup_ids() == ["c3", "c4", "live"]
