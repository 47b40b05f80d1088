"""Storage credentials a caller hands this process's storage clients, instead of each cloud's own chain.

The Airflow face resolves an Airflow connection (an ``aws`` connection through the Amazon provider's session, with its
role, profile or web identity; a ``wasb`` or ``google_cloud_platform`` connection's secrets) and hands the result in
with :func:`storage_credentials`, for as long as a task runs: every storage the process opens meanwhile uses them, and
the process's environment is left as it was. Spark executors cannot share a session, so they get the credentials as
the variables each cloud's chain reads (:meth:`environment`: an assumed role's as frozen temporary keys), which
``hooks/spark.py`` hands on in a private properties file, never a command line. Nothing here logs a value, and the
secret parts are left out of ``repr``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_rbak.exceptions import ConfigurationError

AZURE_CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
GCS_KEYFILE_ENV = "RBAK_GCS_KEYFILE_JSON"


#: The variables S3 credentials are handed on in (all replaced together: a stale session token must not pair with a
#: new key). boto3's chain reads them; ``AWS_ENDPOINT_URL`` since boto3 1.28.
S3_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")


@dataclass(frozen=True)
class S3Session:
    """A boto3 session S3 clients are made from, with the endpoint and region its connection names.

    The session resolves and refreshes its own credentials (an assumed role's are renewed before they expire).
    """

    VARIABLES: ClassVar[tuple[str, ...]] = S3_VARIABLES

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


@dataclass(frozen=True)
class AzureCredentials:
    """One way into an Azure storage account: a connection string, an account key, or a SAS token.

    The variables are the Azure CLI's, so a shell that works with ``az storage`` works with ``rbak`` too.
    """

    VARIABLES: ClassVar[tuple[str, ...]] = (
        AZURE_CONNECTION_STRING_ENV, "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")

    account: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    connection_string: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        given = [v for v in (self.account_key, self.sas_token, self.connection_string) if v]
        if len(given) != 1:
            raise ConfigurationError("Azure credentials need exactly one of a connection string, an account key "
                                     "or a SAS token")
        if self.account_key and not self.account:
            raise ConfigurationError("an Azure account key needs its account name")
        if self.connection_string:
            parse_connection_string(self.connection_string)
        if self.sas_token:
            object.__setattr__(self, "sas_token", self.sas_token.split("?", 1)[-1])  # a SAS URL's query, or a bare one

    def environment(self) -> dict[str, str]:
        """The ``AZURE_STORAGE_*`` variables these credentials set (secret values included: never log it)."""
        env = {AZURE_CONNECTION_STRING_ENV: self.connection_string, "AZURE_STORAGE_ACCOUNT": self.account,
               "AZURE_STORAGE_KEY": self.account_key, "AZURE_STORAGE_SAS_TOKEN": self.sas_token}
        return {k: v for k, v in env.items() if v}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> AzureCredentials | None:
        """The credentials the variables hold: a connection string first, then an account key, then a SAS token."""
        if environ.get(AZURE_CONNECTION_STRING_ENV):
            return cls(connection_string=environ[AZURE_CONNECTION_STRING_ENV])
        account = environ.get("AZURE_STORAGE_ACCOUNT") or None
        if environ.get("AZURE_STORAGE_KEY"):
            return cls(account=account, account_key=environ["AZURE_STORAGE_KEY"])
        if environ.get("AZURE_STORAGE_SAS_TOKEN"):
            return cls(account=account, sas_token=environ["AZURE_STORAGE_SAS_TOKEN"])
        return None


def parse_connection_string(text: str) -> dict[str, str]:
    """An Azure storage connection string's ``Name=value;`` pairs, names as written; errors never repeat values."""
    pairs: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ConfigurationError("the Azure storage connection string is malformed: expected Name=value pairs "
                                     "separated by ';'")
        pairs[name.strip()] = value.strip()
    if "AccountName" not in pairs and "BlobEndpoint" not in pairs:
        raise ConfigurationError("the Azure storage connection string names neither AccountName nor BlobEndpoint")
    return pairs


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


StorageCredentials = S3Session | AzureCredentials | GcsCredentials

#: Every variable credentials are handed on in, to Spark executors.
STORAGE_ENV = S3Session.VARIABLES + AzureCredentials.VARIABLES + GcsCredentials.VARIABLES

_current: StorageCredentials | None = None
_current_lock = threading.Lock()


@contextlib.contextmanager
def storage_credentials(credentials: StorageCredentials | None) -> Iterator[None]:
    """Every storage this process opens inside the block uses ``credentials`` (None: each cloud's own chain).

    Process-wide rather than per thread, as a task's helper threads open storage too; the previous credentials are
    back when the block ends. The process's environment is never changed.
    """
    previous = use_credentials(credentials)
    try:
        yield
    finally:
        use_credentials(previous)


def use_credentials(credentials: StorageCredentials | None) -> StorageCredentials | None:
    """Hand ``credentials`` in until the next call (None: each cloud's own chain); return the ones they replace."""
    global _current
    with _current_lock:
        previous, _current = _current, credentials
    return previous


def current_credentials() -> StorageCredentials | None:
    """The credentials :func:`storage_credentials` handed in, if any."""
    return _current


def credential_environment() -> Mapping[str, str]:
    """What a backend reads its cloud's variables from: this process's environment, with the current credentials'
    variables in place of their cloud's."""
    if _current is None or isinstance(_current, S3Session):
        return os.environ
    env = {k: v for k, v in os.environ.items() if k not in _current.VARIABLES}
    env.update(_current.environment())
    return env


def credentials_from_environment(environ: Mapping[str, str]) -> StorageCredentials | None:
    """The credentials handed on in ``environ`` (as :func:`handed_on` wrote them): S3, Azure or Google; None if none."""
    if environ.get(GCS_KEYFILE_ENV):
        return GcsCredentials(environ[GCS_KEYFILE_ENV])
    return AzureCredentials.from_environment(environ) or S3Session.from_environment(environ)


def handed_on(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage variables to hand a child that cannot share this process's clients (Spark executors): the
    current credentials', else those of this process's environment (secret values: never log them)."""
    if _current is not None:
        return _current.environment()
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in STORAGE_ENV if environ.get(name)}
