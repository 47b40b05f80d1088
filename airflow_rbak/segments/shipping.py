"""What a Spark application on a cluster needs shipped: an environment archive of ``airflow_rbak`` (only what the
jobs import, with its C accelerator) and the codec's dependencies, built once per version of its sources.

A local master runs the jobs with this interpreter, where the package is installed, so nothing is shipped. A
cluster's executors get the archive through ``spark.archives`` (a package zip in ``py_files`` would come first
on their path and hide the accelerator); it holds only :func:`executor_modules` (not the broker clients, the
Airflow face, the command line, the UI or the restore). It is cached under a name derived from the sources'
hash and the dependencies' versions, and written to a temp file and renamed, so concurrent tasks never read half
of one.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import BinaryIO

import airflow_rbak

CACHE_ENV = "RBAK_SPARK_PACKAGE_DIR"


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


def executor_modules(root: Path | None = None) -> list[Path]:
    """The package's files executors import, sorted: every module the jobs (``segments/jobs/``) import of
    ``airflow_rbak``, directly or through each other, imports inside functions included, with the ``__init__`` of
    each package on the way and the C accelerator beside the codec. The "executor-closure" import-linter contract
    holds pika and the broker modules out of it."""
    root = root or package_root()
    found: set[Path] = set()
    pending = [f"airflow_rbak.segments.jobs.{p.stem}" for p in (root / "segments" / "jobs").glob("*.py")]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")[1:]
        pending.extend(".".join(["airflow_rbak", *parts[:n]]) for n in range(len(parts)))  # the packages above it
        module = root.joinpath(*parts)
        files = [f for f in (module / "__init__.py", module.with_suffix(".py")) if f.is_file()]
        found.update(files, module.parent.glob(f"{module.name}.*.so"))  # an extension module (the accelerator)
        for file in files:
            pending.extend(_imported(ast.parse(file.read_bytes())))
    return sorted(found)


def _imported(tree: ast.AST) -> list[str]:
    """Every ``airflow_rbak`` module an import in ``tree`` may name (``from a import b``: ``a`` and ``a.b``)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return [n for n in names if n == "airflow_rbak" or n.startswith("airflow_rbak.")]


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


def job_script(job: str) -> str:
    """Path of a job script inside the package (``backup_segments``, ``compact_segments``, ``verify_segments``)."""
    path = package_root() / "segments" / "jobs" / f"{job}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no Spark job {job!r} at {path}")
    return str(path)


# The executor environment archive.
#
# Packs the codec, its dependencies and its C accelerator into an archive for Spark's ``spark.archives``.
#
# Executors of a cluster master need only Python and Spark: the archive is a virtual environment (``pyvenv.cfg``,
# ``bin/python`` pointing at the same interpreter version, ``lib/pythonX.Y/site-packages``) holding ``airflow_rbak``
# (with ``_speedups``) and the distributions its jobs import, copied from this interpreter's own installation by
# their ``RECORD`` files, as venv-pack does. Spark unpacks it in each executor's working folder under the alias after
# ``#``, and ``spark.pyspark.python`` points the Python workers at its interpreter. It is built once per set of
# versions and sources (the cache key) and written to a temp file and renamed, so concurrent tasks never read half
# an archive.

#: The distributions the Spark jobs import on executors; their own requirements (without extras) come along.
EXECUTOR_REQUIREMENTS = ("zstandard", "lz4", "orjson", "numpy", "boto3", "cryptography")
#: The folder name executors unpack the archive under (``<archive>#<alias>``).
ENV_ALIAS = "rbakenv"
_NAME_RE = re.compile(r"^([A-Za-z0-9_.\-]+)")


def _closure(names: tuple[str, ...]) -> list[Distribution]:
    """The named distributions and everything they require unconditionally, each once, sorted by name."""
    found: dict[str, Distribution] = {}
    pending = list(names)
    while pending:
        name = pending.pop().lower().replace("_", "-")
        if name in found:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        found[name] = dist
        for requirement in dist.requires or []:
            if "extra ==" not in requirement and (match := _NAME_RE.match(requirement)):
                pending.append(match.group(1))
    return [found[n] for n in sorted(found)]


def env_digest(dists: list[Distribution]) -> str:
    """The cache key: interpreter version, every distribution's version, and the package's sources."""
    text = f"{sys.version_info[:3]}|" + "|".join(f"{d.metadata['Name']}=={d.version}" for d in dists)
    return hashlib.sha256((text + "|" + sources_digest()).encode()).hexdigest()[:16]


def build_executor_env(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Return the path of the executor environment archive (``.tar.gz``), building it if needed."""
    dists = _closure(EXECUTOR_REQUIREMENTS)
    directory = Path(cache_dir) if cache_dir else default_cache_dir()

    def write(handle: BinaryIO) -> None:
        with tarfile.open(fileobj=handle, mode="w:gz") as archive:
            _write_env(archive, dists)

    return cached_build(directory / f"rbak-executor-env-{airflow_rbak.__version__}-{env_digest(dists)}.tar.gz", write)


def _write_env(archive: tarfile.TarFile, dists: list[Distribution]) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    config = f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {'.'.join(map(str, sys.version_info[:3]))}\n"
    _add_bytes(archive, "pyvenv.cfg", config.encode())
    link = tarfile.TarInfo("bin/python")
    link.type, link.linkname, link.mode = tarfile.SYMTYPE, str(base), 0o777
    archive.addfile(link)
    site = f"lib/python{version}/site-packages"
    for dist in dists:
        for file in dist.files or []:
            if ".." in file.parts or "__pycache__" in file.parts:
                continue  # scripts and data outside site-packages; bytecode is rebuilt
            source = Path(str(dist.locate_file(file)))
            if source.is_file():
                archive.add(source, f"{site}/{file.as_posix()}", recursive=False)
    root = package_root()
    for path in executor_modules(root):
        archive.add(path, f"{site}/airflow_rbak/{path.relative_to(root).as_posix()}", recursive=False)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))
