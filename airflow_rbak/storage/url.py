"""Parse storage URLs into frozen, validated backend configurations.

Parsing does no I/O, so a mistyped URL fails at construction with a message
that says how to fix it, before any backup work starts. Credentials never come
from the URL: a URL is logged and shown, and secrets in logs outlive any
rotation. A URL with user info is refused without repeating any of it, since
a secret holding ``/``, ``?`` or ``#`` would spill into what looks like its
path or query.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from airflow_rbak.exceptions import ConfigurationError

SUPPORTED_SCHEMES = ("file", "s3", "azure", "gcs", "memory")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Bucket names as S3 accepts them for new buckets (no uppercase, no underscores).
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION_RE = re.compile(r"^[a-z0-9-]+$")
_MEMORY_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
# Container names as Azure accepts them: 3-63 lowercase letters, digits and single hyphens.
_CONTAINER_RE = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
# GCS bucket names: lowercase letters, digits, '-', '_' and '.'; dotted names may be longer.
_GCS_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_S3_PARAMS = ("region", "endpoint", "path_style", "sse", "sse_kms_key_id", "object_lock", "object_lock_days")
_AZURE_PARAMS = ("account", "endpoint")
#: The host of an account's blob service, as the RBAK specification's ``azure://`` URLs name it.
_AZURE_BLOB_HOST = ".blob.core.windows.net"
_GCS_PARAMS = ("endpoint",)
#: Query parameters that carry a secret (an Azure SAS token's signature, a signed URL's): refused without echoing.
_SECRET_PARAMS = frozenset({"sig", "x-goog-signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token"})
#: Where storage credentials go instead of the URL (said by every refusal of a URL that holds some).
CREDENTIALS_HINT = ("credentials come from an Airflow connection (storage_conn_id, [rbak] storage_conn_id: type aws, "
                    "wasb or google_cloud_platform) or the cloud's own chain (the AWS credential chain; "
                    "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY; "
                    "GOOGLE_APPLICATION_CREDENTIALS); write an '@' in a path as %40")
#: Server-side encryption by URL value: S3-managed keys, or KMS (a key id, or the account's default KMS key).
SSE_ALGORITHMS = {"s3": "AES256", "kms": "aws:kms"}
#: S3 Object Lock retention modes by URL value (docs/operations.md#immutable-backups).
OBJECT_LOCK_MODES = {"governance": "GOVERNANCE", "compliance": "COMPLIANCE"}


@dataclass(frozen=True)
class FileStorageConfig:
    """A directory on a local or mounted filesystem; ``path`` is absolute."""

    path: str

    def __post_init__(self) -> None:
        if not self.path or not os.path.isabs(self.path):
            raise ConfigurationError(
                f"file storage needs an absolute path, got {self.path!r}"
            )
        object.__setattr__(self, "path", os.path.normpath(self.path))

    @property
    def url(self) -> str:
        """The location as a ``file://`` URL, safe to log."""
        return "file://" + quote(self.path)


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
        object.__setattr__(self, "prefix", _clean_prefix(self.prefix, "S3 key"))
        if self.region is not None and not _REGION_RE.match(self.region):
            raise ConfigurationError(
                f"invalid S3 region {self.region!r}: expected something like 'us-east-1'"
            )
        if self.endpoint is not None:
            _check_endpoint(self.endpoint, "S3")
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
class MemoryStorageConfig:
    """An in-process store; a non-empty ``name`` is shared by every opener."""

    name: str = ""

    def __post_init__(self) -> None:
        if self.name and not _MEMORY_NAME_RE.match(self.name):
            raise ConfigurationError(
                f"invalid memory store name {self.name!r}: use letters, digits, '.', '_' or '-'"
            )

    @property
    def url(self) -> str:
        """The location as a ``memory://`` URL."""
        return f"memory://{self.name}"


@dataclass(frozen=True)
class AzureStorageConfig:
    """A container and an optional blob-name prefix on Azure Blob Storage or Azurite.

    The account is named here or by the credentials (a connection string, ``AZURE_STORAGE_ACCOUNT``); ``endpoint``
    replaces ``https://<account>.blob.core.windows.net`` (Azurite: ``http://127.0.0.1:10000/devstoreaccount1``).
    """

    container: str
    prefix: str = ""
    account: str | None = None
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if not _CONTAINER_RE.match(self.container):
            raise ConfigurationError(
                f"invalid Azure container name {self.container!r}: use 3-63 lowercase letters, digits or single "
                "'-', starting and ending with a letter or digit (the account goes in ?account= or the connection)"
            )
        object.__setattr__(self, "prefix", _clean_prefix(self.prefix, "Azure blob"))
        if self.account is not None and not _ACCOUNT_RE.match(self.account):
            raise ConfigurationError(f"invalid Azure storage account {self.account!r}: use 3-24 lowercase letters or digits")
        if self.endpoint is not None:
            _check_endpoint(self.endpoint, "Azure")

    @property
    def url(self) -> str:
        """The location as an ``azure://`` URL, safe to log (it never holds credentials): the specification's
        ``<account>.blob.core.windows.net/<container>`` form when the account is known."""
        if self.account is not None:
            return _cloud_url("azure", f"{self.account}{_AZURE_BLOB_HOST}/{self.container}", self.prefix,
                              (("endpoint", self.endpoint),))
        return _cloud_url("azure", self.container, self.prefix, (("endpoint", self.endpoint),))


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
        object.__setattr__(self, "prefix", _clean_prefix(self.prefix, "GCS object"))
        if self.endpoint is not None:
            _check_endpoint(self.endpoint, "GCS")

    @property
    def url(self) -> str:
        """The location as a ``gcs://`` URL, safe to log (it never holds credentials)."""
        return _cloud_url("gcs", self.bucket, self.prefix, (("endpoint", self.endpoint),))


