"""Only an approved plan runs: what a requester can do to a run through Airflow's REST API is no approval.

One Airflow (api-server, scheduler with the LocalExecutor, dag-processor; ``tests/airflow_stack.py``) with three
users: a requester and a colleague (SimpleAuthManager role ``user``, who may trigger runs, answer approvals, set task
states and clear tasks) and the admin. The requester triggers ``rbak_restore`` and then tries, as Airflow lets them,
to get a plan run that nobody approved: marking ``approve`` succeeded while it waits, clearing ``plan`` after a
colleague's approval with a newer backup in the location, and editing the plan's XCom. In each case the target broker
is read before and after (its vhosts, queues and their messages) and nothing has changed, and the run fails naming what
is missing or changed. The approved path still restores every message byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.airflow_stack import AirflowStack, awaiting_approval, poll, running_stack
from tests.conftest import S3_TEST_REGION
from tests.reliability.secrets import BrokerUser
from tests.restore.helpers import PROPERTY_NAMES, backup, declare, expected_views, publish, read_queue

pytestmark = pytest.mark.broker
DAG = "rbak_restore"
QUEUE, COUNT = "orders", 25
REQUESTER, COLLEAGUE = "requester", "colleague"
USER_ID = PROPERTY_NAMES.index("user_id")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, s3_server: str) -> Iterator[AirflowStack]:
    """One running Airflow for the module (with the loopback S3 credentials in its environment)."""
    with running_stack(tmp_path_factory.mktemp("airflow-authority"), {REQUESTER: "user", COLLEAGUE: "user"},
                       DAG) as running:
        yield running


@pytest.fixture(params=["file", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The backup location: a folder, or a fresh bucket on the loopback S3 server."""
    if request.param == "file":
        return (tmp_path / "b").as_uri()
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/backups?region={S3_TEST_REGION}&endpoint={server}&path_style=true"


def _target_state(broker, target: str) -> dict:
    """Everything a restore into ``target`` could change: whether the vhost exists, and each queue's messages (read
    by consuming them: a state read once is compared with the next, never read again; an emptied queue still shows
    whatever a refused step would have added)."""
    try:
        broker.api("GET", f"vhosts/{quote(target, safe='')}")
    except requests.HTTPError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return {"vhost": False}
        raise
    broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    queues = broker.api("GET", f"queues/{quote(target, safe='')}").json()
    return {"vhost": True, "queues": {q["name"]: read_queue(broker.connection, target, q["name"], "classic", 10_000)
                                      for q in queues}}


def _conf(stack: AirflowStack, broker, vhost: str, location: str, user: BrokerUser, target: str,
          backup_id: str = "authority-1") -> dict:
    """A backup of one classic queue of COUNT messages, the target broker as an Airflow connection, and the
    restore's conf (``backup_id: latest``) into ``target`` with definitions."""
    declare(broker.connection, vhost, {QUEUE: "classic"})
    publish(broker.connection, vhost, QUEUE, 0, COUNT)
    backup(broker.connection, location, backup_id, vhost)
    c, conn_id = broker.connection, f"rabbitmq_{target.replace('-', '_')}"
    stack.api("POST", "connections", json={
        "connection_id": conn_id, "conn_type": "rabbitmq", "host": c.host, "port": c.amqp_port, "login": user.name,
        "password": user.password, "extra": json.dumps({"management_port": c.management_port, "stream_port": c.stream_port})})
    return {"storage_url": location, "backup_id": "latest", "vhosts": [vhost], "vhost_map": {vhost: target},
            "rabbitmq_conn_id": conn_id, "restore_definitions": True, "strip_user_id": True}


def _clear(stack: AirflowStack, run_id: str, task_id: str, downstream: bool) -> None:
    """Clear one task of the run (and its downstream tasks) as the requester, as the grid's Clear does."""
    stack.api("POST", f"dags/{DAG}/clearTaskInstances", as_user=REQUESTER, json={
        "dry_run": False, "dag_run_id": run_id, "task_ids": [task_id], "include_downstream": downstream,
        "include_upstream": False, "only_failed": False, "reset_dag_runs": True})


def _ended_try(stack: AirflowStack, run_id: str, task_id: str, try_number: int) -> str:
    """Poll until the task's try ``try_number`` has ended (a cleared task runs again as the next try); its state."""
    path = f"{stack.run_path(DAG, run_id)}/taskInstances/{task_id}"

    def probe() -> str | None:
        found = stack.api("GET", path).json()
        ended = found["try_number"] >= try_number and found["state"] in ("success", "failed", "upstream_failed")
        return found["state"] if ended else None
    return poll(f"{task_id} try {try_number} of {run_id} to end", probe)


def _expected(behaviour) -> list:
    """The backup's messages as the target delivers them (headers sorted by key on 4.x), user_id stripped: they were
    published as another user."""
    return [(body, props[:USER_ID] + (None,) + props[USER_ID + 1:], headers)
            for body, props, headers in expected_views(COUNT, "classic", behaviour)]


def _cleanup(broker, target: str) -> None:
    try:
        broker.api("DELETE", f"vhosts/{quote(target, safe='')}")
    except requests.HTTPError:
        pass


