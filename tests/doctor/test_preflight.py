"""The preflight (``airflow_rbak.doctor``) on a real broker and real locations: a correct deployment is all ok, and
each item broken one at a time is named with its fix, while every other check still runs.

The deployment under test: the session's broker as an administrator user with full rights on a fresh vhost (the
``broker`` and ``vhost`` fixtures, users made through the management API as tests/reliability/secrets.py makes them),
a file location, ``[rbak] state_key`` from the environment, no encryption, local Spark on this interpreter.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.doctor import Deployment, SecretSource, StateKeySetting, Status, run_preflight
from airflow_rbak.doctor.deployment import PausedDags
from airflow_rbak.doctor.spark_checks import java_major
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.keyring import new_key_text, parse_keyring
from airflow_rbak.storage.sealed import KEY_FILE_NAME

pytestmark = pytest.mark.broker
STATE_KEY = "k" * 40
ALL_UNPAUSED = PausedDags({"rbak_backup": False, "rbak_verify": False, "rbak_freshness": False})


@pytest.fixture
def make_user(broker):
    """Make broker users with ``tags`` and full permissions on ``vhost`` (None: on no vhost); deleted afterwards."""
    made: list[str] = []

    def make(vhost: str | None, tags: str = "administrator") -> RabbitMQConnection:
        name, password = f"doctor-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        broker.api("PUT", f"users/{name}", json={"password": password, "tags": tags})
        made.append(name)
        if vhost is not None:
            broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{name}",
                       json={"configure": ".*", "write": ".*", "read": ".*"})
        return dataclasses.replace(broker.connection, username=name, password=password)

    yield make
    for name in made:
        broker.api("DELETE", f"users/{name}")


@pytest.fixture
def correct(broker, vhost, tmp_path, make_user) -> Deployment:
    """A deployment that is right in every item: the backup of ``vhost`` by an administrator with full rights."""
    return Deployment(
        storage_url=(tmp_path / "backups").as_uri(), connection=make_user(vhost), broker_name="the test broker",
        vhosts=(vhost,), state_key=StateKeySetting(STATE_KEY, SecretSource("the environment", True)),
        spark_master="local[2]", search_path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        paused=ALL_UNPAUSED)


def by_item(report) -> dict[str, tuple[str, str, str]]:
    return {f.item: (f.status.value, f.detail, f.fix) for f in report.findings}


def only_broken(report, *items: str) -> dict[str, tuple[str, str, str]]:
    """The findings that are not ok; asserts that every item checked was reported (all checks ran)."""
    assert {"broker: rbak_backup", "vhosts", "storage", "encryption", "state key", "DAGs"} <= set(by_item(report))
    return {item: found for item, found in by_item(report).items() if found[0] != "ok"}


def test_a_correct_deployment_is_all_ok(correct):
    # When the preflight runs on a correct deployment
    report = run_preflight(correct)

    # Then every item is ok: each DAG's broker needs, the vhosts, storage, encryption, state key, DAGs, Spark, Java
    assert report.worst is Status.OK, [f.line() for f in report.findings if f.status is not Status.OK]
    assert set(by_item(report)) == {"broker: rbak_backup", "broker: rbak_backup reads", "broker: rbak_restore", "broker: rbak_drill", "vhosts",
                                    "storage", "encryption", "state key", "DAGs", "spark"}
    # and the storage probe left nothing behind
    assert [i.key for i in open_storage(correct.storage_url).list()] == []


def test_a_broker_user_without_the_administrator_tag_fails_the_backup_and_warns_the_drill(vhost, correct, make_user):
    # Given a user with the management tag only (full permissions on the vhost)
    deployment = dataclasses.replace(correct, connection=make_user(vhost, tags="management"))

    # When the preflight runs
    broken = only_broken(run_preflight(deployment))

    # Then the backup's definitions export fails, naming the tag and both fixes; the drill is a warning
    status, detail, fix = broken.pop("broker: rbak_backup")
    assert status == "failure" and "needs the 'administrator' tag" in detail
    assert fix.startswith(f"rabbitmqctl set_user_tags {deployment.connection.username} administrator")
    assert "include_definitions false" in fix
    assert broken.pop("broker: rbak_drill")[0] == "warning"
    # and nothing else is broken (the vhosts named are visible)
    assert broken == {}

    # And with include_definitions off, the backup needs no administrator
    report = run_preflight(dataclasses.replace(deployment, include_definitions=False))
    assert by_item(report)["broker: rbak_backup"][0] == "ok"


def test_a_user_who_cannot_see_a_vhost_is_warned_with_how_many(broker, vhost, correct, make_user):
    # Given an administrator with permissions on another vhost, and none on the test vhost; the backup's vhosts null
    other = f"doctor-other-{uuid.uuid4().hex[:6]}"
    broker.api("PUT", f"vhosts/{other}")
    try:
        deployment = dataclasses.replace(correct, connection=make_user(other), vhosts=None)

        # When the preflight runs
        vhosts = by_item(run_preflight(deployment))["vhosts"]

        # Then the vhosts item warns: how many exist that the user has no permissions on, naming the test vhost
        status, detail, fix = vhosts
        assert status == "warning" and f"{vhost!r}" in detail and "vhosts null cannot back them up" in detail
        assert fix.startswith("rabbitmqctl set_permissions -p ")
        # And a management user is told that it cannot be told
        manager = dataclasses.replace(deployment, connection=make_user(other, tags="management"),
                                      include_definitions=False)
        status, detail, _ = by_item(run_preflight(manager))["vhosts"]
        assert status == "warning" and "cannot be told here" in detail
        # And a vhost named in the vhosts param that the user cannot see is a failure
        named = dataclasses.replace(deployment, vhosts=(vhost,))
        status, detail, fix = by_item(run_preflight(named))["vhosts"]
        assert status == "failure" and f"[{vhost!r}]" in detail and fix.startswith(f"rabbitmqctl set_permissions -p {vhost}")
    finally:
        broker.api("DELETE", f"vhosts/{other}")


def test_an_unwritable_location_fails_storage_and_every_other_check_still_runs(correct, tmp_path, s3_server):
    # Given a location under a regular file (no folder can be made there), and an S3 bucket that does not exist
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for url in (f"{blocker.as_uri()}/backups",
                f"s3://rbak-missing-{uuid.uuid4().hex[:8]}/b?region=us-east-1&endpoint={s3_server}&path_style=true"):
        # When the preflight runs
        report = run_preflight(dataclasses.replace(correct, storage_url=url))

        # Then storage fails with the fix, and the broker, state key, DAGs and Spark were still checked and ok
        broken = only_broken(report)
        status, detail, fix = broken.pop("storage")
        assert status == "failure" and "is not writable" in detail and "give Airflow's workers write" in fix
        assert set(broken) <= {"encryption"}, broken  # reading the marker fails the same way
        assert by_item(report)["broker: rbak_backup"][0] == by_item(report)["spark"][0] == "ok"


def test_an_encrypted_location_with_a_missing_or_wrong_key_is_named(correct, tmp_path):
    # Given an encrypted location holding a backup's manifest sealed with key k1
    key = parse_keyring(new_key_text("k1"))
    open_storage(correct.storage_url, keyring=key).put("b1/manifest.json", b"{}")

    # When the preflight runs with no key, then with another key under the same id, then with the right one
    missing = by_item(run_preflight(correct))
    wrong = by_item(run_preflight(dataclasses.replace(correct, keyring=parse_keyring(new_key_text("k1")))))
    other = by_item(run_preflight(dataclasses.replace(correct, keyring=parse_keyring(new_key_text("k2")))))
    right = by_item(run_preflight(dataclasses.replace(
        correct, keyring=key, keys_source=SecretSource("connection 'rbak_encryption' in Airflow's metadata database",
                                                       False))))

    # Then each is named with its fix
    assert missing["encryption"][0] == "failure" and "no encryption keys are configured" in missing["encryption"][1]
    assert "[rbak] encryption_conn_id" in missing["encryption"][2]
    for found in (wrong, other):
        status, detail, fix = found["encryption"]
        assert status == "failure" and "wrong key" in detail and "add the key the location was sealed with" in fix
    assert right["encryption"][0] == "ok" and "k1" in right["encryption"][1]
    # and keys read only from Airflow's metadata database are a warning: no copy outside Airflow is evident
    assert right["encryption keys"][0] == "warning" and "no copy outside Airflow" in right["encryption keys"][1]
    # and no key appears in any finding
    assert all(key.to_text().split(":")[1] not in str(f) for f in (missing, wrong, other, right))


def test_no_state_key_a_derived_one_or_one_only_in_airflow_cfg_is_a_warning(correct, tmp_path):
    # Given the state key unset (a key file), derived from the fernet key, set only in airflow.cfg, or too short
    settings = {
        "file": StateKeySetting(key_file=tmp_path / KEY_FILE_NAME),
        "fernet": StateKeySetting(fernet_key_set=True, key_file=tmp_path / KEY_FILE_NAME),
        "cfg": StateKeySetting(STATE_KEY, SecretSource("airflow.cfg", False)),
        "short": StateKeySetting("too-short", SecretSource("the environment", True)),
    }
    # When the preflight runs on each
    found = {name: by_item(run_preflight(dataclasses.replace(correct, state_key=s)))["state key"]
             for name, s in settings.items()}

    # Then each says what it means and how to fix it
    assert found["file"][0] == "warning" and "on this machine only" in found["file"][1]
    assert found["fernet"][0] == "warning" and "rotating the fernet key" in found["fernet"][1]
    assert "disaster-recovery host needs the same fernet key" in found["fernet"][1]
    assert found["cfg"][0] == "warning" and "no copy outside Airflow" in found["cfg"][1]
    assert found["short"][0] == "failure" and "at least 32 characters" in found["short"][1]
    assert all("set [rbak] state_key" in found[n][2] for n in ("file", "fernet", "short"))
    # and the key file was not created by looking
    assert not (tmp_path / KEY_FILE_NAME).exists()
    assert STATE_KEY not in str(found)


def test_paused_dags_are_named_with_the_command_that_unpauses_them(correct):
    # Given rbak_backup paused, and rbak_freshness not yet parsed where new DAGs start paused
    paused = PausedDags({"rbak_backup": True, "rbak_verify": False})

    # When the preflight runs
    status, detail, fix = by_item(run_preflight(dataclasses.replace(correct, paused=paused)))["DAGs"]

    # Then both are named, with the fix
    assert status == "warning" and "rbak_backup, rbak_freshness" in detail and "start paused" in detail
    assert fix.startswith("airflow dags unpause rbak_backup")


def test_spark_submit_missing_from_path_or_no_java_fails_the_spark_item(correct, tmp_path):
    # Given a PATH holding neither spark-submit nor java, then java older than 17 (a script answering as Java 11)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    old = tmp_path / "old-java"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "java").write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    (old / "bin" / "java").chmod(0o755)

    # When the preflight runs
    nothing = by_item(run_preflight(dataclasses.replace(correct, search_path=str(empty))))
    eleven = by_item(run_preflight(dataclasses.replace(correct, java_home=str(old))))

    # Then each is named with its fix
    assert nothing["spark"][0] == "failure" and "spark-submit is not on the PATH" in nothing["spark"][1]
    assert "pip install pyspark" in nothing["spark"][2]
    assert nothing["java"][0] == "failure" and "no java on PATH" in nothing["java"][1]
    assert eleven["java"][0] == "failure" and "Java 11" in eleven["java"][1] and "Java 17 or later" in eleven["java"][2]
    # and a cluster master is not checked here
    cluster = by_item(run_preflight(dataclasses.replace(correct, spark_master="spark://cluster:7077")))
    assert cluster["spark"][0] == "ok"


def test_java_versions_are_read_in_both_notations():
    assert (java_major('openjdk version "17.0.15" 2025'), java_major('java version "1.8.0_392"'),
            java_major('openjdk version "21" 2023'), java_major("nonsense")) == (17, 8, 21, None)
