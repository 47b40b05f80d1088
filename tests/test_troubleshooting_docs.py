"""docs/troubleshooting.md names every error the package raises: an error class added anywhere under airflow_rbak/
without its row (cause and fix) fails here.

The classes are found in the source (``class NameError(``), not by importing, so an error of the Airflow-facing
modules (hooks, operators, the view) counts as much as one of the codec. Every one is listed: the page's rows are the
only list, and none is left out as internal (an internal error still reaches a user as a failed task's message).
"""

from __future__ import annotations

import re

from tests.dags.airflow_env import REPO

PAGE = REPO / "docs" / "troubleshooting.md"
CLASS = re.compile(r"^class (\w+Error)\b", re.M)


def error_classes() -> dict[str, str]:
    """Every ``*Error`` class defined in the package: name -> the module that defines it."""
    found = {}
    for path in sorted(REPO.joinpath("airflow_rbak").rglob("*.py")):
        for name in CLASS.findall(path.read_text()):
            found[name] = path.relative_to(REPO).as_posix()
    return found


def test_every_error_class_of_the_package_has_a_row_on_the_troubleshooting_page():
    rows = set(re.findall(r"^\| `(\w+)` \|[^|\n]+\|[^|\n]+\|$", PAGE.read_text(), re.M))
    classes = error_classes()

    assert len(classes) > 60  # the search found the hierarchy
    assert sorted(f"{name} ({module})" for name, module in classes.items() if name not in rows) == []
    assert sorted(rows - set(classes)) == []  # and no row names an error that no longer exists