def test_marking_approve_succeeded_is_no_approval_and_nothing_reaches_the_target(stack, broker, vhost, location,
                                                                                  secret_user):
    target = f"{vhost}-marked"
    conf = _conf(stack, broker, vhost, location, secret_user, target)
    try:
        # Given a restore the requester triggered, waiting for approval, and the target as it is
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)
        awaiting_approval(stack, DAG, run_id)[0]
        before = _target_state(broker, target)

        # When the requester marks approve as succeeded (Airflow lets whoever may edit the run do it)
        stack.api("PATCH", f"{stack.run_path(DAG, run_id)}/taskInstances/approve", as_user=REQUESTER,
                  json={"new_state": "success"})

        # Then the run fails at definitions, which found no approval, and publish and report never ran
        assert stack.wait_for_run(DAG, run_id) == "failed"
        states = stack.task_states(DAG, run_id)
        assert states["definitions[-1]"] == "failed" and states["report[-1]"] == "upstream_failed", states
        assert all(s in ("upstream_failed", None) for t, s in states.items() if t.startswith("publish")), states
        log = stack.task_log(DAG, run_id, "definitions")
        assert "holds no approval: the approve task left none (marked succeeded by hand" in log, log[-3000:]
        # and the target is exactly as it was
        assert _target_state(broker, target) == before == {"vhost": False}
    finally:
        _cleanup(broker, target)


def test_clearing_plan_after_an_approval_runs_no_plan_that_nobody_saw(stack, broker, behaviour, vhost, location,
                                                                      secret_user):
    target = f"{vhost}-cleared"
    conf = _conf(stack, broker, vhost, location, secret_user, target)
    try:
        # Given a restore approved by a colleague, which restored every message byte for byte
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)
        path = awaiting_approval(stack, DAG, run_id)[0]
        stack.api("PATCH", path, json={"chosen_options": ["Approve"]}, as_user=COLLEAGUE)
        assert stack.wait_for_run(DAG, run_id) == "success", stack.task_states(DAG, run_id)
        assert _target_state(broker, target) == {"vhost": True, "queues": {QUEUE: _expected(behaviour)}}
        # and a newer backup in the location, with a queue the approved plan did not hold
        declare(broker.connection, vhost, {"payments": "classic"})
        publish(broker.connection, vhost, "payments", 0, 7)
        broker.api("DELETE", f"queues/{quote(vhost, safe='')}/{QUEUE}")
        backup(broker.connection, location, "authority-2", vhost)
        before = _target_state(broker, target)

        # When the requester clears plan alone (it plans the newer backup), then definitions, publish and report
        _clear(stack, run_id, "plan", downstream=False)
        assert _ended_try(stack, run_id, "plan", 2) == "success"
        assert "restore plan for backup authority-2" in stack.task_log(DAG, run_id, "plan")
        # (the run ends again before the next clear: a clear while the scheduler is closing the run can be overtaken by
        # its closing, which would leave the cleared tasks unscheduled in a finished run)
        assert stack.wait_for_run(DAG, run_id) in ("success", "failed")
        _clear(stack, run_id, "definitions", downstream=True)
        assert _ended_try(stack, run_id, "definitions", 2) == "failed"

        # Then definitions refuses the plan the approval did not cover, and nothing more reaches the target
        assert stack.wait_for_run(DAG, run_id) == "failed"
        log = stack.task_log(DAG, run_id, "definitions")
        assert "the plan was made again after the approval: approved by colleague" in log, log[-3000:]
        assert "covers the plan of try 1" in log and "the plan now is of try 2" in log
        assert stack.task_states(DAG, run_id)["report[-1]"] == "upstream_failed"
        assert _target_state(broker, target) == before
    finally:
        _cleanup(broker, target)


def test_an_edited_plan_xcom_is_refused_and_nothing_reaches_the_target(stack, broker, vhost, location, secret_user):
    target = f"{vhost}-edited"
    conf = _conf(stack, broker, vhost, location, secret_user, target)
    try:
        # Given a restore waiting for approval
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)
        path = awaiting_approval(stack, DAG, run_id)[0]
        before = _target_state(broker, target)

        # When the requester edits the plan XCom to send the backup's queue elsewhere (the role `user` may edit a DAG's
        # XComs; the seal holds against anyone without the deployment's state key)
        entry = f"{stack.run_path(DAG, run_id)}/taskInstances/plan/xcomEntries/plan"
        sealed = stack.api("GET", entry, params={"deserialize": True}).json()["value"]
        sealed = json.loads(sealed) if isinstance(sealed, str) else sealed
        sealed["body"]["plan"]["queues"][0]["target_queue"] = "elsewhere"
        stack.api("PATCH", entry, as_user=REQUESTER, json={"value": sealed, "map_index": -1})
        # and a colleague approves what the request shows
        stack.api("PATCH", path, json={"chosen_options": ["Approve"]}, as_user=COLLEAGUE)

        # Then the run fails, naming the plan that is not the one sealed, and the target is exactly as it was
        assert stack.wait_for_run(DAG, run_id) == "failed"
        states = stack.task_states(DAG, run_id)
        failed = [t.split("[")[0] for t, s in states.items() if s == "failed"]
        assert failed and failed[0] in ("approve", "definitions"), states
        log = stack.task_log(DAG, run_id, failed[0])
        assert "is not one this deployment sealed for it (bad MAC" in log, log[-3000:]
        assert _target_state(broker, target) == before == {"vhost": False}
    finally:
        _cleanup(broker, target)
