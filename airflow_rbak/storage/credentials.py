"""Storage credentials handed to this process's storage clients (and its children) through the environment.

Each backend reads its cloud's variables when it makes its client (one per storage): boto3 reads ``AWS_*``, the
Azure backend ``AZURE_STORAGE_*`` and the GCS backend ``RBAK_GCS_KEYFILE_JSON``. So credentials that come from
elsewhere (an Airflow connection) are exported into the environment: every client of the task then uses them, and a
``spark-submit`` the task starts inherits them without a secret on its command line. Nothing here logs a value, and
the secret parts are left out of ``repr``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from airflow_rbak.exceptions import ConfigurationError

AZURE_CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
GCS_KEYFILE_ENV = "RBAK_GCS_KEYFILE_JSON"


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair, optionally a session token, an endpoint and a region."""

    #: The variables these credentials are handed on in (all replaced together: a stale session token must not pair
    #: with a new key).
    VARIABLES: ClassVar[tuple[str, ...]] = (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint_url: str | None = None
    region: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key_id or not self.secret_access_key:
            raise ConfigurationError("S3 credentials need both an access key id and a secret access key")

    def environment(self) -> dict[str, str]:
        """The boto3 environment variables these credentials set (secret values included: never log it)."""
        env = {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}
        optional = {"AWS_SESSION_TOKEN": self.session_token, "AWS_ENDPOINT_URL": self.endpoint_url,
                    "AWS_DEFAULT_REGION": self.region}
        env.update({k: v for k, v in optional.items() if v})
        return env


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


StorageCredentials = S3Credentials | AzureCredentials | GcsCredentials

#: Every variable credentials are handed on in, to this process's children and to Spark executors.
STORAGE_ENV = S3Credentials.VARIABLES + AzureCredentials.VARIABLES + GcsCredentials.VARIABLES


def export_credentials(credentials: StorageCredentials | None) -> None:
    """Make ``credentials`` the ones this process and its children use; None leaves the environment's own.

    Only the variables of the credentials' own cloud are replaced.
    """
    if credentials is None:
        return
    for name in credentials.VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(credentials.environment())
