"""``airflow dags test rbak_backup`` end to end: real broker, Spark local[2], file and loopback S3 storage."""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pika
import pytest

from airflow_rbak.codec import BackupManifest
from airflow_rbak.operators.metrics import location_tag
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from tests.backup.test_run import QUEUES, expected_json, publish, settled_depths
from tests.codec.independent_reader import read_segment
from tests.dags.airflow_env import VENV_BIN, airflow_env, capture_results, dags_test, rabbitmq_conn, run, run_facts
from tests.dags.conftest import documented
from tests.reliability.secrets import distinctive_password, leaks, log_files, stored_objects

# Queues beyond tests/backup/test_run.py's: a classic queue with arguments (priority, TTL, length limit).
EXTRA = {"prio": ({"x-queue-type": "classic", "x-max-priority": 10, "x-message-ttl": 3_600_000, "x-max-length": 10_000}, 40)}
DAY_MS = 86_400_000


@pytest.fixture
def seeded_queues(broker, vhost):
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for name, (queue_type, _) in QUEUES.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
        for name, (arguments, _) in EXTRA.items():
            channel.queue_declare(name, durable=True, arguments=arguments)
    counts = {**{n: c for n, (_, c) in QUEUES.items()}, **{n: c for n, (_, c) in EXTRA.items()}}
    for name, count in counts.items():
        publish(broker, vhost, name, 0, count)
    assert settled_depths(broker, vhost, counts) == counts
    return counts


def _old_backups(location: str) -> None:
    """An old complete backup (retention removes it) and an old incomplete one (retention never touches it)."""
    store, old = ManifestStore(open_storage(location)), int(time.time() * 1000) - 30 * DAY_MS
    store.save(BackupManifest("old-complete", old, "0", completed_at=old + 1000))
    store.save(BackupManifest("old-incomplete", old, "0"))


