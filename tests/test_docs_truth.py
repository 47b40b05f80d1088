"""What the documents state about the code, checked against the code: a changed default, exit code, param, DAG or task
name that the docs still state the old way fails here (the DAG params' own table: tests/test_configuration_docs.py).

The facts come from the code as it runs: the DAGs as Airflow loads them (a DagBag in a child process with an
isolated AIRFLOW_HOME), the ``[rbak]`` options from ``provider.py``, the exit codes from ``rbak`` itself (its
``--help`` text, and the documented examples run against real folders).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dags.airflow_env import REPO, airflow_env, run
from tests.test_configuration_docs import documented_as, table_rows

DOCS = sorted([*REPO.joinpath("docs").glob("*.md"), REPO / "README.md"])
#: Names of the ``rbak_*`` form that are not DAGs: the example notifier module of docs/airflow.md.
NOT_DAGS = {"rbak_alerts", "rbak_encryption"}  # connection ids
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
CLI_SECTION = "The `rbak` command line"

_LOAD = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": {d: {"tasks": [t.task_id for t in dag.tasks],
                 "params": {n: dag.params.get_param(n).value for n in dag.params}} for d, dag in bag.dags.items()},
}))
'''


@pytest.fixture(scope="module")
def dags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each DAG's task ids (in Airflow's order) and params with their defaults, as Airflow loads the DAG folder."""
    home = tmp_path_factory.mktemp("airflow-home")
    done = run([sys.executable, "-c", _LOAD, str(REPO / "dags")], airflow_env(home, AIRFLOW__RBAK__STORAGE_URL=""),
               timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["errors"] == {}
    return {"dags": facts["dags"], "home": home}


def prose(path: Path) -> str:
    """A page without its fenced code blocks (commands and their output are not statements about defaults)."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


def mentions(pattern: str, flags: int = 0) -> list[tuple[str, re.Match[str]]]:
    return [(p.relative_to(REPO).as_posix(), m) for p in DOCS for m in re.finditer(pattern, prose(p), flags)]


# --- DAGs and tasks -------------------------------------------------------------------------------------------------

def test_every_dag_name_in_the_docs_is_a_dag_and_every_count_of_them_is_right(dags):
    ids = set(dags["dags"])
    named = {(page, m.group(1).rstrip("_")) for page, m in mentions(r"\b(rbak_[a-z0-9_]+)\b(?!\.py)")}

    assert sorted((page, name) for page, name in named if name not in ids | NOT_DAGS) == []
    counts = [(page, m.group(0)) for page, m in mentions(r"\b(?:the|all|its|our) (\w+) DAGs\b", re.I)
              if NUMBERS.get(m.group(1).lower(), len(ids)) != len(ids)]
    assert counts == [], f"there are {len(ids)} DAGs"


def test_the_dags_table_lists_each_dag_with_its_tasks_in_order(dags):
    rows = table_rows((REPO / "docs" / "airflow.md").read_text(), "The DAGs")

    assert sorted(rows) == sorted(dags["dags"])
    for dag_id, (tasks, *_rest) in rows.items():
        assert re.findall(r"`([^`]+)`", tasks) == dags["dags"][dag_id]["tasks"], dag_id


def test_each_dag_sections_task_table_names_its_tasks(dags):
    page = (REPO / "docs" / "airflow.md").read_text()
    checked = 0
    for dag_id, facts in dags["dags"].items():
        heading = f"The `{dag_id}` DAG"
        if f"\n## {heading}\n" not in page:
            continue
        section = page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
        if "\n| task |" not in section:
            continue
        rows = table_rows(page, heading)
        assert [name.split("[")[0] for name in rows] == facts["tasks"], dag_id
        checked += 1
    assert checked >= 1


def test_every_task_named_as_a_task_in_the_docs_exists(dags):
    tasks = {t for facts in dags["dags"].values() for t in facts["tasks"]}
    named = {(page, m.group(1)) for page, m in mentions(r"`([a-z_]+)(?:\[[^`]*\])?` (?:task|tasks)\b")}

    assert sorted((page, name) for page, name in named if name not in tasks and name not in dags["dags"]) == []


# --- params and defaults --------------------------------------------------------------------------------------------

def _params(dags: dict[str, Any], dag_id: str | None = None) -> dict[str, Any]:
    if dag_id is not None:
        return dags["dags"][dag_id]["params"]
    return {n: v for facts in dags["dags"].values() for n, v in facts["params"].items()}


def test_every_conf_in_the_docs_names_only_params_of_its_dag(dags):
    wrong = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            for conf in re.findall(r"(?:-c|--conf) '(\{.*?\})'", line):
                if conf == "{...}":
                    continue
                dag_id = next((d for d in dags["dags"] if d in line or d.replace("rbak_", "rbak ") in line), None)
                unknown = sorted(set(json.loads(conf)) - set(_params(dags, dag_id)))
                if unknown:
                    wrong.append((path.name, dag_id, unknown))
    assert wrong == []


def test_every_name_called_a_param_in_the_docs_is_a_param(dags):
    params = _params(dags)
    named = {(page, m.group(1)) for page, m in mentions(r"`([a-z_]+)` params?\b") if m.group(1) not in dags["dags"]}

    assert sorted((page, name) for page, name in named if name not in params) == []


def _bytes(stated: str) -> str:
    """``128 MiB`` as the param holds it (``134217728``); anything else as written."""
    found = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", stated)
    return str(int(found.group(1)) * 1024 ** ("KMG".index(found.group(2)[0]) + 1)) if found else stated


def test_every_default_stated_in_prose_is_the_codes(dags):
    from airflow_rbak.provider import CONFIG_OPTIONS

    home = dags["home"]
    #: a param's defaults in the DAGs that have it (``backup_id``: ``null`` to back up, ``latest`` to restore)
    defaults: dict[str, set[str]] = {}
    for facts in dags["dags"].values():
        for name, value in facts["params"].items():
            defaults.setdefault(name, set()).add(documented_as(value, home))
    wrong = []
    for page, m in mentions(r"`(\[rbak\] )?([a-z_]+)`(?: param| option)? \(default:? `?([^`),;]+)`?"):
        option, name, stated = bool(m.group(1)), m.group(2), _bytes(m.group(3).strip())
        if " " in stated:
            continue  # a default in words ("one hour")
        if option or name in CONFIG_OPTIONS and name not in defaults:
            actual = {CONFIG_OPTIONS[name]["default"]}
        elif name in defaults:
            actual = defaults[name]
        else:
            continue
        if stated not in actual:
            wrong.append((page, name, stated, sorted(map(str, actual))))
    assert wrong == []


def test_the_five_params_you_need_are_params_with_their_defaults(dags):
    rows = table_rows((REPO / "docs" / "configuration.md").read_text(), "The five params you need")

    assert len(rows) == 5
    for name, (dag_ids, default, *_meaning) in rows.items():
        for dag_id in re.findall(r"`(rbak_[a-z]+)`", dag_ids):
            assert name in _params(dags, dag_id), (name, dag_id)
            stated = re.search(r"`([^`]*)`", default)
            assert stated and stated.group(1) == documented_as(_params(dags, dag_id)[name], dags["home"]), name


# --- exit codes -----------------------------------------------------------------------------------------------------

def _exit_rows() -> dict[str, list[str]]:
    return table_rows((REPO / "docs" / "operations.md").read_text(), CLI_SECTION)


def test_the_exit_code_table_is_what_rbak_help_says():
    from airflow_rbak.cli.main import build_parser

    epilog = build_parser().epilog or ""
    said = dict(re.findall(r"(\d) ([^,.]+)", epilog.split(":", 1)[1]))

    assert {code: cells[0] for code, cells in _exit_rows().items()} == said


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, str]:
    """What the table's examples name: an empty folder, a missing one, a backup with a damaged segment."""
    (tmp_path / "empty").mkdir()
    damaged = tmp_path / "damaged"
    shutil.copytree(REPO / "tests" / "compat" / "backups" / "v1" / "location", damaged)
    segment = damaged / "compat-full" / "queues" / "rbak-compat" / "orders" / "segment-0001.zst"
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF
    segment.write_bytes(bytes(data))
    return {"EMPTY": (tmp_path / "empty").as_uri(), "MISSING": (tmp_path / "missing").as_uri(),
            "DAMAGED": damaged.as_uri()}


def test_each_exit_code_example_exits_with_its_code(folders, capsys):
    from airflow_rbak.cli.main import main

    ran = 0
    for code, (_meaning, examples) in _exit_rows().items():
        for command in re.findall(r"`rbak ([^`]+)`", examples):
            argv = [folders.get(word, word) for word in command.split()]
            assert main(argv) == int(code), f"rbak {command}"
            capsys.readouterr()
            ran += 1
    assert ran >= 4


def test_every_exit_code_stated_outside_the_table_says_what_the_table_says():
    said = {code: cells[0] for code, cells in _exit_rows().items()}
    wrong = []
    for page, m in mentions(r"\bexit(?:s| code| status)?(?: with)? `?(\d)`?(?! ?%)", re.I):
        window = " ".join(prose(REPO / page)[max(0, m.start() - 160):m.end() + 160].split())
        if "| code |" in window or f"| `{m.group(1)}` |" in window:
            continue  # the table itself
        if m.group(1) not in said or said[m.group(1)].lower() not in window.lower():
            wrong.append((page, window.replace("\n", " ")[120:260]))
    assert wrong == [], "say the table's words beside an exit code: " + "; ".join(said[c] for c in sorted(said))


# --- files and tests the docs cite ----------------------------------------------------------------------------------

def test_every_file_and_test_the_docs_cite_exists():
    tests = {name for path in REPO.glob("tests/**/*.py") for name in re.findall(r"^\s*def (test_\w+)", path.read_text(), re.M)}
    test_files = {path.name for path in REPO.glob("tests/**/*.py")}
    bases = (REPO, REPO / "airflow_rbak", REPO / "tests", REPO / "docs")
    missing = []
    for path in DOCS:
        text = path.read_text()
        for cited in set(re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|sh|md|yml|toml))(?:::[^`]*)?`", text)):
            if not any((base / cited).exists() for base in bases):
                missing.append((path.name, cited))
        for name in set(re.findall(r"\b(test_\w+)\b", text)):
            if name not in tests and f"{name}.py" not in test_files and not name.endswith("_"):
                missing.append((path.name, name))
    assert sorted(missing) == []


def test_the_readmes_python_and_airflow_floors_and_install_extras_are_pyprojects():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    rows = {cells[0]: cells[1] for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| "))}
    airflow = next(r for r in project["optional-dependencies"]["airflow"] if r.startswith("apache-airflow>="))

    assert rows["Python"].startswith(project["requires-python"].removeprefix(">=") + "+")
    assert rows["Apache Airflow"].startswith(airflow.removeprefix("apache-airflow>=").split(",")[0] + "+")
    # the recommended S3 set-up (an aws connection) needs the amazon extra, and the install line gives it
    install = re.search(r"pip install '[^']*\[([a-z,]+)\]'", (REPO / "README.md").read_text())
    assert install and {"airflow", "spark", "amazon"} <= set(install.group(1).split(","))
