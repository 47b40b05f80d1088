"""A backup written to an S3 Object Lock bucket survives its writers' own credential: real broker, real boto3 on moto.

The backup runs as ``rbak_backup`` runs it (the BackupRun steps); ``rbak forget``, ``rbak validate --deep`` and
``rbak location`` run as processes; the restore is the restore engine's ``RestoreRun``. The lock's expiry is not
waited for a day: governance mode lets an administrator (``BypassGovernanceRetention``) shorten a lock, so the test
sets each version's retain-until a few seconds ahead and polls ``rbak forget`` under a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from airflow_rbak.codec.layout import is_backup_content
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.run import RestoreRun
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.conftest import S3_TEST_REGION
from tests.restore.helpers import backup, declare, expected_view, publish, read_queue

QUEUES = {"orders": ("classic", 30), "payments": ("quorum", 20)}
REPO = Path(__file__).resolve().parents[2]


def rbak(*args: str) -> subprocess.CompletedProcess[str]:
    """``rbak`` from this checkout (``-m`` from its root: a shared environment's console script may be another's)."""
    return subprocess.run([sys.executable, "-m", "airflow_rbak.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@pytest.fixture
def locked_backup(broker, vhost, s3_server, s3_client):  # noqa: F811
    """Two complete backups of two seeded queues on an Object Lock bucket, written locked for a day (governance)."""
    bucket = f"rbak-lock-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    location = (f"s3://{bucket}/backups?region={S3_TEST_REGION}&endpoint={s3_server}&path_style=true"
                "&object_lock=governance&object_lock_days=1")
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (_, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count)
    for backup_id in ("locked-1", "locked-2"):
        backup(broker.connection, location, backup_id, vhost)
    return bucket, location


def content_versions(s3_client, bucket: str, backup_id: str) -> list[tuple[str, str]]:
    found = s3_client.list_object_versions(Bucket=bucket, Prefix=f"backups/{backup_id}/")
    return [(v["Key"], v["VersionId"]) for v in found.get("Versions", ()) if is_backup_content(v["Key"][len("backups/"):])]


@pytest.mark.broker
def test_a_locked_backup_cannot_be_deleted_by_its_writers_and_a_plain_delete_only_hides_it(locked_backup, s3_client):
    # Given a backup written locked, and the credential the workers hold
    bucket, location = locked_backup
    locked = content_versions(s3_client, bucket, "locked-1")
    assert any(k.endswith("manifest.json") for k, _ in locked) and any("segment-" in k for k, _ in locked)

    # When that credential deletes each version of the backup's content
    refused = []
    for key, version in locked:
        try:
            s3_client.delete_object(Bucket=bucket, Key=key, VersionId=version)
        except ClientError as error:
            refused.append(error.response["Error"]["Code"])

    # Then every delete is refused
    assert refused == ["AccessDenied"] * len(locked)

    # When it deletes them without a version id (what a worker's ransomware would try first)
    for key, _ in locked:
        s3_client.delete_object(Bucket=bucket, Key=key)

    # Then the backup is hidden from rbak (it reads current versions) but every locked version is still there, and
    # removing the delete markers (an administrator's step) brings it back whole: it validates deeply again
    done = rbak("--format", "json", "list", "--path", location)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [b["backup_id"] for b in listed if b["status"] == "complete"] == ["locked-2"]
    assert content_versions(s3_client, bucket, "locked-1") == locked
    markers = s3_client.list_object_versions(Bucket=bucket, Prefix="backups/locked-1/").get("DeleteMarkers", ())
    for marker in markers:
        s3_client.delete_object(Bucket=bucket, Key=marker["Key"], VersionId=marker["VersionId"])
    validated = rbak("validate", "--path", location, "--backup-id", "locked-1", "--deep")
    assert validated.returncode == 0, validated.stdout + validated.stderr


@pytest.mark.broker
def test_forget_skips_a_locked_backup_until_its_lock_passes_and_it_restores_meanwhile(locked_backup, s3_client, broker,  # noqa: F811
                                                                                    vhost, tmp_path):  # noqa: F811
    bucket, location = locked_backup

    # When the location is described and forget expires the older backup
    described = json.loads(rbak("--format", "json", "location", "--path", location).stdout)
    first = rbak("forget", "--path", location, "--keep-last", "1")
    as_json = json.loads(rbak("--format", "json", "forget", "--path", location, "--keep-last", "1").stdout)

    # Then the location says it is immutable, and forget keeps the locked backup, saying until when
    assert described["immutable"] is True and described["mode"] == "governance", described
    assert first.returncode == 0 and "locked locked-1 until 20" in first.stdout, first.stdout + first.stderr
    assert as_json["deleted"] == [] and list(as_json["locked_until"]) == ["locked-1"]
    assert datetime.fromisoformat(as_json["locked_until"]["locked-1"]) > datetime.now(timezone.utc) + timedelta(hours=23)

    # And meanwhile the locked backup validates deeply and restores, byte for byte, into other queues
    validated = rbak("validate", "--path", location, "--backup-id", "locked-1", "--deep")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    queue_map = {name: f"{name}-restored" for name in QUEUES}
    report = RestoreRun(broker.connection, RestoreRequest(location, backup_id="locked-1", queue_map=queue_map,
                                                          checkpoint_state=str(tmp_path / "restore.db"))).run()
    assert sum(row["published_total"] for row in report.queues) == sum(c for _, c in QUEUES.values())
    for name, (queue_type, count) in QUEUES.items():
        restored = read_queue(broker.connection, vhost, queue_map[name], queue_type, count)
        assert restored == [expected_view(i, queue_type) for i in range(count)], name

    # When an administrator shortens each lock to a few seconds ahead (governance mode allows it with the bypass
    # permission) and forget runs until the bucket lets the backup go
    soon = datetime.now(timezone.utc) + timedelta(seconds=3)
    for key, version in content_versions(s3_client, bucket, "locked-1"):
        s3_client.put_object_retention(Bucket=bucket, Key=key, VersionId=version, BypassGovernanceRetention=True,
                                       Retention={"Mode": "GOVERNANCE", "RetainUntilDate": soon})
    deadline, result = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        result = json.loads(rbak("--format", "json", "forget", "--path", location, "--keep-last", "1").stdout)
        if result["deleted"]:
            break
        time.sleep(0.5)

    # Then it is gone: every version of every object, no delete marker left; the newer backup is untouched
    assert result["deleted"] == ["locked-1"] and result["locked_until"] == {} and result["hidden"] == [], result
    left = s3_client.list_object_versions(Bucket=bucket, Prefix="backups/locked-1/")
    assert not left.get("Versions") and not left.get("DeleteMarkers")
    assert open_storage(location).exists("locked-2/manifest.json")
