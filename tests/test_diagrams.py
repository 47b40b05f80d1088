"""The docs' diagrams are their sources rendered: docs/diagrams/*.dot (Graphviz) beside the SVG ``make docs`` renders
from each (scripts/diagrams.py). A source changed without a new render fails here, and so does a generated source
(the backup DAG's graph) that no longer matches the DAG, or a restore flow whose tasks are not rbak_restore's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

from tests.dags.airflow_env import REPO, airflow_env, run

_SPEC = importlib.util.spec_from_file_location("rbak_diagrams", REPO / "scripts" / "diagrams.py")
assert _SPEC is not None and _SPEC.loader is not None
diagrams = importlib.util.module_from_spec(_SPEC)  # scripts/diagrams.py, the one place that renders
_SPEC.loader.exec_module(diagrams)

DOCS = REPO / "docs"
SOURCES = sorted(diagrams.DIAGRAMS.glob("*.dot"))
NO_GRAPHVIZ = shutil.which("dot") is None


def test_there_are_the_four_diagrams_each_with_its_rendered_svg():
    assert [s.name for s in SOURCES] == ["backup-dag.dot", "deployment.dot", "restore-flow.dot", "stream-chains.dot"]
    assert sorted(p.name for p in diagrams.DIAGRAMS.glob("*.svg")) == [s.with_suffix(".svg").name for s in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_each_svg_was_rendered_from_its_source_as_it_is_now(source):
    # (needs no Graphviz: the render records the digest of the source it was made from)
    assert diagrams.recorded_digest(source.with_suffix(".svg").read_text()) == diagrams.source_digest(
        source.read_bytes()), f"{source.name} changed since it was rendered: run make docs"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_each_doc_shows_each_diagram(source):
    pages = "\n".join(p.read_text() for p in [*DOCS.glob("*.md"), REPO / "README.md"])
    assert f"](diagrams/{source.with_suffix('.svg').name})" in pages


def test_a_fresh_render_of_every_source_and_of_the_backup_dag_equals_what_is_committed(tmp_path):
    if NO_GRAPHVIZ:  # skipped without Graphviz, but failed under RBAK_CI (CI installs it)
        reason = "graphviz is not installed (apt-get install graphviz, as scripts/system-deps.sh test does)"
        if os.environ.get("RBAK_CI") or os.environ.get("CI"):
            pytest.fail(f"{reason} (RBAK_CI: the diagrams must be checked)", pytrace=False)
        pytest.skip(reason)
    # scripts/diagrams.py --check renders every source anew, generates backup-dag.dot from the DAG as Airflow loads
    # it (in a child process with its own AIRFLOW_HOME) and holds restore-flow.dot's task nodes and their arrows to
    # rbak_restore's tasks and dependencies, writing nothing
    done = run([sys.executable, str(REPO / "scripts" / "diagrams.py"), "--check"], airflow_env(tmp_path), timeout=300)
    found = [line for line in done.stdout.splitlines() if line.startswith(("stale: ", "wrong: "))]
    assert (done.returncode, found) == (0, []), (done.stdout + done.stderr)[-3000:]
