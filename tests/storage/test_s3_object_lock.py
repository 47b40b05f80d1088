"""S3 Object Lock (``?object_lock=governance|compliance&object_lock_days=N``), with real boto3 on loopback moto.

What moto 5.2 enforces, measured here: a versioned DeleteObject (and DeleteObjects) of a version locked in either
mode is refused with AccessDenied; a DeleteObject without a version id adds a delete marker; a version whose
retain-until date has passed deletes. It does not check IAM (a governance bypass needs no permission there), and a
multipart upload does not take the lock asked for, which :meth:`S3ObjectLock.check_written` refuses.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.storage import S3Storage, open_storage, parse_storage_url
from airflow_rbak.storage.base import ObjectLockedError
from tests.conftest import S3_TEST_REGION
from tests.repository.sample import build_sample_backup

CONTENT = ("b1/manifest.json", "b1/queues/_default/orders/segment-0001.zst", "b1/definitions/definitions.json.zst")
STATE = ("b1/lock.json", "b1/state/queues/_default/orders/progress.json", "b1/staging/_default/orders/chunk-00000001.zst",
         "b1/reports/verify.json", "_chains.lock.json", "_state/delivery-limit-stops/_default/q.json")


@pytest.fixture
def lock_bucket(s3_client):
    name = f"rbak-lock-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def url(s3_server: str, bucket: str, lock: str = "&object_lock=governance&object_lock_days=1") -> str:
    return f"s3://{bucket}/backups?region={S3_TEST_REGION}&endpoint={s3_server}&path_style=true{lock}"


def versions(s3_client, bucket: str, key: str) -> tuple[list[str], list[str]]:
    found = s3_client.list_object_versions(Bucket=bucket, Prefix=f"backups/{key}")
    return ([v["VersionId"] for v in found.get("Versions", ()) if v["Key"] == f"backups/{key}"],
            [m["VersionId"] for m in found.get("DeleteMarkers", ()) if m["Key"] == f"backups/{key}"])


@pytest.mark.parametrize("query, message", [
    ("object_lock=governance", "go together"), ("object_lock_days=3", "go together"),
    ("object_lock=strict&object_lock_days=3", "governance or compliance"),
    ("object_lock=compliance&object_lock_days=0", "between 1 and 36500"),
    ("object_lock=compliance&object_lock_days=3d", "whole number"),
])
def test_an_object_lock_url_needs_a_mode_and_a_period(query, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_storage_url(f"s3://bucket/p?{query}")


def test_the_object_lock_settings_survive_the_url_round_trip():
    config = parse_storage_url("s3://bucket/p?object_lock=compliance&object_lock_days=35")
    assert (config.object_lock, config.object_lock_days) == ("compliance", 35)
    assert parse_storage_url(config.url) == config


def test_content_is_written_locked_and_state_stays_deletable(s3_server, s3_client, lock_bucket):
    # Given a location that asks for governance locks of one day on an Object Lock bucket
    storage = open_storage(url(s3_server, lock_bucket))
    before = datetime.now(timezone.utc)

    # When a backup's content and the state kept beside it are written
    for key in CONTENT + STATE:
        storage.put(key, b"x")

    # Then each content object is locked for a day and no state object is
    for key in CONTENT:
        head = s3_client.head_object(Bucket=lock_bucket, Key=f"backups/{key}")
        assert head["ObjectLockMode"] == "GOVERNANCE", key
        assert before + timedelta(days=1) - timedelta(seconds=5) <= head["ObjectLockRetainUntilDate"], key
    for key in STATE:
        assert "ObjectLockMode" not in s3_client.head_object(Bucket=lock_bucket, Key=f"backups/{key}"), key
    # and the workers' own credential cannot delete a content version, while a state version goes
    for key in CONTENT:
        (version,), _ = versions(s3_client, lock_bucket, key)
        with pytest.raises(ClientError, match="AccessDenied"):
            s3_client.delete_object(Bucket=lock_bucket, Key=f"backups/{key}", VersionId=version)
    for key in STATE:
        assert storage.purge(key) is True
        assert versions(s3_client, lock_bucket, key) == ([], [])


def test_a_plain_delete_only_hides_a_locked_object_behind_a_marker(s3_server, s3_client, lock_bucket):
    storage = open_storage(url(s3_server, lock_bucket))
    storage.put("b1/manifest.json", b"the manifest")
    (version,), _ = versions(s3_client, lock_bucket, "b1/manifest.json")

    storage.delete("b1/manifest.json")

    assert not storage.exists("b1/manifest.json") and list(storage.list("b1/")) == []
    kept, markers = versions(s3_client, lock_bucket, "b1/manifest.json")
    assert kept == [version] and len(markers) == 1
    got = s3_client.get_object(Bucket=lock_bucket, Key="backups/b1/manifest.json", VersionId=version)
    assert got["Body"].read() == b"the manifest"
    # an administrator brings it back by deleting the marker (allowed on a locked object)
    s3_client.delete_object(Bucket=lock_bucket, Key="backups/b1/manifest.json", VersionId=markers[0])
    assert storage.get("b1/manifest.json") == b"the manifest"


def test_purge_refuses_a_locked_object_and_hides_nothing(s3_server, s3_client, lock_bucket):
    storage = open_storage(url(s3_server, lock_bucket))
    storage.put("b1/manifest.json", b"m")

    locks = storage.locked_until("b1/", datetime.now(timezone.utc))
    with pytest.raises(ObjectLockedError) as refused:
        storage.purge("b1/manifest.json")

    assert list(locks) == ["b1/manifest.json"] and refused.value.until == locks["b1/manifest.json"]
    assert storage.get("b1/manifest.json") == b"m"
    assert storage.locked_until("b1/", datetime.now(timezone.utc) + timedelta(days=2)) == {}


def test_a_url_asking_for_a_lock_on_a_bucket_without_object_lock_is_refused_before_any_write(s3_server, s3_client,
                                                                                             s3_bucket):
    storage = open_storage(url(s3_server, s3_bucket))

    with pytest.raises(ConfigurationError, match="has no Object Lock"):
        storage.put("b1/lock.json", b"{}")

    assert s3_client.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0


def test_a_multipart_upload_the_server_did_not_lock_is_refused(s3_server, lock_bucket, tmp_path):
    # moto does not apply a lock asked for on CreateMultipartUpload; AWS does. Either way nothing is claimed unchecked.
    config = parse_storage_url(url(s3_server, lock_bucket))
    storage = S3Storage(config, multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    big = tmp_path / "big"
    big.write_bytes(b"x" * (6 * 1024 * 1024))

    with pytest.raises(Exception, match="without the Object Lock asked for"):
        storage.put_file("b1/queues/_default/orders/segment-0001.zst", big)


@pytest.mark.parametrize("lock, default, immutable, says", [
    ("", None, False, "no Object Lock"),
    ("&object_lock=compliance&object_lock_days=35", None, True, "compliance mode for 35 days"),
    ("", "locked", False, "no default retention"),
    ("", "default", True, "default retention (governance, 2 days)"),
])
def test_the_location_says_whether_it_is_immutable(s3_server, s3_client, lock, default, immutable, says):
    bucket = f"rbak-lock-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=bucket, **({"ObjectLockEnabledForBucket": True} if default or lock else {}))
    if default == "default":
        s3_client.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 2}}})

    found = open_storage(url(s3_server, bucket, lock)).immutability()

    assert found.immutable is immutable and says in found.summary, found.summary
    assert dict(found.details)["versioning"] == ("Enabled" if default or lock else "Disabled")


def test_retention_skips_a_locked_backup_and_the_storage_refusal_wins_over_our_clock(s3_server, s3_client, lock_bucket):
    # Given two complete backups written locked for a day; keep_last=1 expires the older
    storage = open_storage(url(s3_server, lock_bucket))
    build_sample_backup(storage, "sample-1")
    build_sample_backup(storage, "sample-2")
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)

    # When retention runs now, and again with a clock two days ahead of the server's
    now = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=now_ms, protect=None)
    ahead = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=now_ms + 2 * 86_400_000, protect=None)

    # Then neither removes it: the first skips it by its lock, the second is refused by the bucket; nothing is hidden
    for result in (now, ahead):
        assert result.deleted == [] and list(result.locked_until) == ["sample-1"], result
    assert datetime.fromisoformat(now.locked_until["sample-1"]) > datetime.now(timezone.utc) + timedelta(hours=23)
    assert storage.exists("sample-1/manifest.json")
    assert all(not versions(s3_client, lock_bucket, i.key)[1] for i in storage.list("sample-1/"))


def test_retention_purges_every_version_of_an_unlocked_backup_on_a_versioned_bucket(s3_server, s3_client, lock_bucket):
    # Given backups written without a lock on an Object Lock (so versioned) bucket, one object overwritten
    storage = open_storage(url(s3_server, lock_bucket, ""))
    build_sample_backup(storage, "sample-1")
    build_sample_backup(storage, "sample-2")
    storage.put("sample-1/reports/r.json", b"1")
    storage.put("sample-1/reports/r.json", b"2")

    result = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=int(datetime.now().timestamp() * 1000),
                             protect=None)

    assert result.deleted == ["sample-1"] and result.locked_until == {} and result.hidden == []
    left = s3_client.list_object_versions(Bucket=lock_bucket, Prefix="backups/sample-1/")
    assert not left.get("Versions") and not left.get("DeleteMarkers")
