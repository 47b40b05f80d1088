"""Packs the codec, its dependencies and its C accelerator into an archive for Spark's ``spark.archives``.

Executors of a cluster master need only Python and Spark: the archive is a virtual environment (``pyvenv.cfg``,
``bin/python`` pointing at the same interpreter version, ``lib/pythonX.Y/site-packages``) holding ``airflow_rbak``
(with ``_speedups``) and the distributions its jobs import, copied from this interpreter's own installation by
their ``RECORD`` files, as venv-pack does. Spark unpacks it in each executor's working folder under the alias after
``#``, and ``spark.pyspark.python`` points the Python workers at its interpreter. It is built once per set of
versions and sources (the cache key) and written to a temp file and renamed, so concurrent tasks never read half
an archive.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import sys
import tarfile
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import BinaryIO

import airflow_rbak
from airflow_rbak.spark_package import cached_build, default_cache_dir, package_root, sources_digest

#: The distributions the Spark jobs import on executors; their own requirements (without extras) come along.
#: pika: encode decodes each staged delivery's AMQP property list (``capture/staged_delivery.py``).
EXECUTOR_REQUIREMENTS = ("zstandard", "lz4", "orjson", "numpy", "boto3", "pika")
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
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".so"):
            archive.add(path, f"{site}/airflow_rbak/{path.relative_to(root).as_posix()}", recursive=False)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))