StorageConfig = FileStorageConfig | S3StorageConfig | AzureStorageConfig | GcsStorageConfig | MemoryStorageConfig


def parse_storage_url(url: str) -> StorageConfig:
    """Turn a storage URL or a plain filesystem path into a backend configuration.

    Raises :class:`ConfigurationError` naming the problem and the accepted form.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(
            "storage URL is empty: use file:///path, s3://bucket/prefix, azure://container/prefix, "
            "gcs://bucket/prefix or memory://"
        )
    if holds_credentials(url):
        raise ConfigurationError(credentials_refusal(url))
    scheme = _supported_scheme(url)
    if scheme is None:
        return FileStorageConfig(os.path.abspath(url))
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigurationError(f"storage URL {_redact(url)!r} must not have a '#fragment'")
    if scheme == "s3":
        return _parse_s3(parts.netloc, parts.path, parts.query, url)
    if scheme == "azure":
        return _parse_azure(parts.netloc, unquote(parts.path), parts.query)
    if scheme == "gcs":
        params = _cloud_params(parts.netloc, parts.query, "GCS", "bucket", _GCS_PARAMS)
        return GcsStorageConfig(parts.netloc, unquote(parts.path), params.get("endpoint") or None)
    _reject_query(parts.query, scheme, url)
    if scheme == "file":
        return _parse_file(parts.netloc, parts.path, url)
    if parts.path not in ("", "/"):
        raise ConfigurationError(f"memory URL {url!r} takes only a name: use memory:// or memory://NAME")
    return MemoryStorageConfig(parts.netloc)


def holds_credentials(url: str) -> bool:
    """Whether a storage URL may hold user info: any ``@`` after its ``scheme://`` (a plain path never does).

    Where user info ends cannot be told when the secret holds ``/``, ``?`` or ``#``, so every raw ``@`` counts,
    in the path and the query too, and so does a percent-encoded one in a query value (an S3 ``endpoint``).
    """
    match = _SCHEME_RE.match(url)
    if match is None:
        return False
    if "@" in url[match.end():]:
        return True
    # Without a raw '@' the split is sound; a query value (an endpoint) may still hold one percent-encoded.
    return any("@" in value for _, value in parse_qsl(urlsplit(url).query, keep_blank_values=True))


def credentials_refusal(url: str) -> str:
    """The refusal of a URL that holds credentials: its scheme and where credentials go, nothing else of it."""
    match = _SCHEME_RE.match(url)
    scheme = match.group(1).lower() if match else "storage"
    return f"a {scheme}:// storage URL must not hold credentials (it has an '@'); {CREDENTIALS_HINT}"


def _supported_scheme(url: str) -> str | None:
    """Return the URL's scheme, ``None`` for a plain path, or raise for schemes we cannot serve."""
    match = _SCHEME_RE.match(url)
    if match is None:
        return None
    scheme = match.group(1).lower()
    choices = ", ".join(s + "://" for s in SUPPORTED_SCHEMES)
    if scheme not in SUPPORTED_SCHEMES:
        raise ConfigurationError(
            f"unknown storage URL scheme {scheme!r} in {_redact(url)!r}; use one of: {choices}"
        )
    return scheme


def _parse_file(netloc: str, path: str, url: str) -> FileStorageConfig:
    """Accept ``file:///abs`` and ``file://localhost/abs``, as RFC 8089 does."""
    if netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"file URL {url!r} names host {netloc!r}; a file URL needs three slashes "
            f"(file:///absolute/path), or give a plain path such as {netloc}{path}"
        )
    if not path:
        raise ConfigurationError(f"file URL {url!r} has no path; use file:///absolute/path")
    return FileStorageConfig(unquote(path))


