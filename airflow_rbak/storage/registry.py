"""The registered storage backends, by scheme: the one place that knows which backends exist.

The built-in ones (file, s3, azure, gcs, memory) register when this module is first imported; another backend
registers with :func:`register` (a plug-in, a test's own backend) and from then on opens, parses, is checked by
the access rules and linked exactly like them, with no edit anywhere else.
"""

from __future__ import annotations

import importlib
from typing import Any

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.locations import azure, file, gcs, memory, s3

_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Register ``backend`` for its scheme; registering the same one again is harmless, another for a taken scheme
    is refused (two backends must not fight over one scheme)."""
    scheme = backend.scheme.lower()
    known = _BACKENDS.get(scheme)
    if known is not None and known is not backend:
        raise ConfigurationError(f"storage scheme {scheme}:// is already registered (by {known.factory!r})")
    _BACKENDS[scheme] = backend
    return backend


def backend_for(scheme: str) -> Backend | None:
    """The backend of ``scheme`` (any case), or None."""
    return _BACKENDS.get(scheme.lower())


def backend_of(config: Any) -> Backend:
    """The backend a parsed configuration belongs to, by its type."""
    for backend in _BACKENDS.values():
        if type(config) is backend.config_type:
            return backend
    raise ConfigurationError(f"no storage backend is registered for {type(config).__name__}")


def backends() -> tuple[Backend, ...]:
    """Every registered backend, in the order they registered."""
    return tuple(_BACKENDS.values())


def credential_kinds() -> tuple[type, ...]:
    """Every registered backend's credential classes, in registration order."""
    return tuple(kind for backend in _BACKENDS.values() for kind in backend.credentials)


def backend_for_connection(conn_type: str) -> Backend | None:
    """The backend that reads an Airflow connection of ``conn_type``, or None."""
    return next((b for b in _BACKENDS.values() if conn_type in b.connection_types), None)


def open_backend(config: Any) -> Storage:
    """Build the bare backend for a parsed configuration, importing its module (and client library) now."""
    backend = backend_of(config)
    factory = backend.factory
    if isinstance(factory, str):
        module_name, _, attribute = factory.partition(":")
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError as error:
            if backend.extra is None:
                raise
            raise ConfigurationError(f"{backend.scheme}:// storage needs {error.name or 'its client library'}: "
                                     f"pip install 'airflow-rbak[{backend.extra}]'") from None
        for name in attribute.split("."):
            found = getattr(found, name)
        factory = found
    storage: Storage = factory(config)
    return storage


for _builtin in (file.BACKEND, s3.BACKEND, azure.BACKEND, gcs.BACKEND, memory.BACKEND):
    register(_builtin)
