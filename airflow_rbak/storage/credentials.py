"""Storage credentials a caller hands this process's storage clients, instead of each cloud's own chain.

The Airflow face resolves an Airflow connection (an ``aws`` connection through the Amazon provider's session, with its
role, profile or web identity; a ``wasb`` or ``google_cloud_platform`` connection's secrets) and hands the result in
with :func:`storage_credentials`, for as long as a task runs: every storage the process opens meanwhile uses them, and
the process's environment is left as it was. Spark executors cannot share a session, so they get the credentials as
the variables each cloud's chain reads (``environment()``: an assumed role's as frozen temporary keys), which
``hooks/spark.py`` hands on in a private properties file, never a command line. Each kind of credentials is its
backend's (``storage/locations/``), found through the registry; nothing here logs a value, and the secret parts are
left out of ``repr``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

from airflow_rbak.storage.backend import Credentials
from airflow_rbak.storage.locations.azure import AZURE_CONNECTION_STRING_ENV, AzureCredentials, parse_connection_string
from airflow_rbak.storage.locations.gcs import GCS_KEYFILE_ENV, GcsCredentials
from airflow_rbak.storage.locations.s3 import S3_VARIABLES, S3Session
from airflow_rbak.storage.registry import credential_kinds

__all__ = [
    "AZURE_CONNECTION_STRING_ENV", "GCS_KEYFILE_ENV", "S3_VARIABLES", "STORAGE_ENV", "AzureCredentials",
    "GcsCredentials", "S3Session", "StorageCredentials", "credential_environment", "credentials_from_environment",
    "current_credentials", "handed_on", "parse_connection_string", "storage_credentials", "storage_variables",
    "use_credentials",
]

#: Credentials of any registered backend.
StorageCredentials = Credentials


def storage_variables() -> tuple[str, ...]:
    """Every variable credentials are handed on in, to Spark executors: each registered kind's."""
    return tuple(name for kind in credential_kinds() for name in kind.VARIABLES)  # type: ignore[attr-defined]


#: The built-in backends' variables (:func:`storage_variables` adds those of backends registered later).
STORAGE_ENV = storage_variables()

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
    variables in place of their cloud's (a session, such as S3's, is used as it is instead)."""
    if _current is None or getattr(_current, "SHARED_AS_SESSION", False):
        return os.environ
    env = {k: v for k, v in os.environ.items() if k not in _current.VARIABLES}
    env.update(_current.environment())
    return env


def credentials_from_environment(environ: Mapping[str, str]) -> StorageCredentials | None:
    """The credentials handed on in ``environ`` (as :func:`handed_on` wrote them); None if none.

    The kinds are tried latest registered first, so the built-ins' order holds (Google, then Azure, then S3's key
    pair, which any AWS environment has) and a backend registered later is never shadowed by them.
    """
    for kind in reversed(credential_kinds()):
        found: StorageCredentials | None = kind.from_environment(environ)  # type: ignore[attr-defined]
        if found is not None:
            return found
    return None


def handed_on(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The storage variables to hand a child that cannot share this process's clients (Spark executors): the
    current credentials', else those of this process's environment (secret values: never log them)."""
    if _current is not None:
        return _current.environment()
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in storage_variables() if environ.get(name)}
