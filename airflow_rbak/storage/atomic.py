"""Write local files so that a reader sees the old file or the whole new one.

A crash or a concurrent reader must never observe a half-written backup
object, so every local write goes to a temporary file in the target's own
directory (``os.replace`` is atomic only within one filesystem), is fsynced,
and is then renamed over the target.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

#: Temporary files start with this; FileStorage hides and reserves such names.
TEMP_PREFIX = ".rbak-tmp-"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a file to write; on a clean exit it replaces ``path`` durably, else vanishes.

    Missing parent directories are created. The file is created with mode
    0600, as backups hold message bodies that other local users should not read.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, temp = _make_temp(directory, os.path.basename(target))
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_directory(directory)


def create_exclusive(path: str | os.PathLike[str], data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless something is there; True when this call created it.

    The bytes go to a temp file first, fsynced, then ``os.link`` puts them at
    ``path``: the link fails if ``path`` exists, and a reader never sees a
    partly written file.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, temp = _make_temp(directory, os.path.basename(target))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, target)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    fsync_directory(directory)
    return True


def _make_temp(directory: str, name: str) -> tuple[int, str]:
    """Create the temp file, recreating the directory if a concurrent delete pruned it."""
    for _ in range(3):
        os.makedirs(directory, exist_ok=True)
        try:
            return tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name[:64]}.", dir=directory)
        except FileNotFoundError:
            continue
    return tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name[:64]}.", dir=directory)


def fsync_directory(directory: str) -> None:
    """Persist a rename or unlink in ``directory`` (a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
