"""The ``s3://`` backend's description: a bucket and prefix on S3 or an S3-compatible server, and its credentials."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import SplitResult, quote, unquote, urlencode

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, Place
from airflow_rbak.storage.url_parts import check_endpoint, clean_prefix, parse_bool, prefix_segments, query_params, redact

# Bucket names as S3 accepts them for new buckets (no uppercase, no underscores).
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION_RE = re.compile(r"^[a-z0-9-]+$")
_S3_PARAMS = ("region", "endpoint", "path_style", "sse", "sse_kms_key_id", "object_lock", "object_lock_days")
#: Server-side encryption by URL value: S3-managed keys, or KMS (a key id, or the account's default KMS key).
SSE_ALGORITHMS = {"s3": "AES256", "kms": "aws:kms"}
#: S3 Object Lock retention modes by URL value (docs/operations.md#immutable-backups).
OBJECT_LOCK_MODES = {"governance": "GOVERNANCE", "compliance": "COMPLIANCE"}
#: The variables S3 credentials are handed on in (all replaced together: a stale session token must not pair with a
#: new key). boto3's chain reads them; ``AWS_ENDPOINT_URL`` since boto3 1.28.
S3_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")


@dataclass(frozen=True)
class S3StorageConfig:
    """A bucket and an optional key prefix on S3 or an S3-compatible server."""

    bucket: str
    prefix: str = ""
    region: str | None = None
    endpoint: str | None = None
    path_style: bool = False
    #: Server-side encryption of every object written: ``None``, ``"s3"`` (SSE-S3) or ``"kms"`` (SSE-KMS).
    sse: str | None = None
    sse_kms_key_id: str | None = None
    #: S3 Object Lock on each backup's content: ``None``, ``"governance"`` or ``"compliance"``, for ``object_lock_days``.
    object_lock: str | None = None
    object_lock_days: int | None = None

    def __post_init__(self) -> None:
        if not _BUCKET_RE.match(self.bucket) or ".." in self.bucket:
            raise ConfigurationError(
                f"invalid S3 bucket name {self.bucket!r}: use 3-63 lowercase "
                "letters, digits, '.' or '-', starting and ending with a letter or digit"
            )
        object.__setattr__(self, "prefix", clean_prefix(self.prefix, "S3 key"))
        if self.region is not None and not _REGION_RE.match(self.region):
            raise ConfigurationError(
                f"invalid S3 region {self.region!r}: expected something like 'us-east-1'"
            )
        if self.endpoint is not None:
            check_endpoint(self.endpoint, "S3")
        if self.sse is not None and self.sse not in SSE_ALGORITHMS:
            raise ConfigurationError(f"invalid S3 sse {self.sse!r}: use s3 (SSE-S3) or kms (SSE-KMS)")
        if self.sse_kms_key_id is not None and self.sse != "kms":
            raise ConfigurationError("sse_kms_key_id needs sse=kms")
        _check_object_lock(self.object_lock, self.object_lock_days)

    @property
    def encryption_args(self) -> dict[str, str]:
        """The PutObject/upload arguments that ask S3 to encrypt what it stores (empty without ``sse``)."""
        if self.sse is None:
            return {}
        args = {"ServerSideEncryption": SSE_ALGORITHMS[self.sse]}
        if self.sse_kms_key_id:
            args["SSEKMSKeyId"] = self.sse_kms_key_id
        return args

    @property
    def url(self) -> str:
        """The location as an ``s3://`` URL, safe to log (it never holds credentials)."""
        path = "/" + quote(self.prefix) if self.prefix else ""
        params = [(k, v) for k, v in (("region", self.region), ("endpoint", self.endpoint)) if v]
        if self.path_style:
            params.append(("path_style", "true"))
        params += [(k, v) for k, v in (("sse", self.sse), ("sse_kms_key_id", self.sse_kms_key_id)) if v]
        if self.object_lock:
            params += [("object_lock", self.object_lock), ("object_lock_days", str(self.object_lock_days))]
        query = "?" + urlencode(params, safe=":/") if params else ""
        return f"s3://{self.bucket}{path}{query}"