@pytest.mark.broker
@pytest.mark.spark
def test_the_backup_dag_keeps_every_message_reports_its_work_and_leaves_the_queues_alone(
    broker, vhost, seeded_queues, location, airflow_home, secret_user, statsd
):
    # Given seeded queues of every type, two older backups in the location, and a connection as a user with a
    # distinctive password
    _old_backups(location)
    c = broker.connection
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        c.host, c.amqp_port, c.management_port, c.stream_port, login=secret_user.name, password=secret_user.password),
        **statsd.env())
    # On files: every queue's segments on Spark, verified deeply there; on S3 the default placement, which keeps
    # these small queues in their capture tasks, with the quick check. Spark writes an event log per application.
    spark_apps = _spark_event_log(airflow_home)
    placement, verify = ("spark", "deep") if location.startswith("file:") else ("auto", "quick")
    env["SPARK_CONF_DIR"] = str(spark_apps.parent)
    conf = {"storage_url": location, "backup_id": "dag-1", "vhosts": [vhost], "segment_max_bytes": 65536,
            "verify": verify, "segment_work": placement, "retention": {"keep_last": 1},
            "copy_to": (airflow_home / f"second-copy-{location.split(':', 1)[0]}").as_uri()}

    # When the DAG runs
    done = dags_test(env, conf)

    # Then it succeeds, the backup validates deeply and holds every message byte-exact
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    validated = run([str(VENV_BIN / "rbak"), "validate", "--path", location, "--backup-id", "dag-1", "--deep"], env)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    storage = open_storage(location)
    manifest = ManifestStore(storage).load("dag-1")
    assert manifest.completed_at is not None
    assert {q.name: q.message_count for q in manifest.queues} == seeded_queues
    for queue in manifest.queues:
        records = [r for s in queue.segments for r in read_segment(storage.get(s.key))[1]]
        found = [(r["body"], r["properties"], sorted(map(repr, r["headers"]))) for r in records]
        expected = [expected_json(queue.name, i) for i in range(queue.message_count)]
        if queue.name in EXTRA:  # a priority queue delivers (and so is captured) highest priority first
            found, expected = sorted(found, key=repr), sorted(expected, key=repr)
        assert found == expected, queue.name
    events = next(q for q in manifest.queues if q.name == "events")
    offsets = events.extensions["stream_offsets"]
    assert (offsets["first"], offsets["last"]) == (0, QUEUES["events"][1] - 1)
    # the last message's fingerprint travels capture → XCom → manifest, for the next backup's re-creation check
    assert re.fullmatch(r"[0-9a-f]{64}", offsets["last_fingerprint"] or ""), offsets
    assert settled_depths(broker, vhost, seeded_queues) == seeded_queues
    assert not list(storage.list("dag-1/staging/"))
    # retention removed the superseded complete backup only
    assert ManifestStore(storage).backup_ids() == ["dag-1", "old-incomplete"]
    # and the copy task put a second copy, whole and valid, in the copy location
    second = run([str(VENV_BIN / "rbak"), "validate", "--path", conf["copy_to"], "--backup-id", "dag-1", "--deep"], env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert ManifestStore(open_storage(conf["copy_to"])).backup_ids() == ["dag-1"]
    facts = run_facts(env)
    _assert_reports(facts, storage.url, vhost, seeded_queues, manifest, verify)
    # one Spark application for the whole backup when its work goes to Spark, none when it stays in process
    assert len(list(spark_apps.iterdir())) == (1 if placement == "spark" else 0)
    assert facts["xcom"]["encode[-1].return_value"]["ran"] == ["spark" if placement == "spark" else "process"]
    made_by_capture = {q: bool(c.get("segments")) for q, c in capture_results(facts["xcom"]).items()}
    assert made_by_capture == dict.fromkeys(seeded_queues, placement == "auto")  # each right after its capture
    _assert_no_secrets(secret_user, done, facts, airflow_home, storage)
    _assert_metrics(statsd.received(), location, vhost, seeded_queues, manifest)
    if location.startswith("file:"):  # once is enough for the re-verify DAG (one more spark-submit)
        _assert_reverify(env, location)


def _spark_event_log(airflow_home: Path) -> Path:
    """A Spark configuration folder whose defaults log every application's events to a folder (returned)."""
    conf = Path(tempfile.mkdtemp(prefix="spark-conf-", dir=airflow_home))
    logs = conf / "events"
    logs.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir {logs.as_uri()}\n")
    return logs


def _assert_metrics(received: dict, location: str, vhost: str, counts: dict[str, int], manifest: BackupManifest) -> None:
    """What StatsD received from the run, by the documented names and tags: the backup's totals, duration and completion
    time for its location, and each queue's capture."""
    metrics, where = documented(received), location_tag(location)
    assert metrics.pop(("rbak.backup.complete", where)) == (1, "c")
    assert metrics.pop(("rbak.backup.messages", where)) == (sum(counts.values()), "c")
    assert metrics.pop(("rbak.backup.bytes", where)) == (manifest.total_bytes, "c")
    assert metrics.pop(("rbak.backup.last_complete", where)) == (manifest.completed_at / 1000, "g")
    assert metrics.pop(("rbak.backup.duration", where))[0] > 0
    for queue, count in counts.items():
        assert metrics.pop(("rbak.backup.queue.messages", where, vhost, queue)) == (count, "c"), queue
        assert (metrics.pop(("rbak.backup.queue.bytes", where, vhost, queue))[0] > 0) == (count > 0), queue
        assert metrics.pop(("rbak.backup.queue.duration", where, vhost, queue))[1] == "ms", queue
    assert metrics == {}


def _assert_no_secrets(user, done, facts: dict, airflow_home, storage) -> None:
    """Neither the password nor its hash in the run's output, task logs, metadata DB (XCom, rendered fields),
    Asset events or stored objects: by default (``include_users`` false) not even in the definitions export, which
    holds no user and no ``password_hash`` at all."""
    stored = stored_objects(storage)
    places = {"dags test output": done.stdout + done.stderr, "xcom and events": json.dumps(facts),
              **log_files(airflow_home), **stored}
    assert leaks(user, places) == []
    assert any(p.startswith("log ") for p in places) and any(p.endswith("/manifest.json") for p in places)
    definitions = stored["storage dag-1/definitions/definitions.json.zst"]
    assert b'"queues"' in definitions and b'"users"' not in definitions  # searched decompressed
    assert [p for p, data in stored.items() if b"password_hash" in data] == []


def _assert_reverify(env: dict[str, str], location: str) -> None:
    """``rbak_verify`` with ``backup_id: latest`` finds the new backup and checks every segment deeply."""
    done = dags_test(env, {"storage_url": location, "backup_id": "latest"}, dag_id="rbak_verify")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    x = run_facts(env, "rbak_verify")["xcom"]
    assert x["resolve_backup[-1].return_value"] == "dag-1"
    verified = x["verify[-1].return_value"]
    assert verified["mode"] == "deep" and verified["segments_failed"] == 0
    assert verified["segments_checked"] == verified["segments_listed"] > 0


def _assert_reports(facts: dict, safe_url: str, vhost: str, counts: dict[str, int], manifest: BackupManifest,
                    verify: str) -> None:
    """XCom summaries, extra links and the Asset event of the run."""
    x = facts["xcom"]
    assert facts["state"] == "success" and set(facts["tasks"].values()) == {"success"}
    assert x["discover[-1].summary"]["queues"] == len(counts) and x["discover[-1].summary"]["backup_id"] == "dag-1"
    assert x["export_definitions[-1].return_value"]["included"] is True
    captures = capture_results(x)
    assert {q: v["messages"] for q, v in captures.items()} == counts
    assert x["encode[-1].return_value"]["messages"] == sum(counts.values())
    verified = x["encode[-1].return_value"]["verify"]
    assert verified["ok"] is True and verified["mode"] == verify and verified["segments_failed"] == 0
    assert verified["segments_checked"] == manifest.total_segments > 0
    summary = x["finalize[-1].return_value"]
    assert summary["total_messages"] == manifest.total_messages == sum(counts.values())
    assert summary["retention_deleted"] == ["old-complete"]
    assert "password" not in json.dumps(x) and "guest:guest" not in json.dumps(x)
    links = {k: v for k, v in x.items() if "._link_" in k}
    assert links["finalize[-1]._link_RbakManifestLink"].endswith("/dag-1/manifest.json")
    queue_links = sorted(v for k, v in links.items() if k.startswith("capture["))
    assert any(link.endswith(f"/#/queues/{vhost}/eu%2Freturns") for link in queue_links)
    (event,) = facts["events"]
    # Airflow normalises the URI (query sorted and percent-encoded); the name keeps the storage URL as given
    assert event["name"] == f"rbak:{safe_url}" and event["task"] == "finalize"
    assert urlsplit(event["uri"])[:3] == urlsplit(safe_url)[:3]
    assert parse_qs(urlsplit(event["uri"]).query) == parse_qs(urlsplit(safe_url).query)
    assert event["extra"]["backup_id"] == "dag-1" and event["extra"]["total_messages"] == sum(counts.values())
    assert event["extra"]["duration_s"] > 0 and event["extra"]["completed_at"] == manifest.completed_at


def test_an_unknown_compression_is_rejected_by_the_param_schema(airflow_home, tmp_path):
    done = dags_test(airflow_env(airflow_home), {"storage_url": (tmp_path / "b").as_uri(), "compression": "brotli"})

    assert done.returncode != 0
    assert "'brotli' is not one of ['zstd', 'lz4', 'none']" in done.stdout + done.stderr
    assert not (tmp_path / "b").exists()


def test_an_unreachable_broker_fails_the_first_task_clearly_writes_no_manifest_and_calls_the_notifier(airflow_home, tmp_path):
    # Given an unreachable broker, and a failure notifier (any Airflow Notifier; this one records its calls)
    password = distinctive_password()
    calls = tmp_path / "notifier.jsonl"
    env = airflow_env(airflow_home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(amqp_port=1, management_port=1,
                                                                                password=password),
                      AIRFLOW__RBAK__FAILURE_NOTIFIER="tests.dags.recording_notifier:RecordingNotifier",
                      RBAK_TEST_NOTIFIER_FILE=str(calls))
    location = (tmp_path / "b").as_uri()

    # When a backup runs
    done = dags_test(env, {"storage_url": location, "backup_id": "unreachable-1"})

    # Then discover fails, saying why, before anything is written
    assert done.returncode != 0
    assert "rbak discover failed: management API at http://127.0.0.1:1 is unreachable" in done.stdout + done.stderr
    assert password not in done.stdout + done.stderr  # the failure and its traceback never show the password
    facts = run_facts(env)
    assert facts["tasks"]["discover[-1]"] == "failed"
    assert {t for t, s in facts["tasks"].items() if s == "success"} == set()
    assert not [i.key for i in open_storage(location).list("")]
    # and the notifier was called once, for discover, with the reason (and without the password)
    (call,) = [json.loads(line) for line in calls.read_text().splitlines()]
    assert (call["dag_id"], call["task_id"]) == ("rbak_backup", "discover")
    assert "management API at http://127.0.0.1:1 is unreachable" in call["exception"] and password not in call["exception"]


def _six_backups(location: str) -> list[str]:
    """Six complete backups a day apart, the newest an hour old; returns every object of the location."""
    store, now = ManifestStore(open_storage(location)), int(time.time() * 1000)
    for age in range(6, 0, -1):
        created = now - age * DAY_MS + DAY_MS - 3_600_000
        store.save(BackupManifest(f"day-{7 - age}", created, "0", completed_at=created + 1000))
    return sorted(i.key for i in open_storage(location).list(""))


def test_a_retention_param_below_the_configured_rule_is_refused_before_anything_changes_in_either_location(
        airflow_home, tmp_path):
    # Given a deployment whose [rbak] retention and copy_retention keep the newest 5, and six backups in the backup
    # location and in the copy
    env = airflow_env(airflow_home, AIRFLOW__RBAK__RETENTION='{"keep_last": 5}',
                      AIRFLOW__RBAK__COPY_RETENTION='{"keep_last": 5}')
    location, copy_to = (tmp_path / "backups").as_uri(), (tmp_path / "copy").as_uri()
    before = {location: _six_backups(location), copy_to: _six_backups(copy_to)}

    # When one run asks for keep_last 1 in both locations, and another for keep_last 1 in the copy alone
    both = dags_test(env, {"storage_url": location, "backup_id": "shrink-1", "retention": {"keep_last": 1},
                           "copy_to": copy_to, "copy_retention": {"keep_last": 1}})
    both_facts = run_facts(env)
    copy_only = dags_test(env, {"storage_url": location, "backup_id": "shrink-2", "copy_to": copy_to,
                                "copy_retention": {"keep_last": 1}})
    copy_facts = run_facts(env)

    # Then each fails at its first task, naming the rule, with no task after it run
    for done, facts, param in ((both, both_facts, "retention"), (copy_only, copy_facts, "copy_retention")):
        assert done.returncode != 0
        said = done.stdout + done.stderr
        assert (f'the {param} param {{"keep_last": 1}} keeps less than [rbak] {param} {{"keep_last": 5}} '
                "(keep_last 1 < 5)") in said, said[-3000:]
        assert facts["tasks"]["discover[-1]"] == "failed"
        assert {t for t, s in facts["tasks"].items() if s == "success"} == set()
    # and both locations hold exactly the backups they held before
    after = {url: sorted(i.key for i in open_storage(url).list("")) for url in before}
    assert after == before
    assert ManifestStore(open_storage(location)).backup_ids() == [f"day-{n}" for n in range(1, 7)]
    assert ManifestStore(open_storage(copy_to)).backup_ids() == [f"day-{n}" for n in range(1, 7)]
