"""Run pytest with another release of the Spark provider in place of the venv's: ``python -m tests.hooks.provider_overlay
FOLDER PYTEST_ARGS...``, FOLDER being a ``pip install --target`` of it (also first on ``PYTHONPATH``, for its metadata).

Putting the folder first on ``PYTHONPATH`` is not enough: ``airflow`` is a regular package of the venv, whose
``__path__`` lists its own folder before any other, so the venv's ``airflow.providers.apache.spark`` would still be
imported. A finder ahead of all others takes that one package from FOLDER; its modules follow from its ``__path__``.
It prints the provider version and file that were imported before the tests run, for the caller to check.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

PACKAGE = "airflow.providers.apache.spark"
DISTRIBUTION = "apache-airflow-providers-apache-spark"


class ProviderOverlay(importlib.abc.MetaPathFinder):
    """Finds ``airflow.providers.apache.spark`` in ``folder`` before the venv."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != PACKAGE:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [f"{self.folder}/airflow/providers/apache"])


def main(argv: list[str]) -> int:
    folder, pytest_args = argv[0], argv[1:]
    sys.meta_path.insert(0, ProviderOverlay(folder))
    from airflow.providers.apache.spark.hooks import spark_submit

    print(f"spark provider {importlib.metadata.version(DISTRIBUTION)} {spark_submit.__file__}", flush=True)
    import pytest

    return int(pytest.main(pytest_args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
