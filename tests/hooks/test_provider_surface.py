"""airflow_rbak uses only the Spark provider's public surface: no private attribute or method of its hook or operator.

A private name (``_conn_id``, ``_resolve_connection``, ``_env_vars``...) can change in any release and break us
silently; the constructor's arguments, ``submit``, ``on_kill`` and ``BaseHook.get_connection`` are what the provider
documents. The names come from the installed provider's classes and from a hook and an operator it builds, so the
test holds on every version it runs with (``test_oldest_provider.py`` runs it on the oldest one allowed). No
exception is allowed: were a provider internal ever unavoidable, it would go in one function of hooks/spark.py,
with a test that fails when the provider changes it, and only that function would be excused here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("airflow.providers.apache.spark")

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = "airflow.providers.apache.spark"

def provider_private_names() -> set[str]:
    """Every private attribute and method of the provider's hook and operator, their Airflow bases' included."""
    probes = [SparkSubmitHook(conn_id="rbak_surface_probe_missing"), SparkSubmitOperator(task_id="t", application="a.py")]
    names = {name for probe in probes for name in vars(probe)}
    names |= {name for probe in probes for cls in type(probe).__mro__ if cls is not object for name in vars(cls)}
    return {name for name in names if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))}


def private_uses(source: str, private: set[str]) -> list[tuple[int, str, str]]:
    """``(line, enclosing function, use)`` for each use of a name in ``private``: read, written, overridden, named
    in a string (``template_fields``, ``getattr``) or imported from the provider, and any ``super()._name``."""
    tree = ast.parse(source)
    scopes = {id(node): func.name for func in ast.walk(tree) if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(func)}
    uses = []
    for node in ast.walk(tree):
        use = None
        if isinstance(node, ast.Attribute) and (node.attr in private or _on_super(node)):
            use = f".{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in private:
            use = repr(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in private:
            use = f"def {node.name}"
        elif _private_by_formatted_name(node):
            use = "getattr(..., f'_...')"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PROVIDER):
            use = next((f"import {a.name}" for a in node.names if a.name.startswith("_")), None)
        if use:
            uses.append((node.lineno, scopes.get(id(node), "<module>"), use))
    return sorted(uses)


def _private_by_formatted_name(node: ast.AST) -> bool:
    """``getattr(obj, f"_{name}")`` and its kin: a private name made at run time."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and isinstance(node.args[1], ast.JoinedStr)):
        return False
    first = node.args[1].values[0] if node.args[1].values else None
    return isinstance(first, ast.Constant) and str(first.value).startswith("_")


def _on_super(node: ast.Attribute) -> bool:
    value = node.value
    return (node.attr.startswith("_") and not node.attr.startswith("__") and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name) and value.func.id == "super")


def airflow_face() -> list[Path]:
    """The modules that may import Airflow, so hold the provider's objects (import-linter keeps Airflow from the rest)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (without_airflow,) = [c["source_modules"] for c in contracts if c["id"] == "airflow-face"]
    files = sorted((ROOT / "airflow_rbak").rglob("*.py"))
    modules = {path: ".".join(path.relative_to(ROOT).with_suffix("").parts) for path in files}
    return [path for path, module in modules.items()
            if not any(module == m or module.startswith(m + ".") for m in without_airflow)]


def test_the_package_uses_no_private_name_of_the_providers_hook_or_operator():
    private = provider_private_names()
    assert {"_conn_id", "_resolve_connection", "_env_vars", "_get_hook", "_connection"} <= private  # the probe works

    found = {str(path.relative_to(ROOT)): uses for path in airflow_face() if (uses := private_uses(path.read_text(), private))}

    assert found == {}
    assert ROOT / "airflow_rbak" / "hooks" / "spark.py" in airflow_face()


def test_the_scan_finds_what_the_package_once_did():
    # The hook and operator as they were built on the provider's internals
    source = '''
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook, _private_helper
class Hook(SparkSubmitHook):
    def _resolve_connection(self):
        connection = super()._resolve_connection()
        self._env_vars = {"A": "1"}
        return connection
class Operator:
    template_fields = ("_conn_id",)
    def hook(self, base):
        return getattr(base, "_archives"), base._conn_id
def kwargs(base, names):
    return {name: getattr(base, f"_{name}") for name in names}
'''
    uses = private_uses(source, {"_resolve_connection", "_env_vars", "_conn_id", "_archives"})

    assert uses == [(2, "<module>", "import _private_helper"), (4, "_resolve_connection", "def _resolve_connection"),
                    (5, "_resolve_connection", "._resolve_connection"), (6, "_resolve_connection", "._env_vars"),
                    (9, "<module>", "'_conn_id'"), (11, "hook", "'_archives'"), (11, "hook", "._conn_id"),
                    (13, "kwargs", "getattr(..., f'_...')")]
