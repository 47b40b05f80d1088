"""The ``gcs://`` backend's description: a bucket and prefix on Google Cloud Storage, and its credentials."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import SplitResult, unquote

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, ConnectionFields, Place
from airflow_rbak.storage.url_parts import check_endpoint, clean_prefix, cloud_params, cloud_url, prefix_segments

# GCS bucket names: lowercase letters, digits, '-', '_' and '.'; dotted names may be longer.
_GCS_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_GCS_PARAMS = ("endpoint",)
GCS_KEYFILE_ENV = "RBAK_GCS_KEYFILE_JSON"


@dataclass(frozen=True)
class GcsStorageConfig:
    """A bucket and an optional object-name prefix on Google Cloud Storage or an emulator.

    ``endpoint`` replaces ``https://storage.googleapis.com``; a plain ``http://`` one is taken for an emulator and
    reached without credentials, so no token ever travels unencrypted.
    """

    bucket: str
    prefix: str = ""
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if not _GCS_BUCKET_RE.match(self.bucket) or ".." in self.bucket or self.bucket.startswith("goog"):
            raise ConfigurationError(
                f"invalid GCS bucket name {self.bucket!r}: use 3-222 lowercase letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        object.__setattr__(self, "prefix", clean_prefix(self.prefix, "GCS object"))
        if self.endpoint is not None:
            check_endpoint(self.endpoint, "GCS")

    @property
    def url(self) -> str:
        """The location as a ``gcs://`` URL, safe to log (it never holds credentials)."""
        return cloud_url("gcs", self.bucket, self.prefix, (("endpoint", self.endpoint),))


@dataclass(frozen=True)
class GcsCredentials:
    """A Google service-account (or authorized-user) key file's JSON, handed on as its content, not a path.

    A path would mean nothing to Spark executors on other hosts; the content reaches them as the AWS keys do.
    """

    VARIABLES: ClassVar[tuple[str, ...]] = (GCS_KEYFILE_ENV,)

    keyfile_json: str = field(repr=False)

    def __post_init__(self) -> None:
        try:
            info = json.loads(self.keyfile_json)
        except ValueError:
            raise ConfigurationError("the Google key file is not JSON") from None
        if not isinstance(info, dict) or "type" not in info:
            raise ConfigurationError("the Google key file has no 'type': expected a service account's JSON key")
        object.__setattr__(self, "keyfile_json", json.dumps(info, separators=(",", ":")))  # one line, for any carrier

    def environment(self) -> dict[str, str]:
        """The variable these credentials set (its value is a secret: never log it)."""
        return {GCS_KEYFILE_ENV: self.keyfile_json}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> GcsCredentials | None:
        """The key file the variable holds, if any."""
        return cls(environ[GCS_KEYFILE_ENV]) if environ.get(GCS_KEYFILE_ENV) else None


def _parse(parts: SplitResult, url: str) -> GcsStorageConfig:
    params = cloud_params(parts.netloc, parts.query, "GCS", "bucket", _GCS_PARAMS)
    return GcsStorageConfig(parts.netloc, unquote(parts.path), params.get("endpoint") or None)


def _place(config: GcsStorageConfig) -> Place:
    return (config.bucket, config.endpoint), prefix_segments(config.prefix)


def _from_connection(conn: ConnectionFields) -> GcsCredentials | None:
    """A ``google_cloud_platform`` connection: its key file's JSON (``keyfile_dict``) or the file ``key_path`` names;
    None for one without a key (application defaults)."""
    conn.mask_extras("keyfile_dict")
    keyfile = conn.extra_value("keyfile_dict")
    if keyfile:
        return GcsCredentials(keyfile if isinstance(keyfile, str) else json.dumps(keyfile))
    path = conn.extra_value("key_path")
    if not path:
        return None
    try:
        with open(path) as handle:
            content = handle.read()
    except OSError as error:
        raise ConfigurationError(f"google_cloud_platform connection {conn.conn_id!r}: cannot read its key_path "
                                 f"({error.strerror})") from None
    conn.mask(content)
    return GcsCredentials(content)


BACKEND = Backend(scheme="gcs", config_type=GcsStorageConfig, parse=_parse, factory="airflow_rbak.storage.gcs:GcsStorage",
                  place=_place, example="gcs://bucket/prefix", extra="gcs", credentials=(GcsCredentials,),
                  connection_types=("google_cloud_platform",), from_connection=_from_connection)
