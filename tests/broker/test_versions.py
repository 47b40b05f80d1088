"""The one table of what each RabbitMQ version does (``airflow_rbak/broker/versions.py``): its rows, their evidence,
the docs made from it, and that no other module keeps a version boundary of its own (no broker needed).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from airflow_rbak.broker.versions import ANY, MEASURED_SERIES, VERSION_RULES, Step, VersionRule, parse_version
from tests.broker.versions import SERIES

REPO = Path(__file__).resolve().parents[2]
NODE_ID = re.compile(r"^(tests/[\w/]+\.py)::((?:\w+::)?test_\w+)(\[[^\]]+\])?$")
#: A version written as a tuple literal, e.g. ``(4, 3, 0)``: a boundary that belongs in the table.
VERSION_LITERAL = re.compile(r"\(\s*[34],\s*\d+(?:,\s*\d+)?\s*\)")


def load_script():
    spec = importlib.util.spec_from_file_location("version_table", REPO / "scripts" / "version_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def defined_tests(path: str) -> frozenset[str]:
    """The tests a file defines, as pytest names them: ``test_x`` at module level, ``TestY::test_x`` in a class."""
    tree = ast.parse((REPO / path).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test_")}
    return frozenset(names)


def why_missing(node_id: str) -> str | None:
    """Why ``node_id`` names no test (None: the file defines that test function)."""
    match = NODE_ID.match(node_id)
    if not match:
        return "not a pytest node id (tests/....py::test_name)"
    path, name, _ = match.groups()
    if not (REPO / path).is_file():
        return f"no file {path}"
    return None if name in defined_tests(path) else f"{path} defines no {name}"


def test_every_row_names_tests_that_exist_by_their_node_id():
    # Given every row of the version table
    # When each test it names is looked up in the file it names (parsed, not just found)
    problems = {rule.change: why for rule in VERSION_RULES for node in rule.shown_by if (why := why_missing(node))}
    # Then every row names at least one test, and each named test is defined there
    assert all(rule.shown_by for rule in VERSION_RULES), [r.change for r in VERSION_RULES if not r.shown_by]
    assert not problems, problems


def test_a_node_id_naming_a_missing_function_or_file_is_caught():
    # Given node ids that point at nothing (the check must not pass on the file alone)
    existing = "tests/broker/test_versions.py::test_every_row_names_tests_that_exist_by_their_node_id"
    # Then only the real one passes
    assert why_missing(existing) is None
    assert why_missing(existing + "[param]") is None
    assert "defines no" in why_missing("tests/broker/test_versions.py::test_that_was_never_written")
    assert "no file" in why_missing("tests/broker/test_gone.py::test_x")
    assert "not a pytest node id" in why_missing("test_every_row_names_tests_that_exist_by_their_node_id")


def test_the_operations_guide_shows_exactly_the_generated_tables():
    # Given docs/operations.md as committed
    document = (REPO / "docs" / "operations.md").read_text()
    # When its marked tables are generated again from the version table
    # Then nothing changes: the guide's tables are the table's rows
    assert load_script().render(document) == document, "run python scripts/version_table.py"


def test_each_table_lists_every_row_of_its_part_once_with_a_column_per_series_the_tests_run():
    script = load_script()
    for part in script.CODE_COLUMN:
        rows = script.table(part).splitlines()[2:]
        assert len(rows) == sum(part in rule.parts for rule in VERSION_RULES)
        assert all(row.count(" | ") == len(MEASURED_SERIES) + 2 for row in rows)  # 3 columns besides the series
    assert all(set(rule.parts) <= set(script.CODE_COLUMN) for rule in VERSION_RULES)
    # the columns are the series the broker tests run on (tests/broker/versions.py)
    assert [f"{major}.{minor}" for major, minor, _ in MEASURED_SERIES] == list(SERIES)


def test_a_step_that_starts_between_two_measured_series_says_from_which_version():
    script = load_script()
    rule = VersionRule("x", (Step(ANY, "a"), Step((4, 1, 0), "b")), "code", ("tests/x.py::test_x",))
    assert script.series_cells(rule) == ["a", "the same", "from 4.1: b"]


@pytest.mark.parametrize(("version", "value", "level"), [
    ((3, 9, 29), "old", 0), ((3, 10, 8), "old", 0), ((4, 0, 0), "four", 1), ((4, 2, 9), "four", 1),
    ((4, 3, 0), "new", 2), ((5, 0, 0), "new", 2),
])
def test_a_version_takes_the_fact_of_the_last_step_that_starts_at_or_before_it(version, value, level):
    # Given a rule that changes at 4.0 and again at 4.3
    rule = VersionRule("x", (Step(ANY, "", "old"), Step((4, 0, 0), "", "four"), Step((4, 3, 0), "", "new")), "", ())
    # Then a version reads its step's fact, and the boundaries are where the facts start
    assert (rule.value(version), rule.level(version)) == (value, level)
    assert (rule.since("four"), rule.since("new")) == ((4, 0, 0), (4, 3, 0))


@pytest.mark.parametrize("steps", [(), (Step((3, 10, 0), "a"),), (Step(ANY, "a"), Step((4, 3, 0), "b"), Step((4, 0, 0), "c"))])
def test_steps_must_start_at_any_version_and_rise(steps):
    with pytest.raises(ValueError, match="steps must start"):
        VersionRule("x", steps, "", ())


def test_versions_are_read_leniently_where_the_table_is():
    assert parse_version("4.0.0-rc.1") == (4, 0, 0) and parse_version("3.13.2+12.g1234") == (3, 13, 2)


def test_no_module_but_the_table_writes_a_rabbitmq_version_of_its_own():
    # Given every module of the package but the table
    sources = [p for p in (REPO / "airflow_rbak").rglob("*.py") if p != REPO / "airflow_rbak" / "broker" / "versions.py"]
    # Then none compares with a version written out (the boundaries come from the table's rows)
    found = [f"{p.relative_to(REPO)}: {m.group()}" for p in sources for m in VERSION_LITERAL.finditer(p.read_text())]
    assert not found, found
