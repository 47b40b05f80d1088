"""The ``file://`` backend's description: a directory on a local or mounted filesystem."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, unquote

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.backend import Backend, Place
from airflow_rbak.storage.url_parts import reject_query


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


def _parse(parts: SplitResult, url: str) -> FileStorageConfig:
    """Accept ``file:///abs`` and ``file://localhost/abs``, as RFC 8089 does."""
    reject_query(parts.query, "file", url)
    if parts.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"file URL {url!r} names host {parts.netloc!r}; a file URL needs three slashes "
            f"(file:///absolute/path), or give a plain path such as {parts.netloc}{parts.path}"
        )
    if not parts.path:
        raise ConfigurationError(f"file URL {url!r} has no path; use file:///absolute/path")
    return FileStorageConfig(unquote(parts.path))


def _place(config: FileStorageConfig) -> Place:
    """The folder's real path, segment by segment (``..`` resolved, symlinks followed), so ``/backups-evil`` is not
    below ``/backups`` and a link inside an allowed folder is judged by where it leads."""
    return (), tuple(p for p in os.path.realpath(config.path).split(os.sep) if p)


def _link(config: FileStorageConfig, key: str) -> str:
    return f"{config.url}/{quote(key)}"


BACKEND = Backend(scheme="file", config_type=FileStorageConfig, parse=_parse,
                  factory="airflow_rbak.storage.file:FileStorage.from_config", place=_place,
                  example="file:///path", object_link=_link)
