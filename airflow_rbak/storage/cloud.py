"""The shape the cloud backends share: objects at ``<prefix>/<key>`` in one bucket (or container), named the same way
in every error, and the client library's failures translated into the storage error hierarchy in one place.

Each backend says only what is its own: its scheme and bucket (for :meth:`CloudStorage._where`) and how one of its
client's failures reads as a storage error (:meth:`CloudStorage._translate`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

from airflow_rbak.storage.base import Storage, StorageError


class CloudStorage(Storage):
    """A bucket-and-prefix store whose client raises its own errors; subclasses translate them."""

    #: The URL scheme errors name a place with (``s3``, ``azure``, ``gcs``).
    scheme: ClassVar[str]

    def __init__(self, config: Any, bucket: str) -> None:
        self.config = config
        self.url = config.url
        self._bucket_name = bucket
        self._base = config.prefix + "/" if config.prefix else ""

    def _where(self, key: str | None, prefix: str = "") -> str:
        """Name the bucket and key (and the endpoint, if custom) for error messages."""
        where = f"{self.scheme}://{self._bucket_name}/{self._base}{prefix if key is None else key}"
        return f"{where} at {self.config.endpoint}" if self.config.endpoint else where

    @contextlib.contextmanager
    def _errors(self, action: str, key: str | None, prefix: str = "") -> Iterator[None]:
        """Translate the client's failures (:meth:`_translate`); a storage error or one it does not know passes."""
        try:
            yield
        except StorageError:
            raise
        except Exception as error:
            translated = self._translate(error, action, key, prefix)
            if translated is None:
                raise
            raise translated from error

    def _translate(self, error: Exception, action: str, key: str | None, prefix: str) -> StorageError | None:
        """The storage error for one of the client's failures, quoting none of a service's text that could carry
        a secret; ``None`` for an exception that is not the client's."""
        raise NotImplementedError
