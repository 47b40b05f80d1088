"""A storage backend on a local or mounted filesystem: one file per key."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat as stat_module
from collections.abc import Iterator

from airflow_rbak.storage.atomic import TEMP_PREFIX, atomic_write, create_exclusive
from airflow_rbak.storage.base import (
    InvalidKeyError,
    MissingLocationError,
    ObjectInfo,
    ObjectNotFoundError,
    Storage,
    StorageError,
    check_key,
    check_prefix,
    check_range,
)
from airflow_rbak.storage.locations.file import FileStorageConfig

_COPY_CHUNK = 1024 * 1024
# Errors that mean "there is no regular file at this key".
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


class FileStorage(Storage):
    """Keys map to files under ``root``; ``a/b/c`` is ``root/a/b/c``.

    Writes go through a temp file and ``os.replace``, so readers never see a
    partial object. Keys whose last segment starts with ``.rbak-tmp-`` are
    reserved for those temp files. A key cannot be both an object and a
    "directory" of other keys here (``a`` and ``a/b``), unlike on S3.
    The root is created by the first ``put``, so opening does no I/O.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._config = FileStorageConfig(os.path.abspath(os.fspath(root)))
        self.root = self._config.path
        self.url = self._config.url

    @classmethod
    def from_config(cls, config: FileStorageConfig) -> FileStorage:
        """Build the backend a ``file://`` URL describes."""
        return cls(config.path)

    def __repr__(self) -> str:
        return f"FileStorage({self.root!r})"

    def check_location(self) -> None:
        """The root must be a folder (the first ``put`` would create it, but a reader finds nothing there)."""
        try:
            info = os.stat(self.root)
        except (FileNotFoundError, NotADirectoryError):
            raise MissingLocationError(f"folder {self.root} does not exist ({self.url}): check the path") from None
        except OSError as error:
            raise StorageError(f"cannot read {self.url}: {error.strerror or error}") from error
        if not stat_module.S_ISDIR(info.st_mode):
            raise MissingLocationError(f"{self.root} is not a folder ({self.url}): check the path")

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` to a temp file beside the target, fsync it, then rename it over."""
        path = self._path(key)
        with self._errors(key, "write"), atomic_write(path) as handle:
            handle.write(data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the file by an exclusive hard link of a complete temp file (atomic on local and NFS mounts)."""
        path = self._path(key)
        with self._errors(key, "write"):
            return create_exclusive(path, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Copy a local file in chunks, so large files never sit in memory whole."""
        target = self._path(key)
        with open(path, "rb") as source, self._errors(key, "write"):
            with atomic_write(target) as handle:
                shutil.copyfileobj(source, handle, _COPY_CHUNK)

    def replace_if_unchanged(self, key: str, data: bytes, tag: str) -> bool:
        """Check and replace under an exclusive lock on the file's directory: atomic against other such calls."""
        with self._directory_locked(key) as present:
            return present and super().replace_if_unchanged(key, data, tag)

    def delete_if_unchanged(self, key: str, tag: str) -> bool:
        """Check and delete under the directory lock, as :meth:`replace_if_unchanged`."""
        with self._directory_locked(key) as present:
            return present and super().delete_if_unchanged(key, tag)

    @contextlib.contextmanager
    def _directory_locked(self, key: str) -> Iterator[bool]:
        """``flock`` on the key's directory (not a file beside it: nothing new appears in listings).

        Yields False when the directory is gone (a delete prunes empty ones): then so is the object.
        """
        try:
            fd = os.open(os.path.dirname(self._path(key)), os.O_RDONLY)
        except FileNotFoundError:
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        finally:
            os.close(fd)

    def get(self, key: str) -> bytes:
        """Read the whole file; a directory or a missing file is not an object."""
        path = self._path(key)
        with self._errors(key, "read"), open(path, "rb") as handle:
            return handle.read()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Seek and read only the asked-for bytes."""
        check_range(offset, length)
        path = self._path(key)
        with self._errors(key, "read"), open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def get_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Copy the object to ``path`` in chunks, replacing ``path`` only once complete."""
        source_path = self._path(key)
        with self._errors(key, "read"):
            source = open(source_path, "rb")
        with source, atomic_write(path) as handle:
            shutil.copyfileobj(source, handle, _COPY_CHUNK)

    def stat(self, key: str) -> ObjectInfo:
        """Report the file's size; only regular files count as objects."""
        path = self._path(key)
        with self._errors(key, "stat"):
            info = os.stat(path)
        if not stat_module.S_ISREG(info.st_mode):
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key)
        return ObjectInfo(key, info.st_size)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Walk only the directory the prefix points into, yielding keys in sorted order."""
        check_prefix(prefix)
        directory, _, name_start = prefix.rpartition("/")
        start = os.path.join(self.root, *directory.split("/")) if directory else self.root
        key_base = directory + "/" if directory else ""
        yield from self._walk(start, key_base, name_start)

    def delete(self, key: str) -> None:
        """Unlink the file, then prune parent directories it left empty (never the root)."""
        path = self._path(key)
        try:
            os.unlink(path)
        except _MISSING:
            return
        except PermissionError:
            # Linux raises EISDIR, macOS EPERM, when the key names a directory.
            if os.path.isdir(path):
                return
            raise StorageError(f"permission denied deleting {key!r} in {self.url}", key) from None
        except OSError as error:
            raise StorageError(f"cannot delete {key!r} in {self.url}: {error}", key) from error
        self._prune(key)

    def _walk(self, directory: str, key_base: str, name_start: str) -> Iterator[ObjectInfo]:
        """Yield objects below ``directory`` in key order, skipping temp files and symlinks.

        Sorting each directory by name, with ``/`` appended to subdirectories,
        gives exactly the global key order, so no listing is held in memory.
        """
        try:
            with os.scandir(directory) as scan:
                entries = [e for e in scan if e.name.startswith(name_start)]
        except _MISSING:
            return
        except OSError as error:
            raise StorageError(f"cannot list {key_base or '/'} in {self.url}: {error}") from error
        ordered = sorted((e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e) for e in entries)
        for sort_name, entry in ordered:
            if sort_name.endswith("/"):
                yield from self._walk(entry.path, key_base + entry.name + "/", "")
            elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(TEMP_PREFIX):
                with contextlib.suppress(FileNotFoundError):  # deleted while listing
                    yield ObjectInfo(key_base + entry.name, entry.stat(follow_symlinks=False).st_size)

    def _prune(self, key: str) -> None:
        """Remove the key's parent directories that are now empty, never the root itself."""
        parts = key.split("/")[:-1]
        while parts:
            try:
                os.rmdir(os.path.join(self.root, *parts))
            except OSError:
                return  # not empty (or already gone): its ancestors are not empty either
            parts.pop()

    def _path(self, key: str) -> str:
        """Map a key to its path, refusing any path that would resolve outside the root.

        ``check_key`` already rules out ``..``; resolving symlinks as well means
        a link planted inside the root cannot make a put or delete reach outside.
        """
        check_key(key)
        if key.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            raise InvalidKeyError(f"keys starting with {TEMP_PREFIX!r} are reserved: {key!r}", key)
        path = os.path.join(self.root, *key.split("/"))
        real_root = os.path.realpath(self.root)
        if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
            raise InvalidKeyError(f"key {key!r} resolves outside {self.url}", key)
        return path

    @contextlib.contextmanager
    def _errors(self, key: str, action: str) -> Iterator[None]:
        """Translate OS errors into storage errors that name the key.

        When reading, "no such file" means no such object; when writing it
        means the key collides with a file or directory on the way.
        """
        try:
            yield
        except _MISSING as error:
            if action != "write":
                raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key) from None
            raise StorageError(
                f"cannot write {key!r} in {self.url}: a file or directory is in the way "
                f"({error.strerror or error})",
                key,
            ) from error
        except OSError as error:
            if error.errno == errno.ENOSPC:
                message = f"no space left to {action} {key!r} in {self.url}"
            else:
                message = f"cannot {action} {key!r} in {self.url}: {error.strerror or error}"
            raise StorageError(message, key) from error
