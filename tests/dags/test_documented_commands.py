"""Every command the README and the quick start show a user is run here, as written, or names the test that runs it.

The demo (what ``make demo`` runs once the venv is set up) runs against the suite's broker in a folder of its own;
the commands shown for looking at its backup then run in that folder, the README's ``rbak`` lines against the
demo's location, and the "install into your Airflow" lines in an Airflow of their own. A command line the docs
gain that this table does not know fails the test, so the docs cannot drift from what is run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.dags.airflow_env import REPO, VENV_BIN, airflow_env, run

DOCS = (REPO / "README.md", REPO / "docs" / "quickstart.md")

#: Commands this test does not run, and what does.
RUN_ELSEWHERE = {
    "make test": "the suite itself (CI runs `make test`)",
    "pip install": "the suite's venv is that install (`make setup`); tests/deployed runs the built wheel",
    "docker-compose": "tests/test_compose.py validates the file (no Docker engine on the test machines)",
    "RBAK_RABBITMQ_VERSION=4.3 scripts/rabbitmq.sh": "the rabbitmq43 part of `make test`: its broker fixture starts a "
                                                     "4.3 node, runs rabbitmqctl in it and stops it through "
                                                     "scripts/rabbitmq.sh, and reads its version (tests/broker/conftest.py)",
}
#: Commands run here, by their first words.
RUN_HERE = ("make demo", "rbak ", ".venv/bin/rbak ", "cp ", "airflow connections add", "airflow providers list",
            "export ")


def shell_commands(doc: Path) -> list[str]:
    """The command lines of a document's ``sh``/``bash`` blocks: continuations joined, comments dropped."""
    commands, block = [], None
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            block = [] if block is None and line[3:].strip() in ("sh", "bash") else None
            continue
        if block is None:
            continue
        text = re.sub(r"\s+#\s.*$", "", line).strip()
        if commands and commands[-1].endswith("\\"):
            commands[-1] = commands[-1][:-1].rstrip() + " " + text
        elif text and not text.startswith("#"):
            commands.append(text)
    return commands


def how_run(command: str) -> str:
    for start, reason in RUN_ELSEWHERE.items():
        if command.startswith(start):
            return reason
    if command.startswith(RUN_HERE):
        return "here"
    raise AssertionError(f"a documented command no test runs: {command!r}")


def test_every_documented_command_is_run_by_a_test():
    commands = [c for doc in DOCS for c in shell_commands(doc)]

    assert {"make demo", "make test"} <= set(commands)
    assert {how_run(c) for c in commands} >= {"here"}


@pytest.fixture(scope="module")
def demo(broker, tmp_path_factory):
    """``scripts/demo.py`` (the rest of ``make demo``) against the suite's broker: its folder and backup id."""
    root = tmp_path_factory.mktemp("demo")
    (root / ".venv").symlink_to(VENV_BIN.parent)
    c = broker.connection
    url = (f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/"
           f"?management_port={c.management_port}&stream_port={c.stream_port}")
    done = subprocess.run([str(VENV_BIN / "python"), str(REPO / "scripts" / "demo.py")], cwd=root, text=True,
                          capture_output=True, timeout=900,
                          env=airflow_env(root / "unused", RABBITMQ_URL=url, RBAK_DEMO_DIR=str(root / ".run" / "demo")))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "result: backup and restore counts match" in done.stdout
    return root, re.search(r"--backup-id (demo-\S+)", done.stdout).group(1)


def bash(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300)


def test_the_quick_start_shows_the_demo_and_its_inspection_commands_work(demo):
    root, backup_id = demo
    env = airflow_env(root / "unused")
    looks = [c for c in shell_commands(REPO / "docs" / "quickstart.md") if c.startswith(".venv/bin/rbak ")]

    assert len(looks) >= 2
    for command in looks:
        done = bash(command.replace("<id>", backup_id), root, env)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert "demo-" in done.stdout


def test_the_readme_rbak_commands_work_on_a_backup(demo):
    root, _ = demo
    location = (root / ".run" / "demo" / "backups").as_uri()
    env = airflow_env(root / "unused", AIRFLOW__RBAK__STORAGE_URL=location)  # for a command shown without --path
    shown = [c for c in shell_commands(REPO / "README.md") if c.startswith("rbak ")]
    copy_to = (root / ".run" / "demo" / "second-copy").as_uri()  # the README's bucket, here a folder

    assert {c.split()[1] for c in shown} >= {"list", "describe", "validate"}
    for command in shown:
        here = command.replace("file:///var/backups/rabbit", location).replace("s3://dr-backups/rabbit", copy_to)
        done = bash(here, root, env)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_installing_into_an_existing_airflow_works_as_shown(doc, tmp_path):
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    env = airflow_env(home)
    del env["AIRFLOW_CONN_RABBITMQ_DEFAULT"]  # the documented `connections add` creates it
    assert run([str(VENV_BIN / "airflow"), "db", "migrate"], env).returncode == 0
    steps = [c.replace("/path/to/airflow-rbak", str(REPO)) for c in shell_commands(doc)
             if c.startswith(("cp ", "airflow connections add", "airflow providers list", "export "))]

    done = bash("\n".join(steps), tmp_path, env)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in (home / "dags").iterdir()) == sorted(p.name for p in (REPO / "dags").glob("rbak_*.py"))
    got = run([str(VENV_BIN / "airflow"), "connections", "get", "rabbitmq_default", "-o", "json"], env)
    assert got.returncode == 0 and '"conn_type": "rabbitmq"' in got.stdout.replace("'", '"'), got.stdout + got.stderr
