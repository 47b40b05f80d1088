"""Lint, types and layers: ruff over the code and tests, mypy over the package, and the import graph's contracts.

The layers of docs/architecture.md are import-linter contracts (``[tool.importlinter]`` in pyproject.toml), which
``lint-imports`` checks on the import graph, imports inside functions and indirect imports included: the layers,
nothing outside the Airflow face imports Airflow, only the Spark jobs (``segments/jobs/``) import pyspark, the codec is pure, the
broker clients never import the engines, and what Spark executors import needs no broker client. Within a layer, no
module imports itself back through others (no cycle in the module graph).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tests run on 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "airflow_rbak"
#: The Airflow face of the package: the only modules that may import Airflow (the "airflow-face" contract checks the rest).
AIRFLOW_FACE = ("airflow_rbak.hooks", "airflow_rbak.operators", "airflow_rbak.provider", "airflow_rbak.links",
                "airflow_rbak.airflow_settings",
                "airflow_rbak.ui.plugin", "airflow_rbak.ui.app", "airflow_rbak.ui.airflow_runs")
#: The only package that may import pyspark.
SPARK_JOBS = "airflow_rbak.segments.jobs"


def _tool(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `make setup` installs it with the test extra")
    return path


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    done = _run(_tool("ruff"), "check", "airflow_rbak", "tests", "dags", "scripts", "bench", "spark_jobs")

    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_in_the_package():
    done = _run(_tool("mypy"), "--no-error-summary")  # [tool.mypy] in pyproject.toml names the package

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_import_graph_keeps_every_layer_contract():
    done = _run(_tool("lint-imports"), "--no-logo", "--no-cache")

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout, done.stdout


def _compiled_extension(package: str, line: str) -> bool:
    """``from <package> import <name>`` of a compiled extension (the codec's ``_speedups``): grimp sees no module
    there and records an import of the package itself, which is not one."""
    statement = ast.parse(line.strip()).body[0]
    folder = ROOT.joinpath(*package.split("."))
    return isinstance(statement, ast.ImportFrom) and all((folder / f"{a.name}.c").exists() for a in statement.names)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every import cycle of the graph, each as the chain of modules from one back to itself (shortest first found)."""
    found: dict[frozenset[str], list[str]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            chain = graph.find_shortest_chain(importer=imported, imported=importer)
            if chain is not None and frozenset(chain) not in found:
                found[frozenset(chain)] = [importer, *chain]
    return list(found.values())


def _package_graph() -> grimp.ImportGraph:
    """The package's import graph (imports inside functions and under ``TYPE_CHECKING`` included)."""
    graph = grimp.build_graph("airflow_rbak", cache_dir=None)
    for importer in list(graph.modules):
        for imported in list(graph.find_modules_directly_imported_by(importer)):
            details = graph.get_import_details(importer=importer, imported=imported)
            if importer.startswith(f"{imported}.") and details and all(
                    _compiled_extension(imported, d["line_contents"]) for d in details):
                graph.remove_import(importer=importer, imported=imported)
    return graph


def test_no_module_imports_itself_back_through_others():
    graph = _package_graph()

    assert len(graph.modules) > 100  # the graph sees the package
    assert _cycles(graph) == []


def test_the_cycle_check_finds_two_modules_that_import_each_other_and_a_longer_loop():
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.c"), ("p.f", "p.a")]:
        graph.add_import(importer=importer, imported=imported)

    assert sorted(sorted(cycle) for cycle in _cycles(graph)) == [["p.a", "p.a", "p.b"], ["p.c", "p.c", "p.d", "p.e"]]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"]: contract for contract in config["contracts"]}


def _package_modules() -> list[str]:
    """Every module of the package but its root (which holds only ``__version__``), by dotted name."""
    names = [".".join(path.relative_to(ROOT).with_suffix("").parts) for path in sorted(PACKAGE.rglob("*.py"))]
    return [name.removesuffix(".__init__") for name in names if name != "airflow_rbak.__init__"]


def _within(module: str, names: list[str] | tuple[str, ...], as_packages: bool = True) -> bool:
    return any(module == n or (as_packages and module.startswith(f"{n}.")) for n in names)


def _sources(contract: dict, module: str) -> bool:
    return _within(module, contract["source_modules"], contract.get("as_packages", True))


def test_the_forbidden_contracts_check_every_module_a_new_package_included():
    # (the layers contract is exhaustive: lint-imports itself refuses a package that is in no layer)
    contracts, modules = _contracts(), _package_modules()
    without_airflow = (contracts["airflow-face"], contracts["airflow-face-ui"])

    assert len(modules) > 100  # the walk sees the package
    not_checked_for_airflow = [m for m in modules if not _within(m, AIRFLOW_FACE)
                               and not any(_sources(contract, m) for contract in without_airflow)]
    # the segments package's __init__ holds no code; its modules but the jobs are each in the pyspark contract
    not_checked_for_pyspark = [m for m in modules if not _within(m, (SPARK_JOBS,)) and m != "airflow_rbak.segments"
                               and not _sources(contracts["pyspark"], m)]
    open_to_the_codec = [m for m in modules if not _within(m, ("airflow_rbak.codec", "airflow_rbak.exceptions"))
                         and not _within(m, contracts["codec-pure"]["forbidden_modules"])]
    assert (not_checked_for_airflow, not_checked_for_pyspark, open_to_the_codec) == ([], [], [])


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


#: Ways of pointing outside the repository: the team's measurement notes, the specification's source files and the
#: folder beside the checkout that holds them, none of which a reader of the project has. Written as patterns, so
#: that this file does not itself name them.
_OUTSIDE = re.compile(r"field[-_ ]notes|\.\./shared|shared/seed|\b(spec|seed) 00[01]\b", re.IGNORECASE)


def test_nothing_in_the_repository_points_at_files_outside_it():
    """Docs, code comments and configuration state their facts in their own words (docs/format.md holds the format)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    this = Path(__file__).resolve()
    found = []
    for name in tracked:
        path = ROOT / name
        if path.resolve() == this or path.suffix not in (".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".cfg", ".c", ".h", ""):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        found += [f"{name}: {match.group()}" for match in _OUTSIDE.finditer(text)]
    assert found == []
