"""Builds ``airflow_rbak`` into a zip for Spark's ``py_files``, once per version of its sources.

Executors need the codec; shipping the package with each submit means a
cluster does not have to have it installed (and runs the same code as the
Airflow worker). The zip is cached under a name derived from the sources'
hash, so it is rebuilt only when the code changes, and it is written to a
temp file and renamed so concurrent tasks never read half a zip. Only the
package's own Python files go in; for cluster masters :mod:`.spark_env`
ships the dependencies and the C accelerator as an environment archive.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import airflow_rbak

CACHE_ENV = "RBAK_SPARK_PACKAGE_DIR"
# A fixed timestamp keeps the zip's bytes a function of the sources alone.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def package_root() -> Path:
    """The directory of the ``airflow_rbak`` package that is imported here."""
    return Path(airflow_rbak.__file__).resolve().parent


def default_cache_dir() -> Path:
    """``$RBAK_SPARK_PACKAGE_DIR``, else ``$XDG_CACHE_HOME/airflow-rbak`` (``~/.cache/airflow-rbak``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "airflow-rbak"


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def sources_digest(root: Path | None = None) -> str:
    """A hash of every source file's path and bytes: the zip's cache key."""
    root = root or package_root()
    digest = hashlib.sha256()
    for path in _sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cached_build(target: Path, write: Callable[[BinaryIO], None]) -> str:
    """``target``'s path, built first by ``write`` into a temporary file beside it when missing: the name carries
    the content's digest, so a file that exists is complete and current (a rename publishes it whole)."""
    if target.is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return str(target)


def build_package_zip(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Return the path of a zip of ``airflow_rbak`` for ``--py-files``, building it if needed."""
    root = package_root()
    directory = Path(cache_dir) if cache_dir else default_cache_dir()

    def write(handle: BinaryIO) -> None:
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in _sources(root):
                name = f"airflow_rbak/{path.relative_to(root).as_posix()}"
                archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), path.read_bytes(), zipfile.ZIP_DEFLATED)

    return cached_build(directory / f"airflow_rbak-{airflow_rbak.__version__}-{sources_digest(root)}.zip", write)


def job_script(job: str) -> str:
    """Path of a job script inside the package (``encode_segments``, ``compact_segments``, ``verify_segments``)."""
    path = package_root() / "spark_jobs" / f"{job}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no Spark job {job!r} at {path}")
    return str(path)
