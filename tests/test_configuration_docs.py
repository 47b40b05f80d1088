"""docs/configuration.md documents every DAG param with its default, every rabbitmq connection field, every
``[rbak]`` option and every ``RBAK_*`` variable the code reads: adding one without a row fails here, and so does a
stale row.

The params come from the DAGs as Airflow loads them (a DagBag in a child
process with an isolated AIRFLOW_HOME), not from a list kept beside them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dags.airflow_env import REPO, airflow_env, run

DOC = REPO / "docs" / "configuration.md"
DAGS = ("rbak_backup", "rbak_verify", "rbak_restore", "rbak_freshness", "rbak_drill")

_LOAD = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow_rbak.provider import CONN_FIELDS

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "params": {d: {n: bag.dags[d].params.get_param(n).value for n in bag.dags[d].params} for d in sys.argv[2:]},
    "conn_fields": {n: spec["schema"].get("default") for n, spec in CONN_FIELDS.items()},
}))
'''


def table_rows(markdown: str, heading: str) -> dict[str, list[str]]:
    """The rows of the table under the ``## heading`` section, keyed by the first cell's code span."""
    section = markdown.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if cells and (name := re.fullmatch(r"`([^`]+)`", cells[0])):
            rows[name.group(1)] = cells[1:]
    return rows


def first_code(cell: str) -> str | None:
    found = re.search(r"`([^`]*)`", cell)
    return found.group(1) if found else None


def documented_as(default: Any, home: Path) -> str:
    """A default as the page writes it: strings bare, everything else JSON; the Airflow home as $AIRFLOW_HOME."""
    text = default if isinstance(default, str) else json.dumps(default)
    return text.replace(str(home.resolve()), "$AIRFLOW_HOME")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    home = tmp_path_factory.mktemp("airflow-home")
    done = run([sys.executable, "-c", _LOAD, str(REPO / "dags"), *DAGS],
               airflow_env(home, AIRFLOW__RBAK__STORAGE_URL=""), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["errors"] == {}
    return facts, home


@pytest.mark.parametrize("dag_id", DAGS)
def test_every_param_of_the_dag_has_a_row_with_its_default_and_a_meaning(loaded, dag_id):
    facts, home = loaded
    params = facts["params"][dag_id]
    rows = table_rows(DOC.read_text(), f"`{dag_id}` params")

    assert sorted(rows) == sorted(params), "docs/configuration.md must list exactly the DAG's params"
    for name, default in params.items():
        type_, doc_default, meaning = rows[name]
        assert first_code(doc_default) == documented_as(default, home), name
        assert type_ and len(meaning) > 10, name


def test_every_rabbitmq_connection_extra_has_a_row_with_its_default(loaded):
    facts, _ = loaded
    rows = table_rows(DOC.read_text(), "The `rabbitmq` connection")

    assert set(facts["conn_fields"]) <= set(rows)
    assert {"host", "port", "login", "password", "schema"} <= set(rows)
    for name, default in facts["conn_fields"].items():
        if default is not None:
            assert first_code(rows[name][0]) == documented_as(default, Path("/nonexistent")), name


def test_every_rbak_environment_variable_the_code_reads_is_documented():
    sources = [*REPO.joinpath("airflow_rbak").rglob("*.py"), *REPO.joinpath("dags").glob("*.py")]
    names = {m for path in sources for m in re.findall(r"[\"'](RBAK_[A-Z_]+)[\"']", path.read_text())}
    page = DOC.read_text()

    assert {"RBAK_STORAGE_URL", "RBAK_GCS_KEYFILE_JSON", "RBAK_SPARK_PACKAGE_DIR"} <= names
    assert [n for n in sorted(names) if f"`{n}`" not in page] == []


def test_every_rbak_option_has_a_row_with_its_type_and_the_default_the_provider_declares():
    from airflow_rbak.provider import CONFIG_OPTIONS

    rows = table_rows(DOC.read_text(), "The `[rbak]` options")

    assert list(rows) == list(CONFIG_OPTIONS)
    for name, option in CONFIG_OPTIONS.items():
        type_, doc_default, meaning = rows[name]
        assert type_ == option["type"], name
        assert (first_code(doc_default) if option["default"] is not None else doc_default) == (option["default"] or "unset")
        assert len(meaning) > 10, name
