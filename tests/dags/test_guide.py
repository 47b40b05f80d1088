"""docs/guide.md, run literally: its ``sh`` blocks, in order, in one bash session, on a new Airflow home and the
private RabbitMQ node, through the first backup, the first drill and the first approved restore.

What the test provides is what the guide leaves to the reader: the values of its first block (host, ports, folders,
the vhost with messages to back up) as environment variables, and ``rabbitmqctl`` on the PATH (a wrapper that runs
``scripts/rabbitmq.sh ctl`` against the node). The install block is the suite's venv, so it is skipped, as its marker
says. Two differences from a reader's run, both values of the first block: the schedules are ``none`` (an unpaused
scheduled DAG starts its latest run at once, and a second backup or drill would race this one for ``latest``), and
tasks do not retry (``[rbak] task_retries`` 0: a failing task fails the test at once, not after minutes of backoff).

Before the block that approves the restore, the test waits until the scheduler has taken in that ``approve`` parked
(docs/airflow.md#approval: Airflow 3.3.2 loses an answer given in that instant; a person answers seconds later).
Then it checks the results from outside the session: the backup listed, complete and valid deep, its location
encrypted; the drill passed; the restore triggered by ``requester``, approved by ``approver``, and every message of
the source queues in the restore's vhost, byte for byte with every property and header.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest
import requests

from airflow_rbak.broker.pika_connection import ConfirmChannel, blocking_connection
from airflow_rbak.storage.encrypted import MAGIC, MARKER_KEY
from tests.airflow_stack import free_port, poll
from tests.broker.conftest import SCRIPT, behaviour  # noqa: F401 - fixture
from tests.dags.airflow_env import REPO, VENV_BIN, runs_facts
from tests.restore.helpers import PROPERTY_NAMES, body_of, declare, expected_views, props_of, read_queue

GUIDE = REPO / "docs" / "guide.md"
SKIP_MARK = re.compile(r"<!-- guide-test: skip \((?P<reason>.+)\) -->")
#: At most this many blocks may be left out, each with its reason.
MAX_SKIPPED = 2
#: The source queues the guide backs up, drills and restores.
QUEUES = {"orders": ("classic", 40), "payments": ("quorum", 25)}
BROKER_USERS = ("rbak-backup", "rbak-restore", "rbak-drill")
#: The node's settings scripts/rabbitmq.sh reads, passed to the rabbitmqctl wrapper.
NODE_SETTINGS = ("RBAK_RABBITMQ_VERSION", "RBAK_AMQP_PORT", "RBAK_MGMT_PORT", "RBAK_STREAM_PORT", "RBAK_DIST_PORT",
                 "RBAK_RABBIT_NODE", "RBAK_RABBIT_DIR", "RBAK_EPMD_PORT", "RBAK_CHROOT_CACHE", "RBAK_DEBIAN_MIRROR")
#: The longest one block may take (the backup, drill and restore blocks wait for their runs up to 20 minutes).
BLOCK_DEADLINE_S = 1500.0


@dataclass(frozen=True)
class Block:
    """One ``sh`` block of the guide: its place, the step it belongs to, its text, and why it is not run (or None)."""

    number: int
    step: str
    text: str
    skipped: str | None


def guide_blocks(page: str) -> list[Block]:
    """The page's ``sh`` blocks in order; a block right after a ``guide-test: skip (reason)`` comment is skipped."""
    blocks: list[Block] = []
    step, fence, body, reason = "", None, [], None
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if fence is not None:
            if line.startswith("```"):
                if fence == "sh":
                    blocks.append(Block(len(blocks) + 1, step, "\n".join(body) + "\n", reason))
                fence = None
            else:
                body.append(line)
            continue
        if line.startswith("## "):
            step = line[3:]
        elif line.startswith("```"):
            fence, body = line[3:].strip(), []
            before = next((b.strip() for b in reversed(lines[:i]) if b.strip()), "")
            found = SKIP_MARK.fullmatch(before)
            reason = found.group("reason") if found else None
        elif SKIP_MARK.search(line):
            after = next((a for a in lines[i + 1:] if a.strip()), "")
            assert after.startswith("```sh"), f"a skip marker not right before an sh block: {line!r}"
    assert fence is None, "the page ends inside a code block"
    return blocks


