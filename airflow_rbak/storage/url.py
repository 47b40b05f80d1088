"""Parse storage URLs into frozen, validated backend configurations.

Parsing does no I/O, so a mistyped URL fails at construction with a message
that says how to fix it, before any backup work starts. Credentials never come
from the URL: a URL is logged and shown, and secrets in logs outlive any
rotation. A URL with user info is refused without repeating any of it, since
a secret holding ``/``, ``?`` or ``#`` would spill into what looks like its
path or query. Each scheme's own parsing is its backend's (``storage/registry.py``).
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import StorageConfig
from airflow_rbak.storage.locations.azure import AzureStorageConfig
from airflow_rbak.storage.locations.file import FileStorageConfig
from airflow_rbak.storage.locations.gcs import GcsStorageConfig
from airflow_rbak.storage.locations.memory import MemoryStorageConfig
from airflow_rbak.storage.locations.s3 import OBJECT_LOCK_MODES, SSE_ALGORITHMS, S3StorageConfig
from airflow_rbak.storage.registry import backend_for, backends
from airflow_rbak.storage.url_parts import CREDENTIALS_HINT, redact

__all__ = [
    "CREDENTIALS_HINT", "OBJECT_LOCK_MODES", "SSE_ALGORITHMS", "AzureStorageConfig", "FileStorageConfig",
    "GcsStorageConfig", "MemoryStorageConfig", "S3StorageConfig", "StorageConfig", "credentials_refusal",
    "holds_credentials", "parse_storage_url", "supported_schemes",
]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def supported_schemes() -> tuple[str, ...]:
    """Every registered backend's scheme."""
    return tuple(b.scheme for b in backends())


def parse_storage_url(url: str) -> StorageConfig:
    """Turn a storage URL or a plain filesystem path into a backend configuration.

    Raises :class:`ConfigurationError` naming the problem and the accepted form.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"storage URL is empty: use {_examples()}")
    if holds_credentials(url):
        raise ConfigurationError(credentials_refusal(url))
    scheme = _supported_scheme(url)
    if scheme is None:
        return FileStorageConfig(os.path.abspath(url))
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigurationError(f"storage URL {redact(url)!r} must not have a '#fragment'")
    backend = backend_for(scheme)
    assert backend is not None  # _supported_scheme refused the others
    config: StorageConfig = backend.parse(parts, url)
    return config


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


def _examples() -> str:
    """The registered forms, as the refusal of an empty URL lists them."""
    forms = [b.example for b in backends()]
    return ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else "".join(forms)


def _supported_scheme(url: str) -> str | None:
    """Return the URL's scheme, ``None`` for a plain path, or raise for schemes we cannot serve."""
    match = _SCHEME_RE.match(url)
    if match is None:
        return None
    scheme = match.group(1).lower()
    if backend_for(scheme) is None:
        choices = ", ".join(s + "://" for s in supported_schemes())
        raise ConfigurationError(
            f"unknown storage URL scheme {scheme!r} in {redact(url)!r}; use one of: {choices}"
        )
    return scheme
