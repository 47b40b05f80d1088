"""Lint, types and layers: ruff over the code and tests, mypy over the package, and the import graph's rules.

The layer rules (docs/architecture.md) are read from the source with ``ast``, not by importing it: nothing
below ``hooks/`` imports Airflow, only ``spark_jobs/`` imports pyspark, and ``broker/`` (the RabbitMQ clients)
never imports ``capture/`` (the engines built on them).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "airflow_rbak"
#: The Airflow face of the package: the only places that may import Airflow.
AIRFLOW_FACE = ("hooks", "operators", "provider.py", "links.py", "ui/plugin.py", "ui/app.py", "ui/airflow_runs.py")
#: The only place that may import pyspark.
SPARK_JOBS = "spark_jobs"


def _tool(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `make setup` installs it with the test extra")
    return path


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def imported_modules(source: str) -> set[str]:
    """Every module a source file imports, at any depth of the file (absolute names; relative ones are ours)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _modules() -> dict[str, set[str]]:
    return {path.relative_to(PACKAGE).as_posix(): imported_modules(path.read_text()) for path in PACKAGE.rglob("*.py")}


def _roots(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def test_ruff_finds_nothing():
    done = _run(_tool("ruff"), "check", "airflow_rbak", "tests", "dags", "scripts", "bench", "spark_jobs")

    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_in_the_package():
    done = _run(_tool("mypy"), "--no-error-summary")  # [tool.mypy] in pyproject.toml names the package

    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_below_the_airflow_face_imports_airflow():
    below = {path: names for path, names in _modules().items() if not path.startswith(AIRFLOW_FACE)}

    offenders = {path: sorted(n for n in names if n.split(".")[0] == "airflow") for path, names in below.items()}

    assert not {path: names for path, names in offenders.items() if names}


def test_only_the_spark_jobs_import_pyspark():
    offenders = {path for path, names in _modules().items() if "pyspark" in _roots(names)
                 and not path.startswith(f"{SPARK_JOBS}/")}

    assert not offenders


def test_the_broker_clients_never_import_the_capture_engines():
    offenders = {path: sorted(n for n in names if n.startswith("airflow_rbak.capture"))
                 for path, names in _modules().items() if path.startswith("broker/")}

    assert len(offenders) > 5  # the scan sees the broker package
    assert not {path: names for path, names in offenders.items() if names}


def test_the_scan_sees_imports_inside_functions():
    source = "def f():\n    from airflow.sdk import BaseOperator\n    import pyspark.sql\n"

    assert imported_modules(source) == {"airflow.sdk", "pyspark.sql"}


def _error_classes() -> dict[str, list[str]]:
    """Every exception class the package defines (by name: ``*Error``/``*Exception``), with its bases' names."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                found[f"{path.relative_to(PACKAGE)}:{node.name}"] = [
                    b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]
    return found


def test_every_error_the_package_defines_is_an_rbak_error():
    classes = _error_classes()
    bases_by_name = {key.split(":")[1]: bases for key, bases in classes.items()}

    def reaches_rbak_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "RbakError":
            return True
        return name not in seen and any(reaches_rbak_error(b, seen | {name}) for b in bases_by_name.get(name, ()))

    assert len(classes) > 20  # the scan sees the package's errors
    assert [key for key in classes if not reaches_rbak_error(key.split(":")[1])] == []