class Session:
    """One bash session (``set -euo pipefail``) that runs blocks one at a time, in its own process group, so that
    what the guide starts in the background (Airflow's processes) ends with it."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.log = workdir / "session.log"
        with open(self.log, "wb") as out:
            self.bash = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=out,
                                         stderr=subprocess.STDOUT, env=env, cwd=workdir, start_new_session=True)
        self._send("set -euo pipefail\n")

    def _send(self, text: str) -> None:
        assert self.bash.stdin is not None
        self.bash.stdin.write(text.encode())
        self.bash.stdin.flush()

    def run(self, block: Block) -> float:
        """Source the block (stdin from /dev/null, so no command reads the session's own input); its duration."""
        script, done = self.workdir / f"block-{block.number:02d}.sh", self.workdir / f"block-{block.number:02d}.done"
        script.write_text(block.text)
        with open(self.log, "a") as out:
            out.write(f"\n### block {block.number} ({block.step})\n")
        started = time.monotonic()
        self._send(f"source {shlex.quote(str(script))} </dev/null\ntouch {shlex.quote(str(done))}\n")

        def finished() -> bool | None:
            assert self.bash.poll() is None, (f"block {block.number} ({block.step}) failed: the session exited "
                                              f"{self.bash.returncode}\n{block.text}\n--- its output:\n{self.tail()}")
            return True if done.exists() else None
        poll(f"block {block.number} ({block.step})", finished, BLOCK_DEADLINE_S, every_s=0.5)
        return time.monotonic() - started

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM to the session's process group, SIGKILL to what is left after 30 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.bash.pid, sig)
            except ProcessLookupError:
                return
            until = time.monotonic() + 30
            while time.monotonic() < until:
                try:
                    os.killpg(self.bash.pid, 0)
                except ProcessLookupError:
                    self.bash.wait(timeout=30)
                    return
                time.sleep(0.5)
        self.bash.wait(timeout=30)


def rabbitmqctl_on_path(bin_dir: Path) -> None:
    """``rabbitmqctl`` as the guide calls it: scripts/rabbitmq.sh ctl with the private node's settings (and the PATH
    without this wrapper, where the script finds the real one)."""
    settings = " ".join(f"{name}={shlex.quote(os.environ[name])}" for name in NODE_SETTINGS if name in os.environ)
    settings += f" PATH={shlex.quote(os.environ['PATH'])}"
    wrapper = bin_dir / "rabbitmqctl"
    wrapper.write_text(f'#!/bin/sh\nexec env {settings} {shlex.quote(str(SCRIPT))} ctl "$@"\n')
    wrapper.chmod(0o755)


def message(i: int) -> pika.BasicProperties:
    """Message ``i``'s properties: every one set and headers of every type, without ``user_id`` (RabbitMQ refuses a
    publish whose ``user_id`` is not the publishing user's, and the restore and drill users are not the seeder)."""
    props = props_of(i)
    props.user_id = None
    return props


def seed(connection: Any, vhost: str) -> None:
    """The source queues, each with its messages, every publish confirmed."""
    declare(connection, vhost, {name: queue_type for name, (queue_type, _) in QUEUES.items()})
    with blocking_connection(connection.pika_parameters(vhost)) as conn:
        acked: set[int] = set()

        def on_confirm(frame: Any) -> None:
            tag = frame.method.delivery_tag
            acked.update(range(1, tag + 1) if frame.method.multiple else (tag,))

        channel, sent = ConfirmChannel(conn, on_confirm), 0
        for name, (_, count) in QUEUES.items():
            for i in range(count):
                channel.publish("", name, body_of(i, 300), message(i))
            sent += count
        until = time.monotonic() + 60
        while len(acked) < sent and time.monotonic() < until:
            conn.process_data_events(time_limit=0.05)
        assert len(acked) == sent


def expected(count: int, queue_type: str, behaviour: Any) -> list[tuple]:  # noqa: F811 - the fixture's value
    """The messages as the broker delivers them after a restore: as published, ``user_id`` unset."""
    at = PROPERTY_NAMES.index("user_id")
    return [(body, props[:at] + (None,) + props[at + 1:], headers)
            for body, props, headers in expected_views(count, queue_type, behaviour)]


def session_env(workdir: Path, settings: dict[str, str]) -> dict[str, str]:
    """The session's environment: the machine's, without the suite's Airflow, rbak and cloud settings; the guide's
    values; the venv (this checkout first on the import path: the install) and the rabbitmqctl wrapper on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RBAK_", "AWS_", "PYTHON"))}
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    rabbitmqctl_on_path(bin_dir)
    env.update(settings, PATH=os.pathsep.join([str(bin_dir), str(VENV_BIN), os.environ["PATH"]]),
               PYTHONPATH=str(REPO), AIRFLOW__RBAK__TASK_RETRIES="0")
    return env


def configured(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the settings file the guide wrote loaded, as the guide loads it."""
    done = subprocess.run(["bash", "-c", 'set -a; . "$AIRFLOW_HOME/airflow.env"; exec python -c '
                                         '"import json, os; print(json.dumps(dict(os.environ)))"'],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def wait_until_parked(home: Path, block: Block) -> None:
    """Until the scheduler has seen ``approve`` of the block's run parked in ``awaiting_input``."""
    run_id = re.search(r"dagRuns/([^/]+)/taskInstances/approve/", block.text).group(1)
    needle = f"TaskInstance Finished: dag_id=rbak_restore, task_id=approve, run_id={run_id}, map_index=-1"

    def parked() -> bool | None:
        log = (home / "scheduler.log").read_text(errors="replace")
        return True if any(needle in line and "state=awaiting_input" in line for line in log.splitlines()) else None
    poll(f"the scheduler to see approve of {run_id} parked", parked)


_TRIGGERED_BY = r"""
import sys
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session

with create_session() as s:
    print(s.query(DagRun.triggering_user_name).filter(DagRun.dag_id == sys.argv[1], DagRun.run_id == sys.argv[2]).scalar())
"""


def triggered_by(env: dict[str, str], dag_id: str, run_id: str) -> str:
    """The user who triggered the run, as Airflow recorded it."""
    done = subprocess.run([str(VENV_BIN / "python"), "-c", _TRIGGERED_BY, dag_id, run_id], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def rbak(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "rbak"), *args], env=env, capture_output=True, text=True, timeout=300)


def _delete(broker: Any, what: str) -> None:
    try:
        broker.api("DELETE", what)
    except requests.HTTPError as exc:
        if exc.response is None or exc.response.status_code != 404:
            raise


@pytest.fixture
def clean_broker(broker, vhost) -> Iterator[str]:
    """The broker without the guide's users (a run before may have left them), and the restore's vhost name; both
    removed again afterwards, with any scratch vhost of the guide's drill."""
    restore_vhost = f"{vhost}-restored"

    def clean() -> None:
        for user in BROKER_USERS:
            _delete(broker, f"users/{user}")
        for name in [restore_vhost, *(v["name"] for v in broker.api("GET", "vhosts").json()
                                       if v["name"].startswith("rbak-drill-first-drill"))]:
            _delete(broker, f"vhosts/{quote(name, safe='')}")
    clean()
    yield restore_vhost
    clean()


def test_the_guide_has_few_skipped_blocks_each_with_its_reason():
    blocks = guide_blocks(GUIDE.read_text())
    skipped = [b for b in blocks if b.skipped is not None]

    assert len(blocks) >= 10 and len(skipped) <= MAX_SKIPPED, [b.step for b in skipped]
    assert all(len(b.skipped.strip()) >= 10 for b in skipped), [b.skipped for b in skipped]
    # what differs per deployment is set in the first block, each value overridable from the environment
    first = blocks[0].text
    for name in ("RABBIT_HOST", "RABBIT_AMQP_PORT", "AIRFLOW_HOME", "AIRFLOW_PORT", "BACKUP_DIR", "BACKUP_PASSWORD"):
        assert re.search(rf'^: "\${{{name}:=[^}}]+}}"', first, re.M), name


@pytest.mark.broker
def test_the_guide_run_literally_backs_up_drills_and_restores_with_a_second_persons_approval(
        broker, vhost, clean_broker, behaviour, tmp_path):  # noqa: F811
    if os.environ.get("RBAK_TEST_AMQP_URL"):
        pytest.skip("the guide runs rabbitmqctl: it needs the private node, not an external broker")
    # Given the broker's node with a vhost of messages to back up, and nothing else of this deployment
    seed(broker.connection, vhost)
    c, home, backups = broker.connection, tmp_path / "airflow", tmp_path / "backups"
    env = session_env(tmp_path, {
        "RBAK_SOURCE": str(REPO), "AIRFLOW_HOME": str(home), "AIRFLOW_PORT": str(free_port()), "RABBIT_HOST": c.host,
        "RABBIT_AMQP_PORT": str(c.amqp_port), "RABBIT_MGMT_PORT": str(c.management_port),
        "RABBIT_STREAM_PORT": str(c.stream_port), "RABBIT_VHOST": vhost, "RESTORE_VHOST": clean_broker,
        "BACKUP_DIR": str(backups), "BACKUP_SCHEDULE": "none", "DRILL_SCHEDULE": "none"})
    blocks = guide_blocks(GUIDE.read_text())

    # When every block of the guide runs in order in one bash session
    session, took = Session(tmp_path, env), {}
    try:
        for block in blocks:
            if block.skipped is not None:
                continue
            if "PATCH" in block.text and "/taskInstances/approve/" in block.text:
                wait_until_parked(home, block)
            took[block.number] = round(session.run(block))
    finally:
        output = session.tail(20000)
        session.stop()
    print(f"guide blocks: {took} s\n{output}")

    # Then the backup is listed as complete and valid deep, in an encrypted location
    settings = configured(env)
    keys = json.loads(settings["AIRFLOW_CONN_RBAK_ENCRYPTION"])["password"]
    plain = {**env, "RBAK_ENCRYPTION_KEYS": keys}
    listed = rbak(plain, "--format", "json", "list", "--path", backups.as_uri())
    assert listed.returncode == 0, listed.stderr
    facts = runs_facts(settings, "rbak_backup", "rbak_drill", "rbak_restore")
    assert facts["rbak_backup"]["state"] == "success", facts["rbak_backup"]["tasks"]
    backup_id = facts["rbak_backup"]["xcom"]["finalize[-1].return_value"]["backup_id"]
    assert backup_id in listed.stdout and "complete" in listed.stdout, listed.stdout
    valid = rbak(plain, "validate", "--deep", "--path", backups.as_uri(), "--backup-id", backup_id)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    stored = [p for p in backups.rglob("*") if p.is_file() and p.name != MARKER_KEY]
    assert (backups / MARKER_KEY).exists() and any("segment-" in p.name for p in stored)
    assert all(p.read_bytes().startswith(MAGIC) for p in stored)

    # and the drill passed: every message restored into a scratch vhost equal to the backup, the vhost deleted
    drill = facts["rbak_drill"]
    assert drill["state"] == "success", drill["tasks"]
    report = drill["xcom"]["drill[-1].return_value"]
    total = sum(count for _, count in QUEUES.values())
    assert report["passed"] and report["backup_id"] == backup_id and report["compared"] == total
    assert report["deleted_vhosts"] == report["scratch_vhosts"] != []
    assert not [v for v in broker.api("GET", "vhosts").json() if v["name"] in report["scratch_vhosts"]]

    # and the restore was asked for by one user and approved by another, and published every message
    restore = facts["rbak_restore"]
    assert restore["state"] == "success", restore["tasks"]
    assert restore["xcom"]["approve[-1].return_value"]["approved_by"] == "approver"
    assert restore["xcom"]["report[-1].return_value"]["published"] == total
    assert triggered_by(settings, "rbak_restore", "first-restore") == "requester"

    # and the restore's vhost holds every message of the source queues, in order, byte for byte
    broker.api("PUT", f"permissions/{quote(clean_broker, safe='')}/{c.username}",
               json={"configure": ".*", "write": ".*", "read": ".*"})
    for name, (queue_type, count) in QUEUES.items():
        assert read_queue(c, clean_broker, name, queue_type, count) == expected(count, queue_type, behaviour), name
