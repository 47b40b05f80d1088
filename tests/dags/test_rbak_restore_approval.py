"""``rbak_restore`` waits for a person: triggered and answered through Airflow's REST API, on a running Airflow.

One Airflow (api-server, scheduler with the LocalExecutor, dag-processor; ``tests/airflow_stack.py``) serves
every case. Each has a requester trigger the DAG without ``skip_approval``, waits (by polling states) until the
``approve`` task is ``awaiting_input``, checks that nothing has reached the target yet, and answers through the
Human-in-the-loop endpoint as another user: approved, the run restores every message byte for byte; rejected, it
ends ``failed`` at ``approve`` saying so, and nothing was imported or published. The requester's own approval
does not count (``[rbak] approval_by_trigger_user_allowed`` is off by default): the task asks again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.airflow_stack import USER, AirflowStack, awaiting_approval, running_stack
from tests.reliability.secrets import BrokerUser, leaks
from tests.restore.helpers import backup, body_of, declare, message_view, props_of, publish, read_queue

DAG = "rbak_restore"
QUEUE, COUNT = "orders", 40
#: Who triggers the restores (the SimpleAuthManager role "user" may trigger runs and answer approvals), and a colleague.
REQUESTER, COLLEAGUE = "requester", "colleague"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """One running Airflow for the module, with ``rbak_restore`` parsed and unpaused."""
    with running_stack(tmp_path_factory.mktemp("airflow-stack"), {REQUESTER: "user", COLLEAGUE: "user"}, DAG) as running:
        yield running


def _vhost_exists(broker, name: str) -> bool:
    try:
        broker.api("GET", f"vhosts/{quote(name, safe='')}")
        return True
    except requests.HTTPError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return False
        raise


def _given_a_backup_and_a_connection(stack: AirflowStack, broker, vhost: str, tmp_path: Path, user: BrokerUser,
                                     target: str) -> dict:
    """A backup of one classic queue of COUNT messages, the target broker as an Airflow connection (made through
    the REST API, with the user's password), and the restore's conf into ``target`` with definitions."""
    declare(broker.connection, vhost, {QUEUE: "classic"})
    publish(broker.connection, vhost, QUEUE, 0, COUNT)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "approval-1", vhost)
    c, conn_id = broker.connection, f"rabbitmq_{target.replace('-', '_')}"
    stack.api("POST", "connections", json={
        "connection_id": conn_id, "conn_type": "rabbitmq", "host": c.host, "port": c.amqp_port, "login": user.name,
        "password": user.password, "extra": json.dumps({"management_port": c.management_port, "stream_port": c.stream_port})})
    # (the messages carry user_id guest, which RabbitMQ refuses from another user: strip_user_id)
    return {"storage_url": location, "backup_id": "latest", "vhosts": [vhost], "vhost_map": {vhost: target},
            "rabbitmq_conn_id": conn_id, "restore_definitions": True, "strip_user_id": True,
            "checkpoint_state": str(tmp_path / "restore.db")}


@pytest.mark.broker
def test_a_restore_waits_for_approval_and_publishes_only_after_it(stack, broker, vhost, tmp_path, secret_user):
    target = f"{vhost}-approved"
    conf = _given_a_backup_and_a_connection(stack, broker, vhost, tmp_path, secret_user, target)
    try:
        # When rbak_restore is triggered through the REST API without skip_approval
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)

        # Then it waits at approve, showing the plan (and no secret) to the approver
        path, request = awaiting_approval(stack, DAG, run_id)
        assert request["options"] == ["Approve", "Reject"] and request["defaults"] == ["Reject"]
        body = request["body"]
        assert f"`{vhost}/{QUEUE}`" in body and f"`{target}`" in body and f"| {COUNT} | no such queue | {COUNT} |" in body
        assert "`on_existing_messages: refuse`" in body and "`definitions_mode: missing`" in body
        assert f"`{conf['rabbitmq_conn_id']}`" in body and "cluster `rabbit" in body
        assert f"{COUNT} records into 1 queues" in request["subject"]
        assert leaks(secret_user, {"approval request": json.dumps(request)}) == []
        # and nothing has reached the target while it waits: no definitions imported (the vhost they create is
        # absent), so no queue and no message; nothing after approve has started
        assert not _vhost_exists(broker, target)
        states = stack.task_states(DAG, run_id)
        assert [t for t, s in states.items() if s is not None and t.split("[")[0] in ("definitions", "publish", "report")] == []

        # When the approver approves through the Human-in-the-loop endpoint
        answer = stack.api("PATCH", path, json={"chosen_options": ["Approve"]}).json()
        assert answer["responded_by"]["name"] == USER

        # Then the run succeeds and the target queue holds every message, in order, byte for byte
        assert stack.wait_for_run(DAG, run_id) == "success", stack.task_states(DAG, run_id)
        states = stack.task_states(DAG, run_id)
        assert {t: s for t, s in states.items() if not t.startswith("publish")} == {
            "plan[-1]": "success", "approve[-1]": "success", "definitions[-1]": "success", "report[-1]": "success"}
        broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        expected = []
        for i in range(COUNT):
            props = props_of(i)
            props.user_id = None  # stripped: published as another user
            expected.append(message_view(props, body_of(i, 300)))
        assert read_queue(broker.connection, target, QUEUE, "classic", COUNT) == expected
    finally:
        if _vhost_exists(broker, target):
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")


@pytest.mark.broker
def test_the_user_who_triggered_a_restore_cannot_approve_it_and_another_user_can(stack, broker, vhost, tmp_path,
                                                                                 secret_user):
    target = f"{vhost}-own"
    conf = _given_a_backup_and_a_connection(stack, broker, vhost, tmp_path, secret_user, target)
    try:
        # Given a restore the requester triggered, waiting for approval
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)
        path, _ = awaiting_approval(stack, DAG, run_id)

        # When the requester approves it themselves (Airflow lets any user with the permission answer)
        answer = stack.api("PATCH", path, json={"chosen_options": ["Approve"]}, as_user=REQUESTER).json()
        assert answer["responded_by"]["name"] == REQUESTER

        # Then the approval does not count: the task asks again, its answer cleared, and waits
        stack.wait_until_parked(DAG, run_id, "approve", times=2)
        request = stack.api("GET", path).json()
        assert (request["response_received"], request["chosen_options"], request["responded_by_user"]) == (
            False, None, None)
        assert stack.task_states(DAG, run_id)["approve[-1]"] == "awaiting_input"
        log = stack.task_log(DAG, run_id, "approve")
        assert f"{REQUESTER} triggered this run and may not approve it" in log, log[-3000:]
        # and nothing reached the target, nothing after approve started
        assert not _vhost_exists(broker, target)
        states = stack.task_states(DAG, run_id)
        assert [t for t, s in states.items() if s is not None and t.split("[")[0] in ("definitions", "publish", "report")] == []

        # When a colleague approves it
        answer = stack.api("PATCH", path, json={"chosen_options": ["Approve"]}, as_user=COLLEAGUE).json()
        assert answer["responded_by"]["name"] == COLLEAGUE

        # Then the run goes on and restores every message
        assert stack.wait_for_run(DAG, run_id) == "success", stack.task_states(DAG, run_id)
        broker.api("PUT", f"permissions/{quote(target, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        assert len(read_queue(broker.connection, target, QUEUE, "classic", COUNT)) == COUNT
    finally:
        if _vhost_exists(broker, target):
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")


@pytest.mark.broker
def test_a_rejected_restore_imports_and_publishes_nothing_and_says_it_was_rejected(stack, broker, vhost, tmp_path,
                                                                                    secret_user):
    target = f"{vhost}-rejected"
    conf = _given_a_backup_and_a_connection(stack, broker, vhost, tmp_path, secret_user, target)
    try:
        # Given a restore waiting for approval
        run_id = stack.trigger(DAG, conf, as_user=REQUESTER)
        path, _ = awaiting_approval(stack, DAG, run_id)

        # When the approver rejects it
        stack.api("PATCH", path, json={"chosen_options": ["Reject"]})

        # Then the run ends failed at approve, saying who rejected it and that nothing changed; nothing after it ran
        assert stack.wait_for_run(DAG, run_id) == "failed"
        states = stack.task_states(DAG, run_id)
        assert states["plan[-1]"] == "success" and states["approve[-1]"] == "failed"
        assert {t: s for t, s in states.items() if t.split("[")[0] in ("definitions", "report")} == {
            "definitions[-1]": "upstream_failed", "report[-1]": "upstream_failed"}
        assert all(s == "upstream_failed" for t, s in states.items() if t.startswith("publish"))
        log = stack.task_log(DAG, run_id, "approve")
        assert f"restore of backup 'approval-1' rejected: the plan was rejected by {USER}; nothing was imported or published" in log
        # and the target has neither the definitions (their vhost) nor any message
        assert not _vhost_exists(broker, target)
    finally:
        if _vhost_exists(broker, target):
            broker.api("DELETE", f"vhosts/{quote(target, safe='')}")


@pytest.mark.broker
def test_a_dry_run_asks_nobody_and_changes_nothing(stack, broker, vhost, tmp_path, secret_user):
    target = f"{vhost}-dry"
    conf = _given_a_backup_and_a_connection(stack, broker, vhost, tmp_path, secret_user, target)

    # When a dry run is triggered without skip_approval
    run_id = stack.trigger(DAG, {**conf, "dry_run": True}, as_user=REQUESTER)

    # Then it ends without waiting: approve asked nobody (no Human-in-the-loop request), and the target is untouched
    assert stack.wait_for_run(DAG, run_id) == "success", stack.task_states(DAG, run_id)
    approve = f"{stack.run_path(DAG, run_id)}/taskInstances/approve"
    assert stack.api("GET", f"{approve}/-1/hitlDetails", expect_ok=False).status_code == 404
    result = stack.api("GET", f"{approve}/xcomEntries/return_value").json()["value"]
    assert {k: v for k, v in result.items() if k != "approval"} == {
        "approved": True, "asked": False, "reason": "dry run: nothing is imported or published"}
    assert result["approval"]["body"]["mode"] == "dry_run"  # sealed as a dry run: no later step acts on it otherwise
    assert not _vhost_exists(broker, target)
