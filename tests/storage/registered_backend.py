"""A storage backend defined in the test suite, registered through the public registry and nothing else.

``memtest://SHELF/prefix``: objects kept in a process-wide dict per shelf. It proves that a backend needs no edit
under ``airflow_rbak/``: the conformance suite opens it with ``open_storage``, the access rules compare its places,
and the task's manifest link is its own, all through ``storage/registry.py``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, unquote

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, Place
from airflow_rbak.storage.base import ObjectInfo, ObjectNotFoundError, Storage, check_key, check_prefix
from airflow_rbak.storage.registry import register

_SHELF_RE = re.compile(r"^[a-z0-9-]+$")
_SHELVES: dict[str, dict[str, bytes]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class MemtestConfig:
    """A shelf and a key prefix on it."""

    shelf: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if not _SHELF_RE.match(self.shelf):
            raise ConfigurationError(f"invalid memtest shelf {self.shelf!r}: use lowercase letters, digits or '-'")
        object.__setattr__(self, "prefix", self.prefix.strip("/"))

    @property
    def url(self) -> str:
        return f"memtest://{self.shelf}" + (f"/{quote(self.prefix)}" if self.prefix else "")


class MemtestStorage(Storage):
    """The objects of one shelf under one prefix, in memory; writes are atomic under one lock."""

    def __init__(self, config: MemtestConfig) -> None:
        self.url = config.url
        self._base = config.prefix + "/" if config.prefix else ""
        with _LOCK:
            self._objects = _SHELVES.setdefault(config.shelf, {})

    def put(self, key: str, data: bytes) -> None:
        with _LOCK:
            self._objects[self._base + check_key(key)] = bytes(data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        full = self._base + check_key(key)
        with _LOCK:
            if full in self._objects:
                return False
            self._objects[full] = bytes(data)
            return True

    def get(self, key: str) -> bytes:
        with _LOCK:
            found = self._objects.get(self._base + check_key(key))
        if found is None:
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
        return found

    def stat(self, key: str) -> ObjectInfo:
        return ObjectInfo(key, len(self.get(key)))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        with _LOCK:
            found = sorted((k[len(self._base):], len(v)) for k, v in self._objects.items()
                           if k.startswith(self._base + prefix))
        return (ObjectInfo(k, size) for k, size in found)

    def delete(self, key: str) -> None:
        with _LOCK:
            self._objects.pop(self._base + check_key(key), None)


def _parse(parts: SplitResult, url: str) -> MemtestConfig:
    if parts.query:
        raise ConfigurationError("memtest:// storage takes no parameters")
    return MemtestConfig(parts.netloc, unquote(parts.path))


def _place(config: MemtestConfig) -> Place:
    return (config.shelf,), tuple(p for p in config.prefix.split("/") if p)


def _link(config: MemtestConfig, key: str) -> str:
    return f"https://memtest.example/{config.shelf}/{quote('/'.join(filter(None, [config.prefix, key])))}"


BACKEND = register(Backend(scheme="memtest", config_type=MemtestConfig, parse=_parse, factory=MemtestStorage,
                           place=_place, example="memtest://shelf/prefix", object_link=_link))
