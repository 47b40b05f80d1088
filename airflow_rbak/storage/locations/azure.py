"""The ``azure://`` backend's description: a container and prefix on Azure Blob Storage, and its credentials.

The credentials' variables are the Azure CLI's, so a shell that works with ``az storage`` works with ``rbak`` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import SplitResult, unquote

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, ConnectionFields, Place
from airflow_rbak.storage.url_parts import check_endpoint, clean_prefix, cloud_params, cloud_url, prefix_segments

# Container names as Azure accepts them: 3-63 lowercase letters, digits and single hyphens.
_CONTAINER_RE = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
_AZURE_PARAMS = ("account", "endpoint")
#: The host of an account's blob service, as the RBAK specification's ``azure://`` URLs name it.
_AZURE_BLOB_HOST = ".blob.core.windows.net"
AZURE_CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"


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
        object.__setattr__(self, "prefix", clean_prefix(self.prefix, "Azure blob"))
        if self.account is not None and not _ACCOUNT_RE.match(self.account):
            raise ConfigurationError(f"invalid Azure storage account {self.account!r}: use 3-24 lowercase letters or digits")
        if self.endpoint is not None:
            check_endpoint(self.endpoint, "Azure")

    @property
    def url(self) -> str:
        """The location as an ``azure://`` URL, safe to log (it never holds credentials): the specification's
        ``<account>.blob.core.windows.net/<container>`` form when the account is known."""
        if self.account is not None:
            return cloud_url("azure", f"{self.account}{_AZURE_BLOB_HOST}/{self.container}", self.prefix,
                             (("endpoint", self.endpoint),))
        return cloud_url("azure", self.container, self.prefix, (("endpoint", self.endpoint),))


@dataclass(frozen=True)
class AzureCredentials:
    """One way into an Azure storage account: a connection string, an account key, or a SAS token."""

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


def _parse(parts: SplitResult, url: str) -> AzureStorageConfig:
    """``azure://<account>.blob.core.windows.net/<container>/<prefix>`` (the RBAK specification's form), or
    ``azure://<container>/<prefix>`` with the account from ``?account=`` or the credentials."""
    netloc, path = parts.netloc, unquote(parts.path)
    params = cloud_params(netloc, parts.query, "Azure", "container", _AZURE_PARAMS)
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


def _place(config: AzureStorageConfig) -> Place:
    return (config.account, config.container, config.endpoint), prefix_segments(config.prefix)


def _from_connection(conn: ConnectionFields) -> AzureCredentials:
    """A ``wasb`` connection: its connection string, else account (login) and key (password), else a SAS token."""
    conn.mask_extras("connection_string", "sas_token", "shared_access_key")
    connection_string = conn.extra_value("connection_string")
    if connection_string:
        return AzureCredentials(connection_string=connection_string)
    key = conn.password or conn.extra_value("shared_access_key")
    if key:
        return AzureCredentials(account=conn.login or None, account_key=key)
    sas = conn.extra_value("sas_token")
    if sas:
        return AzureCredentials(account=conn.login or None, sas_token=sas)
    raise ConfigurationError(f"wasb connection {conn.conn_id!r} holds no connection string, account key or SAS token; "
                             "for a managed identity or service principal leave storage_conn_id unset and install "
                             "azure-identity")


BACKEND = Backend(scheme="azure", config_type=AzureStorageConfig, parse=_parse,
                  factory="airflow_rbak.storage.azure:AzureBlobStorage", place=_place,
                  example="azure://container/prefix", extra="azure", credentials=(AzureCredentials,),
                  connection_types=("wasb",), from_connection=_from_connection)
