"""Facts the docs' prose states about the code, checked against the code (tests/test_docs_truth.py does the same for
DAG and task names, params, defaults and exit codes).

Each test reads the statement from the page and the fact from where the code keeps it: the test script's parts, the
restore form's sections, the drill's scratch vhost names, the wait after a capture's return, which DAGs retry, which
``rbak`` commands take ``--path``, how the provider is installed, how many DAG files there are.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from types import SimpleNamespace

import pytest

from tests.dags.airflow_env import REPO, airflow_env, run
from tests.test_docs_truth import DOCS, NUMBERS, prose


def _page(name: str) -> str:
    return " ".join((REPO / name).read_text().split())


def _words(count: int) -> str:
    return next(word for word, n in NUMBERS.items() if n == count)


def test_the_test_suite_is_said_to_run_in_as_many_parts_as_scripts_test_sh_runs():
    script = (REPO / "scripts" / "test.sh").read_text()
    parts = ["engine", *re.search(r"^PARTS=\(([^)]*)\)", script, re.M).group(1).split()]
    assert sorted(parts) == sorted(set(re.findall(r"^(?:run_)?part (\w+) ", script, re.M)))  # each one runs

    stated = [(p.name, m.group(0)) for p in DOCS for m in re.finditer(r"\bin (\w+) parts\b", " ".join(p.read_text().split()))]
    assert stated, "no page says how many parts"
    assert [(page, said) for page, said in stated if said != f"in {_words(len(parts))} parts"] == []


def _assigned(path, name: str):
    """The literal value assigned to ``name`` at the top of a module (read without importing it)."""
    tree = ast.parse(path.read_text())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets))


def test_the_restore_forms_sections_are_named_as_the_dag_file_groups_them():
    sections = list(_assigned(REPO / "dags" / "rbak_restore.py", "SECTIONS"))
    said = re.search(r"`SECTIONS`: for the restore, ([^)]*)\)", _page("docs/airflow.md")).group(1)

    assert [s.strip() for s in re.split(r", ", said)] == sections


def test_the_drills_scratch_vhost_name_is_written_as_the_code_makes_it():
    from airflow_rbak.drill.scratch import PREFIX, scratch_names

    run_id = "manual__2026-11-27T16:51:21+00:00"
    name = scratch_names(run_id, 1)[0]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    assert name == f"{PREFIX}manual__2026-11-27T16_51_21_00_00-{digest}-0"

    forms = {m for p in DOCS for m in re.findall(r"`(rbak-drill-<[^`]*)`", p.read_text())}
    assert forms == {"rbak-drill-<run id>-<digest>-<n>"}


def test_the_wait_after_a_captures_return_is_stated_with_its_cap():
    from airflow_rbak.capture.queue_depth import QueueDepth

    waits = []
    for target in (0, 50_000, 10_000_000):
        depths = object.__new__(QueueDepth)  # only what settled reads
        depths.info = SimpleNamespace(queue_type="classic")
        depths.reaches = lambda expected, wait: waits.append(wait) or expected
        depths.settled(target)
    assert waits == [10.0, 60.0, 120.0]

    assert "up to 10 s plus 1 s per 1,000 messages, at most 120 s" in _page("docs/production.md")


def test_the_commands_said_to_take_no_path_are_those_without_one():
    from airflow_rbak.cli.main import build_parser

    def leaves(parser, prog):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            yield prog, parser
        for action in subs:
            for name, sub in action.choices.items():
                yield from leaves(sub, f"{prog} {name}".strip())

    without = {prog for prog, p in leaves(build_parser(), "") if not any("--path" in a.option_strings for a in p._actions)}
    said = re.search(r"Every command but (.*?) works on `--path`", _page("README.md")).group(1)
    assert set(re.findall(r"`([a-z ]+)`", said)) == without


def test_every_pip_install_of_the_provider_names_its_path():
    # airflow-rbak has no public package index entry: the README installs it from a path, and so must every page
    wrong = [(p.name, line.strip()) for p in DOCS for line in p.read_text().splitlines()
             if re.search(r"pip install (?:--upgrade )?['\"]?airflow-rbak\b", line)]
    assert wrong == []
    assert any("pip install '/path/to/airflow-rbak[" in p.read_text() for p in DOCS)


def test_the_number_of_dag_files_is_stated_right():
    files = sorted(REPO.joinpath("dags").glob("rbak_*.py"))
    stated = [(p.name, m.group(1)) for p in DOCS for m in re.finditer(r"\bthe (\w+) DAG files\b", prose(p))]
    assert [(page, n) for page, n in stated if NUMBERS.get(n) != len(files)] == []


_RETRIES = r'''
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({d: sorted({t.retries for t in dag.tasks}) for d, dag in bag.dags.items()}))
'''


@pytest.mark.filterwarnings("ignore")
def test_the_dags_said_to_retry_are_those_whose_tasks_retry(tmp_path):
    done = run([sys.executable, "-c", _RETRIES, str(REPO / "dags")], airflow_env(tmp_path, AIRFLOW__RBAK__TASK_RETRIES=""),
               timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    retries = json.loads(done.stdout.strip().splitlines()[-1])
    retrying = {d for d, r in retries.items() if r == [3]}
    assert {d for d, r in retries.items() if r == [0]} == set(retries) - retrying  # each DAG one way or the other

    said = re.search(r"every task of (.*?) retries transient failures", _page("docs/airflow.md")).group(1)
    assert set(re.findall(r"`(rbak_\w+)`", said)) == retrying
    never = re.search(r"`(rbak_\w+)` and `(rbak_\w+)` never retry", _page("docs/configuration.md")).groups()
    assert set(never) == set(retries) - retrying
