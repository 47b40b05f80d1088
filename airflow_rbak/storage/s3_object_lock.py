"""S3 Object Lock as a location uses it: each backup's content written locked, its locks read back, versions purged.

A credential that can write a bucket can delete what it wrote, so a compromised worker (or ransomware holding its
key) could take the backups with it. With Object Lock the bucket itself refuses: a locked version cannot be
deleted or overwritten before its retain-until date (in ``compliance`` mode by nobody, in ``governance`` mode only by
a credential granted ``s3:BypassGovernanceRetention``). Only a backup's content is locked
(:func:`~airflow_rbak.codec.layout.is_backup_content`: manifest, segments, definitions export), because the state
runs keep beside it (locks, checkpoints, staging) must be replaced and removed as the run goes.

An Object Lock bucket is versioned: a delete without a version id succeeds even on a locked object, but only adds a
delete marker that hides it; the locked version stays and can be made current again. :meth:`S3ObjectLock.purge`
deletes the versions themselves, which is what retention must do for a backup to be gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_rbak.codec.layout import is_backup_content
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import Immutability, ObjectLockedError, StorageError, check_prefix
from airflow_rbak.storage.locations.s3 import OBJECT_LOCK_MODES

_DENIED = frozenset({"AccessDenied", "403", "Forbidden"})


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class S3ObjectLock:
    """One S3 location's Object Lock: what each write asks for, what the bucket enforces, what a delete may remove.

    ``storage`` is the :class:`~airflow_rbak.storage.s3.S3Storage` it serves (its client, bucket, prefix and error
    translation), not imported here: that module imports this one.
    """

    def __init__(self, storage: Any, clock: Callable[[], datetime] = _utcnow) -> None:
        self._storage = storage
        self._mode = storage.config.object_lock
        self._days = storage.config.object_lock_days
        self._clock = clock
        self._bucket_config: dict[str, Any] | None = None

    def put_args(self, key: str) -> dict[str, Any]:
        """The PutObject arguments that lock ``key`` (nothing unless the URL asks for a lock and ``key`` is content).

        The date is counted from now for every object, so a backup's manifest, written last, is its latest lock.
        S3 takes a locked PutObject only with a checksum of the body (Content-MD5 or an ``x-amz-checksum-*``), which
        botocore sends for S3-compatible endpoints only when asked: hence ``ChecksumAlgorithm``.
        """
        if self._mode is None or not is_backup_content(key):
            return {}
        until = self._clock() + timedelta(days=self._days or 0)
        return {"ObjectLockMode": OBJECT_LOCK_MODES[self._mode], "ObjectLockRetainUntilDate": until,
                "ChecksumAlgorithm": "SHA256"}

    def require_enabled(self) -> None:
        """Refuse a URL that asks for ``object_lock`` on a bucket that cannot lock: nothing written would be."""
        if self._mode is not None and not self.bucket_config().get("enabled"):
            raise ConfigurationError(
                f"{self._storage.url} asks for object_lock={self._mode}, but bucket {self._storage.bucket!r} has no "
                "Object Lock (it can only be enabled when a bucket is created: create_bucket with "
                "ObjectLockEnabledForBucket=True, docs/operations.md#immutable-backups); nothing was written")

    def check_written(self, key: str) -> None:
        """After a multipart upload: refuse a content object the server stored without the lock asked for."""
        if self._mode is None or not is_backup_content(key):
            return
        with self._storage._errors("stat", key):
            head = self._storage._client.head_object(Bucket=self._storage.bucket, Key=self._storage._full_key(key))
        if head.get("ObjectLockRetainUntilDate") is None:
            raise StorageError(f"{key}: the server stored it without the Object Lock asked for (a multipart upload "
                               "it does not lock); refused rather than counted as immutable", key)

    def bucket_config(self) -> dict[str, Any]:
        """Whether the bucket has Object Lock, its default retention and its versioning, read once.

        A credential not allowed to read them gets ``unknown``: retention then relies on the bucket refusing a
        locked version's delete (:meth:`purge`), and ``rbak location`` says it could not tell.
        """
        if self._bucket_config is None:
            client, bucket = self._storage._client, self._storage.bucket
            config: dict[str, Any] = {"enabled": False, "default": None, "versioning": "unknown", "lock": "disabled"}
            try:
                with self._storage._errors("read", None):
                    found = client.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
                config["enabled"] = found.get("ObjectLockEnabled") == "Enabled"
                config["lock"] = "enabled" if config["enabled"] else "disabled"
                config["default"] = found.get("Rule", {}).get("DefaultRetention")
            except StorageError as error:
                if _code(error) in _DENIED:
                    config["lock"] = "unknown (access denied)"
                elif "ObjectLockConfigurationNotFound" not in _code(error):
                    raise
            try:
                with self._storage._errors("read", None):
                    config["versioning"] = client.get_bucket_versioning(Bucket=bucket).get("Status") or "Disabled"
            except StorageError as error:
                if _code(error) not in _DENIED:
                    raise
            self._bucket_config = config
        return self._bucket_config

    def immutability(self) -> Immutability:
        """What the bucket and the URL together lock: the answer ``rbak location`` gives."""
        config = self.bucket_config()
        default = config["default"]
        default_text = (f"{default.get('Mode', '?').lower()}, {default.get('Days') or default.get('Years')} "
                        f"{'days' if default.get('Days') else 'years'}") if default else "none"
        details = (("versioning", config["versioning"]), ("object_lock", config["lock"]),
                   ("default_retention", default_text))
        if config["lock"].startswith("unknown"):
            summary = "unknown: this credential may not read the bucket's Object Lock configuration"
        elif not config["enabled"]:
            summary = "no: the bucket has no Object Lock; a credential that writes may delete every backup"
        elif self._mode is not None:
            summary = (f"yes: each backup's manifest, segments and definitions are locked in {self._mode} mode for "
                       f"{self._days} days from their writing")
        elif default:
            summary = (f"yes: the bucket's default retention ({default_text}) locks every object written, state "
                       "included (its deletes only add delete markers)")
        else:
            summary = ("no: the bucket has Object Lock but no default retention, and the URL asks for no object_lock, "
                       "so nothing written is locked")
        immutable = config["enabled"] and (self._mode is not None or default is not None)
        return Immutability("S3Storage", immutable, summary, self._mode, self._days, details)

    def locked_until(self, prefix: str, now: datetime) -> dict[str, datetime]:
        """Every key under ``prefix`` with a version locked past ``now`` (a HEAD per version; none without Object Lock).

        A credential that may not list versions cannot tell: :class:`ObjectLockedError` with no date, so retention
        skips the backup rather than guess.
        """
        check_prefix(prefix)
        if not self.bucket_config()["enabled"]:
            return {}
        locked: dict[str, datetime] = {}
        try:
            found = list(self._versions(self._storage._base + prefix))
        except StorageError as error:
            if _code(error) not in _DENIED:
                raise
            raise ObjectLockedError(f"cannot read the locks under {prefix} (s3:ListBucketVersions denied): taken as "
                                    "locked; run retention with a credential that may", prefix, None) from error
        for key, version_id in found:
            until = self._retain_until(key, version_id)
            if until is not None and until > now:
                relative = key[len(self._storage._base):]
                locked[relative] = max(until, locked.get(relative, until))
        return locked

    def purge(self, key: str) -> bool:
        """Delete every version and delete marker of ``key``; hide it with a marker where the credential may not.

        A version the bucket still locks raises :class:`ObjectLockedError` (nothing is hidden: a backup retention
        skipped must stay readable). A version refused for want of ``s3:DeleteObjectVersion`` is left, and the key
        hidden behind a delete marker instead: False, its versions left to the bucket's lifecycle rule.
        """
        full = self._storage._full_key(key)
        purged = True
        for found, version_id in self._versions(full):
            if found != full:
                continue
            try:
                with self._storage._errors("delete", key):
                    self._storage._client.delete_object(Bucket=self._storage.bucket, Key=full, VersionId=version_id)
            except StorageError as error:
                if _code(error) not in _DENIED:
                    raise
                until = self._retain_until(full, version_id)
                if until is not None and until > self._clock():
                    raise ObjectLockedError(f"{key} is locked until {until.isoformat()}: not deleted", key, until) from error
                purged = False
        if not purged:
            self._storage.delete(key)
        return purged

    def hidden_keys(self, prefix: str) -> tuple[str, ...]:
        """Keys under ``prefix`` whose latest version is a delete marker: stored, but invisible to every reader."""
        check_prefix(prefix)
        client, base, hidden = self._storage._client, self._storage._base, set()
        try:
            with self._storage._errors("list", None, prefix):
                for page in client.get_paginator("list_object_versions").paginate(Bucket=self._storage.bucket,
                                                                                   Prefix=base + prefix):
                    hidden |= {m["Key"][len(base):] for m in page.get("DeleteMarkers", ()) if m.get("IsLatest")}
        except StorageError as error:
            if _code(error) not in _DENIED:
                raise
            return ()  # a credential that may not list versions cannot purge them either
        return tuple(sorted(hidden))

    def _versions(self, full_prefix: str) -> Iterator[tuple[str, str]]:
        """(key, version id) of every version and delete marker under a bucket prefix."""
        client = self._storage._client
        with self._storage._errors("list", None, full_prefix):
            for page in client.get_paginator("list_object_versions").paginate(Bucket=self._storage.bucket,
                                                                               Prefix=full_prefix):
                for item in (*page.get("Versions", ()), *page.get("DeleteMarkers", ())):
                    yield item["Key"], item["VersionId"]

    def _retain_until(self, full_key: str, version_id: str) -> datetime | None:
        """A version's retain-until date, from its HEAD (None for a delete marker or an unlocked version)."""
        try:
            with self._storage._errors("stat", full_key):
                head = self._storage._client.head_object(Bucket=self._storage.bucket, Key=full_key, VersionId=version_id)
        except StorageError:
            return None  # a delete marker answers 405; an unreadable version is no lock we can name
        until = head.get("ObjectLockRetainUntilDate")
        return until if isinstance(until, datetime) else None


def _code(error: StorageError) -> str:
    cause = error.__cause__
    return str(getattr(cause, "response", {}).get("Error", {}).get("Code", "")) if cause is not None else ""