def _parse_s3(netloc: str, path: str, query: str, url: str) -> S3StorageConfig:
    """Read bucket, prefix and the supported query parameters (:data:`_S3_PARAMS`)."""
    if not netloc:
        raise ConfigurationError(f"S3 URL {url!r} has no bucket; use s3://bucket/optional/prefix")
    params = _query_params(query, url)
    unknown = sorted(set(params) - set(_S3_PARAMS))
    if unknown:
        raise ConfigurationError(
            f"unknown S3 URL parameter(s) {', '.join(unknown)} in {_redact(url)!r}; "
            f"supported: {', '.join(_S3_PARAMS)}"
        )
    return S3StorageConfig(
        bucket=netloc,
        prefix=unquote(path),
        region=params.get("region") or None,
        endpoint=params.get("endpoint") or None,
        path_style=_parse_bool(params.get("path_style", "false"), "path_style"),
        sse=params.get("sse") or None,
        sse_kms_key_id=params.get("sse_kms_key_id") or None,
        object_lock=params.get("object_lock") or None,
        object_lock_days=_parse_days(params.get("object_lock_days") or None, "object_lock_days"),
    )


def _parse_azure(netloc: str, path: str, query: str) -> AzureStorageConfig:
    """``azure://<account>.blob.core.windows.net/<container>/<prefix>`` (the RBAK specification's form), or
    ``azure://<container>/<prefix>`` with the account from ``?account=`` or the credentials."""
    params = _cloud_params(netloc, query, "Azure", "container", _AZURE_PARAMS)
    account = params.get("account") or None
    if netloc.lower().endswith(_AZURE_BLOB_HOST):
        named = netloc[: -len(_AZURE_BLOB_HOST)].lower()
        if account is not None and account != named:
            raise ConfigurationError(f"the Azure URL names account {named!r} in its host and {account!r} in ?account=")
        container, _, prefix = path.strip("/").partition("/")
        if not container:
            raise ConfigurationError(f"Azure URL has no container; use azure://{named}{_AZURE_BLOB_HOST}/container/prefix")
        return AzureStorageConfig(container, prefix, named, params.get("endpoint") or None)
    return AzureStorageConfig(netloc, path, account, params.get("endpoint") or None)


def _cloud_params(name: str, query: str, kind: str, holder: str, known: tuple[str, ...]) -> dict[str, str]:
    """The query parameters of an Azure or GCS URL; errors name parameters, never repeat values (a SAS is one)."""
    if not name:
        raise ConfigurationError(f"{kind} URL has no {holder}; use {kind.lower()}://{holder}/optional/prefix")
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key.lower() in _SECRET_PARAMS for key, _ in pairs):
        raise ConfigurationError(f"the {kind} storage URL must not hold credentials (it has a signature); {CREDENTIALS_HINT}")
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise ConfigurationError(f"parameter {key!r} is repeated in the {kind} URL")
        params[key] = value
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigurationError(f"unknown {kind} URL parameter(s) {', '.join(unknown)}; supported: {', '.join(known)}")
    return params


def _cloud_url(scheme: str, holder: str, prefix: str, params: tuple[tuple[str, str | None], ...]) -> str:
    """An ``azure://`` or ``gcs://`` URL from its parts (the inverse of :func:`parse_storage_url`)."""
    path = "/" + quote(prefix) if prefix else ""
    given = [(k, v) for k, v in params if v]
    query = "?" + urlencode(given, safe=":/") if given else ""
    return f"{scheme}://{holder}{path}{query}"


def _clean_prefix(prefix: str, kind: str) -> str:
    """The prefix without outer slashes; refused when a segment is empty, ``.`` or ``..``."""
    cleaned = prefix.strip("/")
    if cleaned and any(p in ("", ".", "..") for p in cleaned.split("/")):
        raise ConfigurationError(f"invalid {kind} prefix {prefix!r}: no empty, '.' or '..' segments")
    return cleaned


def _query_params(query: str, url: str) -> dict[str, str]:
    """Parse the query string, refusing repeated parameters (which one would win?)."""
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in params:
            raise ConfigurationError(f"parameter {key!r} is repeated in {_redact(url)!r}")
        params[key] = value
    return params


def _reject_query(query: str, scheme: str, url: str) -> None:
    if query:
        raise ConfigurationError(
            f"{scheme}:// storage takes no parameters, got {query!r} in {_redact(url)!r}"
        )


def _parse_bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {value!r}")


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


def _check_endpoint(endpoint: str, kind: str) -> None:
    """Accept only ``http(s)://host[:port][/path]`` without credentials."""
    if "@" in endpoint:  # before anything quotes it: a secret with '/' or '?' would spill into path or query
        raise ConfigurationError(f"an {kind} endpoint must not hold credentials (it has an '@'); {CREDENTIALS_HINT}")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"invalid {kind} endpoint {_redact(endpoint)!r}: expected http(s)://host[:port]"
        )
    try:
        _ = parts.port  # urllib validates the port only when it is read
    except ValueError:
        raise ConfigurationError(f"invalid port in {kind} endpoint {_redact(endpoint)!r}") from None
    if parts.query or parts.fragment:  # not echoed: a query may be a SAS token
        raise ConfigurationError(f"an {kind} endpoint must not have a query or fragment")


def _redact(url: str) -> str:
    """Hide any ``user:password@`` so error messages are safe to log."""
    return re.sub(r"(?<=://)[^/?#@]*@", "***@", unquote(url))
