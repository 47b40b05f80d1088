"""The docs' tables of what each version does name the tests that show each row: those tests exist.

A row of the README's support matrix, or of a version table in docs/operations.md, is a claim; the test it names is
its evidence. A renamed or removed test would leave the claim standing on nothing, so every name is checked here:
a path (``tests/...py``) must be a file, a test name (``test_...``, with or without a ``path::`` and a parameter
id) must be defined in the test files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TABLES = {  # document -> the heading of each table whose last column names tests
    "README.md": ["| component | supported | tested | shown by |"],
    "docs/operations.md": ["| queue feature | what a backup does | why that is safe | shown by |",
                           # the two tables scripts/version_table.py generates from airflow_rbak/broker/versions.py
                           "| what changes | 3.10 | 4.0 | 4.3 | what a backup does | shown by |",
                           "| object / field | rabbitmqadmin-ng 2.29 | airflow-rbak | why | shown by |",
                           "| what changes | 3.10 | 4.0 | 4.3 | what a restore does | shown by |"],
}
CODE = re.compile(r"`([^`]+)`")
TEST_DEFINITIONS = {name for path in REPO.glob("tests/**/*.py")
                    for name in re.findall(r"^\s*def (test_\w+)", path.read_text(), re.M)}
TEST_FILES = {path.name for path in REPO.glob("tests/**/test_*.py")}


def table_rows(document: str, heading: str) -> list[str]:
    """The last cell of each row of the table under ``heading``."""
    lines = (REPO / document).read_text().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line.rstrip(" |").rsplit("|", 1)[-1].strip())
    return rows


def names_in(cell: str) -> list[str]:
    return [name for code in CODE.findall(cell) for name in re.split(r"[,\s]+", code)
            if name.startswith("tests/") or name.startswith("test_")]


def missing(name: str) -> str | None:
    path, _, test = name.partition("::")
    if path.startswith("tests/"):
        if not (REPO / path.rstrip("/")).exists():
            return f"{path} does not exist"
        if not test:
            return None
    elif path.endswith(".py"):
        if path not in TEST_FILES:
            return f"no test file {path}"
        if not test:
            return None
    else:
        test = path
    test = test.split("[", 1)[0]
    return None if test in TEST_DEFINITIONS else f"no test named {test}"


@pytest.mark.parametrize(("document", "heading"), [(d, h) for d, hs in TABLES.items() for h in hs])
def test_every_row_of_a_version_table_names_tests_that_exist(document, heading):
    rows = table_rows(document, heading)
    assert rows, f"{document}: no table under {heading!r}"
    unbacked = [row for row in rows if not names_in(row)]
    problems = [f"{name}: {why}" for row in rows for name in names_in(row) if (why := missing(name))]
    assert not problems, f"{document}: rows name tests that do not exist: {problems}"
    assert not unbacked, f"{document}: rows that name no test: {unbacked}"
