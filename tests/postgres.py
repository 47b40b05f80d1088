"""A private PostgreSQL cluster on loopback for a test: Debian's binaries, ``initdb`` and ``pg_ctl``, a free port.

PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` user (``runuser``), in a
folder of its own under the system's temporary directory (pytest's temporary folders are root's, mode 0700, and
the ``postgres`` user cannot enter them). Logins are trusted on loopback only; the URL holds no password.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.airflow_stack import free_port

DEADLINE_S = 120


def _binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (Debian puts initdb and pg_ctl there, not on PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


@contextmanager
def private_postgres(database: str = "airflow") -> Iterator[str]:
    """Start a cluster with one database; yield its SQLAlchemy URL (psycopg2); stop it and remove its folder."""
    binaries = _binaries()
    if binaries is None:
        pytest.skip("needs PostgreSQL's server binaries (scripts/system-deps.sh test installs postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="rbak-postgres-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*as_owner, *args], capture_output=True, text=True, timeout=DEADLINE_S)
        assert done.returncode == 0, f"{args[0]}: {done.stdout[-2000:]}{done.stderr[-2000:]}"

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-U", "airflow", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", str(DEADLINE_S),
            "-o", options, "start")
        run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "airflow", database)
        yield f"postgresql+psycopg2://airflow@127.0.0.1:{port}/{database}"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_owner, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=DEADLINE_S)
        shutil.rmtree(folder, ignore_errors=True)
