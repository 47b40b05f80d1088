"""``airflow dags test rbak_backup`` over the queues production brokers have (issue 13, must-show 2).

One vhost holds an auto-delete queue with messages, an exclusive queue held by another open connection, a
single-active-consumer queue deeper than the largest prefetch, a quorum queue whose delivery limit comes from a
policy added *after* discovery (by an Airflow listener that runs when the discover task succeeds), and a plain
queue. The run succeeds; every queue still exists with every message in order; the queues in the manifest are
byte-exact; the two that cannot be read without changing them are named, with their reasons, where the
summaries say.
"""

from __future__ import annotations

import base64
import json
import textwrap

import pika
import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.broker.helpers import PLAIN, declare, depth
from tests.broker.helpers import publish as publish_numbered
from tests.broker.messages import body_of
from tests.capture.test_queue_features_on_broker import read_back
from tests.codec.independent_reader import read_segment
from tests.dags.airflow_env import airflow_env, capture_results, dags_test, rabbitmq_conn, run_facts

SAC_COUNT = 70_000  # deeper than the 16-bit prefetch of one consumer

# Adds a delivery-limit policy once the discover task has succeeded, and waits until the broker applies it:
# the capture task must read the queue's policy itself, not discovery's XCom.
LISTENER = '''
import base64, json, os, time, urllib.request
from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


def _call(method, url, auth, body=None):
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                     headers={"content-type": "application/json", "authorization": "Basic " + auth})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


class PolicyAfterDiscovery:
    @hookimpl
    def on_task_instance_success(self, previous_state, task_instance):
        if task_instance.task_id != "discover":
            return
        spec = json.loads(os.environ["RBAK_TEST_POLICY_AFTER_DISCOVERY"])
        _call("PUT", spec["policy_url"], spec["auth"], spec["policy"])
        deadline = time.monotonic() + 60
        while not json.loads(_call("GET", spec["queue_url"], spec["auth"])).get("effective_policy_definition"):
            assert time.monotonic() < deadline, "the policy was never applied"
            time.sleep(0.2)


class RbakTestPlugin(AirflowPlugin):
    name = "rbak_test_policy_after_discovery"
    listeners = [PolicyAfterDiscovery()]
'''


@pytest.mark.broker
@pytest.mark.spark
def test_a_backup_of_queues_real_brokers_have_completes_and_leaves_every_queue_as_it_was(broker, vhost, airflow_home, tmp_path):
    c = broker.connection
    location = (tmp_path / "backups").as_uri()
    # Given a plain queue, an auto-delete queue and a deep single-active-consumer queue
    declare(c, vhost, "plain", "classic")
    publish_numbered(c, vhost, "plain", 120, size=200)
    with pika.BlockingConnection(c.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare("auto", auto_delete=True)
    publish_numbered(c, vhost, "auto", 60, size=100)
    declare(c, vhost, "sac", "classic", **{"x-single-active-consumer": True})
    publish_numbered(c, vhost, "sac", SAC_COUNT, size=16, rich=False)
    # And a quorum queue that has no delivery limit when discovery reads it
    declare(c, vhost, "late", "quorum")
    publish_numbered(c, vhost, "late", 40, size=64)
    # And an exclusive queue held by an application's connection for the whole run (no heartbeats to miss)
    holder = pika.BlockingConnection(_no_heartbeat(c.pika_parameters(vhost)))
    try:
        held = holder.channel()
        held.queue_declare("mine", exclusive=True)
        for i in range(25):
            held.basic_publish("", "mine", body_of(i, 64), PLAIN)

        # When the backup DAG runs, a delivery-limit policy on "late" appearing right after discovery
        plugins = tmp_path / "plugins"
        plugins.mkdir()
        (plugins / "policy_after_discovery.py").write_text(textwrap.dedent(LISTENER))
        management = c.management_base_url
        spec = {"policy_url": f"{management}/api/policies/{vhost}/late-limit",
                "queue_url": f"{management}/api/queues/{vhost}/late",
                "auth": _basic(c.username, c.password),
                "policy": {"pattern": "^late$", "definition": {"delivery-limit": 5}, "apply-to": "queues"}}
        env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
            c.host, c.amqp_port, c.management_port, c.stream_port), AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins),
            RBAK_TEST_POLICY_AFTER_DISCOVERY=json.dumps(spec))
        done = dags_test(env, {"storage_url": location, "backup_id": "kinds", "vhosts": [vhost], "verify": "quick"})

        # Then the run succeeded
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        facts = run_facts(env)
        assert facts["state"] == "success" and set(facts["tasks"].values()) == {"success", "skipped"}
        assert facts["tasks"]["copy[-1]"] == "skipped"  # no copy_to

        # And the manifest holds the three readable queues, byte-exact, in queue order
        manifest = ManifestStore(open_storage(location)).load("kinds")
        assert manifest.completed_at is not None
        assert {q.name: q.message_count for q in manifest.queues} == {"plain": 120, "auto": 60, "sac": SAC_COUNT}
        for queue, size in (("plain", 200), ("auto", 100), ("sac", 16)):
            entry = manifest.queue(vhost, queue)
            bodies = [bytes(r["body"] or []) for s in entry.segments for r in read_segment(open_storage(location).get(s.key))[1]]
            assert bodies == [body_of(i, size) for i in range(entry.message_count)], queue

        # And the two queues left out are named with their reasons in the manifest, the finalize summary and the
        # capture tasks' XCom
        reasons = {q["queue"]: q["reason"] for q in manifest.extensions["left_out"]}
        assert set(reasons) == {"mine", "late"}
        assert "exclusive" in reasons["mine"] and "delivery limit of 5" in reasons["late"]
        x = facts["xcom"]
        assert {q["queue"]: q["reason"] for q in x["finalize[-1].return_value"]["left_out"]} == reasons
        captures = capture_results(x)
        assert {q: v["left_out"] for q, v in captures.items() if v["left_out"]} == reasons
        assert captures["auto"]["method"] == "basic.get" and captures["sac"]["method"] == "one consumer at a time"
        assert "mine" in {q["queue"] for q in x["discover[-1].summary"]["expected_left_out"]}

        # And every queue still exists with every message, in order; the left-out ones were never delivered
        assert read_back(c, vhost, "auto") == [(i, True) for i in range(60)]
        assert read_back(c, vhost, "late") == [(i, False) for i in range(40)]
        assert held.queue_declare("mine", passive=True).method.message_count == 25
        assert [held.basic_get("mine", auto_ack=True)[0].redelivered for _ in range(25)] == [False] * 25
        assert depth(c, vhost, "sac", SAC_COUNT, wait=60) == SAC_COUNT
        assert _drain(c, vhost, "sac", SAC_COUNT) == list(range(SAC_COUNT))
        assert _drain(c, vhost, "plain", 120) == list(range(120))
    finally:
        holder.close()


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _no_heartbeat(parameters: pika.ConnectionParameters) -> pika.ConnectionParameters:
    parameters.heartbeat = 0
    return parameters


def _drain(connection, vhost: str, queue: str, count: int) -> list[int]:
    """Consume ``count`` messages with automatic acks (the test's last look at the queue): their numbers in order."""
    seen: list[int] = []
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for _method, _props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=120):
            assert body is not None, f"queue {queue!r} stopped after {len(seen)} of {count} messages"
            seen.append(int.from_bytes(body[:8], "big"))
            if len(seen) == count:
                break
        channel.cancel()
    return seen
