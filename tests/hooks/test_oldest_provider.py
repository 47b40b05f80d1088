"""The oldest Spark provider pyproject.toml allows passes the hook and operator tests, a real spark-submit included.

The venv holds the newest release; this test installs the oldest (the pin's lower bound) once into
``.run/spark-provider-<version>``, under a file lock so that the suite's two halves never race, and runs those tests
again in a pytest of their own that imports that release (``provider_overlay.py``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "apache-airflow-providers-apache-spark"
#: The tests that use the provider: the hook's options, the package's public-surface scan, and the operators, whose
#: real spark-submit (``test_verify_operator_runs_spark_submit_and_returns_the_summary``) runs through that release.
TESTS = ("tests/hooks/test_spark.py", "tests/hooks/test_provider_surface.py", "tests/operators/test_spark_operators.py")


def oldest_allowed() -> str:
    """The lower bound of the provider's pin in pyproject.toml."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["airflow"]
    (pin,) = [p for p in extras if re.match(rf"{DISTRIBUTION}\b", p)]
    found = re.search(r">=\s*([\w.]+)", pin)
    assert found, f"{pin}: no lower bound"
    return found.group(1)


def installed(version: str) -> Path:
    """``pip install --no-deps --target`` of that release, once: later runs, and the other half, reuse it."""
    folder = ROOT / ".run" / f"spark-provider-{version}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".spark-provider-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.is_dir():
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(partial),
                                   f"{DISTRIBUTION}=={version}"], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"pip could not install {DISTRIBUTION}=={version}: {done.stderr[-2000:]}"
            partial.rename(folder)  # whole or not at all: a half-made folder is never taken for a finished one
    return folder


@pytest.mark.spark
def test_the_spark_tests_pass_on_the_oldest_provider_allowed(tmp_path):
    # Given the oldest release the pin allows, installed beside the venv's newest
    version = oldest_allowed()
    folder = installed(version)

    # When the hook and operator tests run with it in place of the venv's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "tests.hooks.provider_overlay", str(folder), "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "pytest"), *TESTS], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)

    # Then that release was the one imported, and every test passed, the real spark-submit among them
    assert f"spark provider {version} {folder}{os.sep}" in done.stdout, done.stdout[-3000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"\b(\d+) passed\b", done.stdout) and not re.search(r"\b(skipped|deselected)\b", done.stdout), done.stdout[-3000:]