@dataclass(frozen=True)
class S3Session:
    """A boto3 session S3 clients are made from, with the endpoint and region its connection names.

    The session resolves and refreshes its own credentials (an assumed role's are renewed before they expire), so
    the backend uses it directly rather than through the environment (``SHARED_AS_SESSION``).
    """

    VARIABLES: ClassVar[tuple[str, ...]] = S3_VARIABLES
    SHARED_AS_SESSION: ClassVar[bool] = True

    session: Any = field(repr=False)
    endpoint_url: str | None = None
    region: str | None = None

    def environment(self) -> dict[str, str]:
        """The session's credentials as they are now, as boto3 variables (secret values included: never log it).

        Frozen: temporary credentials (an assumed role's) stay valid until they expire (an hour by default, the
        role's session duration), and whoever reads these variables cannot renew them.
        """
        found = self.session.get_credentials()
        if found is None:
            raise ConfigurationError("the S3 session has no credentials: the connection's chain found none")
        frozen = found.get_frozen_credentials()
        env = {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key,
               "AWS_SESSION_TOKEN": frozen.token, "AWS_ENDPOINT_URL": self.endpoint_url,
               "AWS_DEFAULT_REGION": self.region or self.session.region_name}
        return {k: v for k, v in env.items() if v}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> S3Session | None:
        """A session on the key pair the variables hold (as :meth:`environment` wrote them); None without one."""
        import boto3

        if not environ.get("AWS_ACCESS_KEY_ID") or not environ.get("AWS_SECRET_ACCESS_KEY"):
            return None
        region = environ.get("AWS_DEFAULT_REGION") or None
        session = boto3.session.Session(aws_access_key_id=environ["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=environ["AWS_SECRET_ACCESS_KEY"],
                                        aws_session_token=environ.get("AWS_SESSION_TOKEN") or None, region_name=region)
        return cls(session, environ.get("AWS_ENDPOINT_URL") or None, region)


def _parse(parts: SplitResult, url: str) -> S3StorageConfig:
    """Read bucket, prefix and the supported query parameters (:data:`_S3_PARAMS`)."""
    if not parts.netloc:
        raise ConfigurationError(f"S3 URL {url!r} has no bucket; use s3://bucket/optional/prefix")
    params = query_params(parts.query, url)
    unknown = sorted(set(params) - set(_S3_PARAMS))
    if unknown:
        raise ConfigurationError(
            f"unknown S3 URL parameter(s) {', '.join(unknown)} in {redact(url)!r}; "
            f"supported: {', '.join(_S3_PARAMS)}"
        )
    return S3StorageConfig(
        bucket=parts.netloc,
        prefix=unquote(parts.path),
        region=params.get("region") or None,
        endpoint=params.get("endpoint") or None,
        path_style=parse_bool(params.get("path_style", "false"), "path_style"),
        sse=params.get("sse") or None,
        sse_kms_key_id=params.get("sse_kms_key_id") or None,
        object_lock=params.get("object_lock") or None,
        object_lock_days=_parse_days(params.get("object_lock_days") or None, "object_lock_days"),
    )


def _parse_days(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit():
        raise ConfigurationError(f"{name} must be a whole number of days, got {value!r}")
    return int(value)


def _check_object_lock(mode: str | None, days: int | None) -> None:
    """Both or neither: a lock needs a mode and a period, and a period without a mode would lock nothing."""
    if mode is not None and mode not in OBJECT_LOCK_MODES:
        raise ConfigurationError(f"invalid S3 object_lock {mode!r}: use governance or compliance")
    if (mode is None) != (days is None):
        raise ConfigurationError("object_lock and object_lock_days go together: e.g. "
                                 "?object_lock=governance&object_lock_days=35 (at least as long as retention keeps a backup)")
    if days is not None and not 1 <= days <= 36500:
        raise ConfigurationError(f"object_lock_days must be between 1 and 36500, got {days}")


def _place(config: S3StorageConfig) -> Place:
    """Bucket and endpoint; region, encryption and path style do not move a location."""
    return (config.bucket, config.endpoint), prefix_segments(config.prefix)


def _link(config: S3StorageConfig, key: str) -> str:
    """The object on the endpoint's own URL, or in the AWS console."""
    full = "/".join(filter(None, [config.prefix, key]))
    if config.endpoint:
        return f"{config.endpoint.rstrip('/')}/{config.bucket}/{quote(full)}"
    region = f"?region={config.region}" if config.region else ""
    return f"https://s3.console.aws.amazon.com/s3/object/{config.bucket}{region}{'&' if region else '?'}prefix={quote(full)}"


#: ``aws`` connections are read by the hook layer through the Amazon provider's session (``from_connection`` None).
BACKEND = Backend(scheme="s3", config_type=S3StorageConfig, parse=_parse, factory="airflow_rbak.storage.s3:S3Storage",
                  place=_place, example="s3://bucket/prefix", object_link=_link, credentials=(S3Session,),
                  connection_types=("aws",))
