"""The ``memory://`` backend's description: an in-process store, private or shared by name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, Place
from airflow_rbak.storage.url_parts import reject_query

_MEMORY_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


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


def _parse(parts: SplitResult, url: str) -> MemoryStorageConfig:
    reject_query(parts.query, "memory", url)
    if parts.path not in ("", "/"):
        raise ConfigurationError(f"memory URL {url!r} takes only a name: use memory:// or memory://NAME")
    return MemoryStorageConfig(parts.netloc)


def _place(config: MemoryStorageConfig) -> Place:
    return (config.name,), ()


BACKEND = Backend(scheme="memory", config_type=MemoryStorageConfig, parse=_parse,
                  factory="airflow_rbak.storage.memory:MemoryStorage.from_config", place=_place, example="memory://")
