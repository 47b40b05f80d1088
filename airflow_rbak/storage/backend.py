"""What a storage backend tells the rest of the package about itself: one :class:`Backend` per URL scheme.

restic keeps a location registry: each backend names its scheme, parses its own configuration and says how it is
opened, so adding one touches no other backend and no caller. Here a backend also says what identifies one of its
locations (the access rules compare those), how a browser reaches a stored object (the task's extra links), which
credentials it takes and from which Airflow connection types. ``storage/registry.py`` holds the registered ones;
nothing else names a backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol
from urllib.parse import SplitResult

#: What identifies a location within its scheme: its container (bucket, account, endpoint...) compared exactly, and
#: its path segments, compared as a prefix (a location below an allowed one is allowed).
Place = tuple[tuple[Any, ...], tuple[str, ...]]


class StorageConfig(Protocol):
    """A parsed, validated location: frozen, and printable as a URL without credentials."""

    @property
    def url(self) -> str:
        """The location as a URL, safe to log."""


class Credentials(Protocol):
    """Credentials a caller hands the storage clients (``storage/credentials.py``), and how they travel on.

    ``VARIABLES`` are the environment variables they are handed on in to processes that cannot share this one's
    clients (Spark executors); ``environment`` writes them, the class's ``from_environment`` reads them back.
    """

    VARIABLES: ClassVar[tuple[str, ...]]

    def environment(self) -> dict[str, str]:
        """The variables these credentials set (secret values: never log them)."""


@dataclass(frozen=True)
class ConnectionFields:
    """An Airflow connection as a backend reads it, with no Airflow here: ``hooks/storage.py`` fills it in.

    ``mask`` registers a secret with Airflow's log masker, which masks only a connection's password by itself.
    """

    conn_id: str
    conn_type: str
    login: str | None
    password: str | None
    extra: Mapping[str, Any]
    mask: Callable[[str], None]

    def extra_value(self, name: str) -> Any:
        """An extra as the provider's form stores it: bare, or prefixed ``extra__<type>__`` by older forms."""
        return self.extra.get(name) or self.extra.get(f"extra__{self.conn_type}__{name}")

    def mask_extras(self, *names: str) -> None:
        """Register the extras that hold secrets with the log masker (a key file's JSON as one line)."""
        for name in names:
            value = self.extra_value(name)
            if value:
                self.mask(value if isinstance(value, str) else json.dumps(value))


@dataclass(frozen=True)
class Backend:
    """One storage backend: its scheme and everything the package asks of it, registered once.

    ``factory`` is ``"module:Class"`` or ``"module:Class.method"``, imported when a location is first opened, so
    a backend's client library (boto3, the Azure and Google SDKs) is loaded only by those who use it; ``extra`` is
    the pip extra that installs that library, named when it is missing.
    """

    scheme: str
    #: The frozen configuration class ``parse`` returns; a configuration's backend is found by its type.
    config_type: type
    #: The URL's parts (scheme checked, no credentials, no fragment) and the URL itself -> a configuration.
    parse: Callable[[SplitResult, str], Any]
    factory: str | Callable[[Any], Any]
    #: What identifies a configuration's location, for the access rules (``access.py``).
    place: Callable[[Any], Place]
    #: The form shown when a URL is missing, e.g. ``s3://bucket/prefix``.
    example: str
    extra: str | None = None
    #: A browsable URL of a stored object (config, key); None: the location's URL and the key.
    object_link: Callable[[Any, str], str] | None = None
    #: The credential classes this backend takes (each a :class:`Credentials` with ``from_environment``).
    credentials: tuple[type, ...] = ()
    #: Airflow connection types whose fields ``from_connection`` turns into this backend's credentials.
    connection_types: tuple[str, ...] = ()
    from_connection: Callable[[ConnectionFields], Any] | None = None

    def link(self, config: Any, key: str) -> str:
        """A browsable URL of the object at ``key`` (the task's extra links): the backend's own, or URL/key."""
        if self.object_link is not None:
            return self.object_link(config, key)
        return f"{config.url}/{key}"
