"""The checkout's wheel, built as a user's ``pip`` builds it, and a folder it is installed in.

The wheel is built from a copy of what an sdist carries (the build's inputs), not in the checkout: an in-tree
build keeps ``build/lib`` from build to build, so a module deleted from the checkout would still ship, and the two
halves of ``scripts/test.sh`` may build at the same time. No build isolation: the build uses the venv's pinned
setuptools (the test extra) instead of downloading one each time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: What the wheel is built from: the project's metadata, the accelerator's build script, and the package.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "airflow_rbak")


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-index"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"pip {' '.join(args)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def build_wheel(folder: Path) -> Path:
    """Build the checkout's wheel under ``folder``; its path."""
    source, dist = folder / "source", folder / "dist"
    source.mkdir(parents=True)
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            shutil.copy2(REPO / name, source / name)
    _pip("wheel", "--no-build-isolation", "--wheel-dir", str(dist), str(source))
    (wheel,) = dist.glob("*.whl")
    return wheel


def install_wheel(wheel: Path, target: Path) -> Path:
    """Install ``wheel`` alone into the folder ``target`` (for the front of a process's ``PYTHONPATH``); ``target``."""
    _pip("install", "--target", str(target), str(wheel))
    return target
