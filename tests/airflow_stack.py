"""A running Airflow on loopback: api-server, scheduler (LocalExecutor) and dag-processor, driven by its REST API.

``airflow dags test`` runs a DAG in one process and cannot wait for a person.
A Human-in-the-loop task needs the real thing: the scheduler parks it in
``awaiting_input``, the REST API takes the answer, the scheduler resumes it
(Airflow 3.3 needs no triggerer for that). Everything here waits by polling a
state against a deadline, never by sleeping for an assumed time.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import requests

from tests.dags.airflow_env import REPO, VENV_BIN, airflow_env, run

T = TypeVar("T")
#: Generous: the machine has 2 cores, shared with other test runs.
DEADLINE_S = 300.0
TERMINAL_RUN_STATES = ("success", "failed")
USER = "approver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what: str, probe: Callable[[], T | None], deadline_s: float = DEADLINE_S, every_s: float = 1.0) -> T:
    """``probe()`` until it returns something other than None; fails naming ``what`` after ``deadline_s``."""
    until = time.monotonic() + deadline_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > until:
            raise AssertionError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(every_s)


@dataclass
class AirflowStack:
    """One Airflow: its home, environment, REST base URL, its users' passwords, the approver's token and the
    processes it runs."""

    home: Path
    env: dict[str, str]
    url: str
    passwords: dict[str, str]
    token: str = ""
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def api(self, method: str, path: str, expect_ok: bool = True, as_user: str | None = None,
            **kwargs: Any) -> requests.Response:
        """A REST call (``/api/v2/...``) as the approver (or ``as_user``); raises with the response body on an error
        status."""
        token = self.token if as_user is None else self.token_of(as_user)
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        response = requests.request(method, f"{self.url}/api/v2/{path}", headers=headers, timeout=30, **kwargs)
        if expect_ok and response.status_code >= 400:
            raise AssertionError(f"{method} {path}: HTTP {response.status_code}: {response.text[:2000]}")
        return response

    def trigger(self, dag_id: str, conf: dict[str, Any], as_user: str | None = None) -> str:
        """Trigger a run through ``POST /dags/{dag_id}/dagRuns`` (as the approver, or ``as_user``); its run id."""
        return self.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf},
                        as_user=as_user).json()["dag_run_id"]

    def run_path(self, dag_id: str, run_id: str) -> str:
        return f"dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """``task_id[map_index]`` -> state of every task instance of the run."""
        found = self.api("GET", f"{self.run_path(dag_id, run_id)}/taskInstances").json()["task_instances"]
        return {f"{t['task_id']}[{t['map_index']}]": t["state"] for t in found}

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...]) -> str:
        """Poll until the task reaches one of ``states``; fails at once if the run ends first."""
        def probe() -> str | None:
            tasks = self.task_states(dag_id, run_id)
            if tasks.get(f"{task_id}[-1]") in states:
                return tasks[f"{task_id}[-1]"]
            run_state = self.api("GET", self.run_path(dag_id, run_id)).json()["state"]
            assert run_state not in TERMINAL_RUN_STATES, f"run ended {run_state} first: {tasks}\n{self.logs_tail()}"
            return None
        return poll(f"{dag_id} {run_id}: {task_id} in {states}", probe)

    def wait_until_parked(self, dag_id: str, run_id: str, task_id: str, times: int = 1) -> None:
        """Poll until the scheduler has taken in that the task's worker parked it in ``awaiting_input``.

        Airflow 3.3.2 races here: the worker that parks the task reports "success" to the executor, and an answer
        that resumes and queues the task before the scheduler has processed that report makes the scheduler mark the
        task failed ("state changed externally"). Only the scheduler's log says when it has processed it, so the
        test waits for that line before it answers (a person answers seconds later anyway). A task that asks again
        parks again: ``times`` is how many parkings to wait for.
        """
        needle = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id}, map_index=-1"

        def probe() -> bool | None:
            lines = (self.home / "scheduler.log").read_text(errors="replace").splitlines()
            parked = sum(1 for line in lines if needle in line and "state=awaiting_input" in line)
            return True if parked >= times else None
        poll(f"the scheduler to see {task_id} of {run_id} parked {times} time(s)", probe)

    def wait_for_run(self, dag_id: str, run_id: str, deadline_s: float = DEADLINE_S) -> str:
        """Poll until the run ends; its final state."""
        def probe() -> str | None:
            state = self.api("GET", self.run_path(dag_id, run_id)).json()["state"]
            return state if state in TERMINAL_RUN_STATES else None
        return poll(f"{dag_id} {run_id} to end", probe, deadline_s, every_s=2)

    def task_times(self, dag_id: str, run_id: str) -> dict[str, tuple[float, float]]:
        """Each finished task instance's (start, end) in epoch seconds, by ``task_id[map_index]``."""
        found = self.api("GET", f"{self.run_path(dag_id, run_id)}/taskInstances", params={"limit": 1000}).json()
        return {f"{t['task_id']}[{t['map_index']}]": (_epoch(t["start_date"]), _epoch(t["end_date"]))
                for t in found["task_instances"] if t["start_date"] and t["end_date"]}

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The task's log (its latest try) as text."""
        path = f"{self.run_path(dag_id, run_id)}/taskInstances/{task_id}"
        try_number = self.api("GET", path).json()["try_number"]
        found = self.api("GET", f"{path}/logs/{try_number}", params={"full_content": "true"},
                         headers={"Accept": "application/json"}).json()
        return json.dumps(found["content"])

    def logs_tail(self, chars: int = 3000) -> str:
        """The end of each process's output, for a failure message."""
        return "\n".join(f"--- {name}\n{(self.home / f'{name}.log').read_text(errors='replace')[-chars:]}"
                         for name in self.processes)

    def start(self, only_api_server: bool = False) -> None:
        """Migrate the database, start the three processes (or the api-server alone, over DAGs serialized here
        once), and wait until the API issues the approver's token."""
        setup = [["db", "migrate"], *([["dags", "reserialize"]] if only_api_server else [])]
        for args in setup:
            done = run([str(VENV_BIN / "airflow"), *args], self.env, timeout=600)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        port = self.url.rsplit(":", 1)[1]
        commands = {"api-server": ["api-server", "--host", "127.0.0.1", "--port", port, "--workers", "1"],
                    "scheduler": ["scheduler"], "dag-processor": ["dag-processor"]}
        for name, args in list(commands.items())[:1 if only_api_server else 3]:
            with open(self.home / f"{name}.log", "wb") as out:
                # its own process group, so that stop() ends the workers it spawns too
                self.processes[name] = subprocess.Popen([str(VENV_BIN / "airflow"), *args], env=self.env, cwd=REPO,
                                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.token = poll("the api-server to issue a token", self._login, every_s=2)

    def _login(self) -> str | None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"airflow {name} exited {process.returncode}\n{self.logs_tail()}"
        try:
            return self.token_of(USER)
        except requests.ConnectionError:
            return None

    def token_of(self, user: str) -> str | None:
        """A bearer token for one of the stack's users (None while the api-server does not issue one yet)."""
        response = requests.post(f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]},
                                 timeout=10)
        return response.json()["access_token"] if response.status_code == 201 else None

    def wait_for_dag(self, dag_id: str) -> None:
        """Poll until the dag-processor has parsed ``dag_id``; then unpause it (DAGs start paused)."""
        def probe() -> bool | None:
            return True if self.api("GET", f"dags/{dag_id}", expect_ok=False).status_code == 200 else None
        poll(f"the dag-processor to parse {dag_id}", probe, every_s=2)
        self.api("PATCH", f"dags/{dag_id}", json={"is_paused": False})

    def stop(self) -> None:
        """SIGTERM to each process group this stack started, then SIGKILL to what is left after 30 s."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def _epoch(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def airflow_stack(home: Path, roles: dict[str, str] | None = None, **extra: str) -> AirflowStack:
    """A stack (not started) with its own home, SQLite database, loopback port and secrets; its users are an admin,
    the approver, and ``roles`` (user name -> SimpleAuthManager role), each with a random password."""
    port, roles = free_port(), {USER: "admin", **(roles or {})}
    passwords = {user: secrets.token_urlsafe(16) for user in roles}
    (home / "passwords.json").write_text(json.dumps(passwords))
    url = f"http://127.0.0.1:{port}"
    env = airflow_env(home, **{
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in roles.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        **extra,
    })
    return AirflowStack(home=home, env=env, url=url, passwords=passwords)


@contextmanager
def running_stack(home: Path, roles: dict[str, str], dag_id: str) -> Iterator[AirflowStack]:
    """A started stack (``airflow_stack``'s users and ``roles``) with ``dag_id`` parsed and unpaused; stopped after."""
    running = airflow_stack(home, roles)
    try:
        running.start()
        running.wait_for_dag(dag_id)
        yield running
    finally:
        running.stop()


def awaiting_approval(stack: AirflowStack, dag_id: str, run_id: str) -> tuple[str, dict]:
    """Wait until the run's ``approve`` task waits for an answer; its Human-in-the-loop path and request."""
    stack.wait_for_task(dag_id, run_id, "approve", ("awaiting_input",))
    stack.wait_until_parked(dag_id, run_id, "approve")
    path = f"{stack.run_path(dag_id, run_id)}/taskInstances/approve/-1/hitlDetails"
    return path, stack.api("GET", path).json()
