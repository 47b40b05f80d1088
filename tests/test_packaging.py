"""The wheel a user installs: its metadata, its files and its entry points, read from the wheel the checkout builds.

``tests/deployed/test_stack.py`` runs Airflow and the Spark jobs from the same wheel, installed.
"""

from __future__ import annotations

import configparser
import email
import email.message
import importlib.machinery
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tests run on 3.11
    import tomli as tomllib

from tests.wheel import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
#: What makes Airflow (and PyPI's filters) see a provider.
PROVIDER_CLASSIFIERS = {"Framework :: Apache Airflow", "Framework :: Apache Airflow :: Provider"}
#: The scripts the Spark operators submit (``spark_package.job_script``), inside the package.
SPARK_JOBS = ("backup_segments", "compact_segments", "verify_segments")


@pytest.fixture(scope="module")
def wheel(rbak_wheel: Path) -> Iterator[zipfile.ZipFile]:
    with zipfile.ZipFile(rbak_wheel) as archive:
        yield archive


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    return wheel.read(f"airflow_rbak-{PROJECT['version']}.dist-info/{name}").decode()


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    return email.message_from_string(_dist_info(wheel, "METADATA"))


def test_the_wheel_is_built_for_this_platform_because_it_carries_the_accelerator(rbak_wheel):
    python, abi, platform = rbak_wheel.stem.split("-")[-3:]

    assert (python, abi) == (f"cp{sys.version_info[0]}{sys.version_info[1]}",) * 2
    assert platform != "any"


def test_the_license_is_an_spdx_expression_with_its_file(wheel):
    metadata = _metadata(wheel)

    assert tuple(map(int, metadata["Metadata-Version"].split("."))) >= (2, 4)  # PEP 639
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert _dist_info(wheel, "licenses/LICENSE") == (REPO / "LICENSE").read_text()
    assert metadata["License"] is None  # the old free-text field, superseded
    assert not [c for c in metadata.get_all("Classifier") if c.startswith("License ::")]  # likewise


def test_the_classifiers_name_an_airflow_provider_and_its_python_versions(wheel):
    classifiers = _metadata(wheel).get_all("Classifier")

    assert classifiers == PROJECT["classifiers"]
    assert PROVIDER_CLASSIFIERS <= set(classifiers)
    assert "Typing :: Typed" in classifiers
    assert {"Programming Language :: Python :: 3.10", "Programming Language :: Python :: 3.11"} <= set(classifiers)
    assert _metadata(wheel)["Requires-Python"] == PROJECT["requires-python"] == ">=3.10"


def test_the_wheel_carries_every_project_url(wheel):
    urls = [value.split(", ", 1) for value in _metadata(wheel).get_all("Project-URL") or []]

    assert dict(urls) == PROJECT.get("urls", {})  # none yet: pyproject.toml says why


def test_the_entry_points_are_the_provider_the_plugin_and_the_command(wheel):
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.read_string(_dist_info(wheel, "entry_points.txt"))

    assert dict(entry_points["apache_airflow_provider"]) == {"provider_info": "airflow_rbak.provider:get_provider_info"}
    assert dict(entry_points["airflow.plugins"]) == {"rbak": "airflow_rbak.ui.plugin:RbakPlugin"}
    assert dict(entry_points["console_scripts"]) == {"rbak": "airflow_rbak.cli.main:main"}


def test_the_wheel_holds_every_module_the_typing_marker_and_the_compiled_accelerator(wheel):
    names = set(wheel.namelist())
    package = {n for n in names if not n.startswith("airflow_rbak-")}
    checkout = {p.relative_to(REPO).as_posix() for p in (REPO / "airflow_rbak").rglob("*.py") if "__pycache__" not in p.parts}
    accelerator = {f"airflow_rbak/codec/_speedups{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES}

    assert {n for n in package if n.endswith(".py")} == checkout
    assert {f"airflow_rbak/segments/jobs/{job}.py" for job in SPARK_JOBS} <= package
    assert "airflow_rbak/py.typed" in package
    assert len(accelerator & package) == 1, sorted(n for n in package if "_speedups" in n)
    # and nothing else: no C sources, tests, DAGs or the checkout's launchers
    assert package - checkout - accelerator == {"airflow_rbak/py.typed"}
