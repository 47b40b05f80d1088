"""A location opened without a key: an encrypted one says it needs its key instead of looking damaged."""

from __future__ import annotations

import os

from airflow_rbak.storage.atomic import atomic_write
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.encrypted import MARKER_KEY, KeyRequiredError, is_sealed
from airflow_rbak.storage.forwarding import ForwardingStorage


class UnkeyedStorage(ForwardingStorage):
    """Wrap a backend opened without a key, so an encrypted location says it needs one instead of looking damaged.

    A read whose bytes start as an envelope raises :class:`KeyRequiredError`; so does the first write when the
    location carries the marker (one ``stat`` per opened storage that writes). Listing, stat and delete pass through:
    names and sizes are not secret.
    """

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self._checked = False

    def __repr__(self) -> str:
        return repr(self.inner)

    def _refuse(self, key: str) -> KeyRequiredError:
        return KeyRequiredError(f"{self.url} is an encrypted location ({key} is sealed): it needs its encryption key "
                                "(encryption_conn_id, [rbak] encryption_conn_id, rbak --encryption-conn-id or "
                                "RBAK_ENCRYPTION_KEYS)", key)

    def _writable(self, key: str) -> None:
        if not self._checked:
            if self.inner.exists(MARKER_KEY):
                raise self._refuse(key)
            self._checked = True

    def _readable(self, key: str, data: bytes) -> bytes:
        if is_sealed(data):
            raise self._refuse(key)
        return data

    def put(self, key: str, data: bytes) -> None:
        """Store, unless the location is encrypted."""
        self._writable(key)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create if absent, unless the location is encrypted."""
        self._writable(key)
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store a local file, unless the location is encrypted."""
        self._writable(key)
        self.inner.put_file(key, path)

    def get(self, key: str) -> bytes:
        """Read; a sealed object is refused."""
        return self._readable(key, self.inner.get(key))

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Read a range; one starting at 0 that is sealed is refused."""
        data = self.inner.get_range(key, offset, length)
        return self._readable(key, data) if offset == 0 else data

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Download; a sealed object is refused before the local file is touched."""
        data = self.get(key)
        with atomic_write(path) as target:
            target.write(data)

    def read_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with its tag; a sealed object is refused."""
        data, tag = self.inner.read_tagged(key)
        return self._readable(key, data), tag

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Replace if unchanged, unless the location is encrypted."""
        self._writable(key)
        return self.inner.replace_if_unchanged(key, data, tag)
