"""A hostile restore: whatever the location holds, a restore changes on its target only what its plan listed.

Each case plants what an attacker with write access to the backup location can write: rollback snapshots and
import records, segments whose records carry routing headers, a definitions export swapped after the plan was
approved, restore checkpoints that claim progress, forged unroutable and offsets files, a manifest that names no
vhosts, an export built to exhaust memory. Every case runs on a real broker, with the location on a folder and on
loopback S3. Before and after, the whole target is read (:mod:`tests.reliability.target_state`: vhosts, users,
permissions, policies, queues, bindings and every queue's messages), and the test asserts the exact list of what
changed: nothing when the restore refuses, and otherwise only what the approved plan listed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import uuid
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import QueueProgress
from airflow_rbak.cli.main import main
from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue, encode_record
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import checkpoint_key, restore_state_prefix, rollback_definitions_key
from airflow_rbak.exceptions import RbakError
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.definitions import import_record_key
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from tests.broker.conftest import broker, vhost, vhost_of_its_own  # noqa: F401 - fixtures
from tests.reliability.target_state import changes, target_state
from tests.repository.backup_writer import BackupWriter
from tests.restore.helpers import backup, publish
from tests.restore.helpers import declare as declare_typed

BACKUP = "b-hostile"


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``rbak`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def records(queue: str, count: int, headers: tuple = (), vhost: str = "src") -> list[BackupRecord]:  # noqa: F811
    """``count`` records of ``queue`` with distinct bodies, and ``headers`` on each."""
    return [BackupRecord(body=f"{queue}-{i}".encode(), properties=BackupProperties(message_id=f"{queue}-{i}", delivery_mode=2),
                         headers=headers, exchange="", routing_key=queue, delivery_tag=i + 1,
                         backed_up_at=1_780_000_000_000 + i, source_queue=queue, source_vhost=vhost)
            for i in range(count)]


def write_backup(storage: Storage, source_vhost: str, queues: dict[str, list[BackupRecord]],
                 definitions: dict[str, Any] | None = None, backup_id: str = BACKUP) -> None:
    """A complete backup as any RBAK writer could store it: segments, the definitions export, the manifest."""
    writer = BackupWriter(storage, backup_id)
    for name, recs in queues.items():
        sink = writer.queue(source_vhost, name)
        sink.add_all(recs)
        sink.close()
    defs = definitions or {"vhosts": [{"name": source_vhost}], "queues": [
        {"name": n, "vhost": source_vhost, "durable": True, "auto_delete": False, "arguments": {}} for n in queues],
        "exchanges": [], "bindings": [], "policies": []}
    writer.write_definitions(orjson.dumps(defs))
    writer.finish()


def declare(broker: Any, vhost: str, queue: str, messages: int = 0) -> None:  # noqa: F811
    """A classic queue in ``vhost`` holding ``messages`` messages (published through the management API)."""
    v, q = quote(vhost, safe=""), quote(queue, safe="")
    broker.api("PUT", f"queues/{v}/{q}", json={"durable": True, "auto_delete": False, "arguments": {}})
    for i in range(messages):
        broker.api("POST", f"exchanges/{v}/amq.default/publish",
                   json={"properties": {"delivery_mode": 2}, "routing_key": queue, "payload": f"live-{i}",
                         "payload_encoding": "string"})


def request(location: str, target_vhost: str, source_vhost: str, **extra: Any) -> RestoreRequest:
    return RestoreRequest(storage_url=location, backup_id=BACKUP, vhosts=[source_vhost],
                          vhost_map={source_vhost: target_vhost}, **extra)


def created_in(vhost: str, queues: dict[str, int], *, vhost_created: bool = False) -> set[str]:  # noqa: F811
    """The change lines of a restore that created ``queues`` in ``vhost`` with so many messages each."""
    lines = {f"created queues ({vhost!r}, {q!r})" for q in queues} | {
        f"messages {vhost}/{q}: 0 -> {n}" for q, n in queues.items() if n}
    return lines | ({f"created vhosts ({vhost!r},)"} if vhost_created else set())


@pytest.fixture
def target(broker) -> Any:  # noqa: F811
    """A vhost of the target that a restore writes into; deleted afterwards."""
    with vhost_of_its_own(broker, "h") as name:
        yield name


@pytest.fixture
def live(broker) -> Any:  # noqa: F811
    """A live vhost with a queue of 5 messages that no restore in this module may touch."""
    name = f"prod-{uuid.uuid4().hex[:10]}"
    broker.api("PUT", f"vhosts/{name}")
    broker.api("PUT", f"permissions/{name}/{broker.connection.username}", json={"configure": ".*", "write": ".*", "read": ".*"})
    declare(broker, name, "orders", 5)
    yield name
    with contextlib.suppress(Exception):
        broker.api("DELETE", f"vhosts/{name}")


# --- rollback: planted snapshots and import records ---------------------------------------------------------------


def plant_rollback(storage: Storage, live_vhost: str) -> str:
    """A snapshot holding an administrator ``evil``, and an import record saying the import created the live vhost and
    replaced ``evil``: what an attacker writes to make a rollback delete live data and add an administrator."""
    stamp = "20991231T235959999Z"
    snapshot_key = rollback_definitions_key(BACKUP, stamp, Compression.ZSTD)
    evil = {"name": "evil", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", "tags": ["administrator"],
            "hashing_algorithm": "rabbit_password_hashing_sha256"}
    snapshot = {"users": [evil], "permissions": [{"user": "evil", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]}
    storage.put(snapshot_key, compress(orjson.dumps(snapshot), Compression.ZSTD, 3))
    record = {"snapshot": snapshot_key, "mode": "replace",
              "created": [{"kind": "vhosts", "item": {"name": live_vhost}}],
              "replaced": [{"kind": "users", "item": evil},
                           {"kind": "permissions", "item": snapshot["permissions"][0]}]}
    storage.put(import_record_key(snapshot_key), orjson.dumps(record))
    return snapshot_key


@pytest.mark.parametrize("mode", ["--dry-run", "--apply"])
def test_a_planted_rollback_deletes_no_vhost_and_creates_no_user(broker, location, live, mode, tmp_path, monkeypatch):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, live, {"orders": records("orders", 3, vhost=live)})
    plant_rollback(storage, live)
    monkeypatch.setenv("RBAK_BROKER_URL", broker_url(broker))
    before = target_state(broker)

    code, out, err = run_cli("definitions", "rollback", "--path", location, "--backup-id", BACKUP, mode)

    after = target_state(broker)
    assert code != 0, out
    assert "import record" in err and BACKUP in err, err
    assert changes(before, after) == []
    assert "evil" not in after.user_names() and live in after.vhost_names()
    assert len(after.queue_messages(live, "orders")) == 5


def broker_url(broker) -> str:  # noqa: F811
    c = broker.connection
    return (f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}"
            f"&stream_port={c.stream_port}")


# --- headers that route -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["CC", "BCC"])
def test_a_planted_routing_header_reaches_no_other_queue(broker, location, target, header):  # noqa: F811
    """Records naming another queue of the target vhost in CC or BCC land only in their own queue."""
    storage = open_storage(location)
    route = ((header, HeaderValue.array([HeaderValue.long_string("victim")])),)
    write_backup(storage, "src", {"orders": records("orders", 6, route)})
    declare(broker, target, "victim", 3)
    before = target_state(broker)

    report = RestoreRun(broker.connection, request(location, target, "src")).run()

    after = target_state(broker)
    assert report.published == 6
    assert set(changes(before, after)) == created_in(target, {"orders": 6})
    assert [m[0] for m in after.queue_messages(target, "orders")] == [f"orders-{i}".encode() for i in range(6)]


# --- the definitions export replaced after approval ----------------------------------------------------------------


def test_a_definitions_export_replaced_after_the_plan_imports_nothing(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 2)})
    settings = request(location, target, "src", restore_definitions=True)
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()
    export_key = plan.definitions_key
    planted = {"vhosts": [{"name": "src"}], "queues": [{"name": "orders", "vhost": "src", "durable": True, "auto_delete": False, "arguments": {}}],
               "policies": [{"vhost": "src", "name": "drain", "pattern": ".*", "apply-to": "queues", "priority": 999,
                             "definition": {"message-ttl": 0}}]}
    storage.put(export_key, compress(orjson.dumps(planted), Compression.ZSTD, 3))
    before = target_state(broker)

    with pytest.raises(RbakError) as refused:
        run.definitions(plan)

    assert "changed" in str(refused.value) and export_key in str(refused.value)
    assert changes(before, target_state(broker)) == []


# --- approval: what acts beyond the restore is shown --------------------------------------------------------------


def test_a_planted_policy_is_shown_with_its_pattern_priority_and_definition(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    policy = {"vhost": "src", "name": "drain", "pattern": ".*", "apply-to": "queues", "priority": 999,
              "definition": {"message-ttl": 0}}
    write_backup(storage, "src", {"orders": records("orders", 2)}, {
        "vhosts": [{"name": "src"}], "queues": [{"name": "orders", "vhost": "src", "durable": True, "auto_delete": False, "arguments": {}}],
        "policies": [policy]})
    declare(broker, target, "bystander", 4)  # not restored, but the policy would match it
    settings = request(location, target, "src", restore_definitions=True)
    plan = RestoreRun(broker.connection, settings).plan()

    body = approval_body(plan, settings, "rabbitmq_default")

    for shown in ("drain", ".*", "999", "message-ttl", "bystander"):
        assert shown in body, shown


# --- restore checkpoints that claim progress ------------------------------------------------------------------------


def plant_progress(storage: Storage, broker, target_vhost: str, source_vhost: str, queue: str, **progress: Any) -> str:  # noqa: F811
    """A progress.json where this restore's checkpoint would be: its key is computable from what the location holds."""
    with ManagementClient(broker.connection) as client:
        cluster = client.cluster_identity()
    key = (cluster, storage.url, BACKUP, source_vhost, queue, target_vhost, queue)
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:32]
    obj = {"key": list(key), "window": RestoreRequest(storage_url=storage.url).window_label(), "next_ordinal": 0, "published": 0, "depth_base": 0, "completed": False,
           **progress}
    path = f"{restore_state_prefix(BACKUP)}{digest}/progress.json"
    storage.put(path, json.dumps(obj, sort_keys=True).encode())
    return path


def test_a_planted_resume_checkpoint_does_not_skip_the_refusal_of_a_non_empty_queue(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 8)})
    declare(broker, target, "orders", 4)
    plant_progress(storage, broker, target, "src", "orders", next_ordinal=2, published=2, depth_base=2)
    before = target_state(broker)

    with pytest.raises(RbakError) as refused:
        RestoreRun(broker.connection, request(location, target, "src")).run()

    assert "holds 4" in str(refused.value)
    assert changes(before, target_state(broker)) == []


@pytest.mark.parametrize("claim", [{"completed": True, "next_ordinal": 8, "published": 8},
                                   {"next_ordinal": 5, "published": 5, "depth_base": 0}])
def test_a_planted_checkpoint_skips_no_record(broker, location, target, claim):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 8)})
    plant_progress(storage, broker, target, "src", "orders", **claim)
    before = target_state(broker)

    report = RestoreRun(broker.connection, request(location, target, "src")).run()

    after = target_state(broker)
    assert report.published == 8
    assert set(changes(before, after)) == created_in(target, {"orders": 8})
    assert [m[0] for m in after.queue_messages(target, "orders")] == [f"orders-{i}".encode() for i in range(8)]


def test_planted_unroutable_and_offsets_files_change_no_report(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 3)})
    folder = plant_progress(storage, broker, target, "src", "orders").rpartition("/")[0]
    storage.delete(f"{folder}/progress.json")
    storage.put(f"{folder}/unroutable-{0:020d}.json", json.dumps(
        {"ordinal": 0, "segment_key": "x", "record_index": 0, "exchange": "e", "routing_key": "r", "reply": "NO_ROUTE"}).encode())
    storage.put(f"{folder}/offsets-{0:020d}.json", json.dumps([[0, 999999]]).encode())

    report = RestoreRun(broker.connection, request(location, target, "src")).run()

    assert report.published == 3 and report.unroutable == 0
    assert report.queues[0]["unroutable"] == []


# --- a manifest that names no vhosts, and an export built to exhaust memory -----------------------------------------


def test_a_manifest_naming_no_vhosts_imports_the_definitions_of_the_restored_vhost_only(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    defs = {"vhosts": [{"name": "src"}, {"name": "other"}],
            "queues": [{"name": "orders", "vhost": "src", "durable": True, "auto_delete": False, "arguments": {}},
                       {"name": "elsewhere", "vhost": "other", "durable": True, "auto_delete": False, "arguments": {}}]}
    write_backup(storage, "src", {"orders": records("orders", 2)}, defs)
    before = target_state(broker)

    RestoreRun(broker.connection, request(location, target, "src", restore_definitions=True)).run()

    lines = changes(before, target_state(broker))
    assert not [line for line in lines if "other" in line or "elsewhere" in line], lines
    assert set(lines) == created_in(target, {"orders": 2})


def test_an_export_of_millions_of_empty_objects_is_refused_and_changes_nothing(broker, location, target):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 1)})
    key = open_storage(location).list(f"{BACKUP}/definitions/")
    export_key = next(i.key for i in key if "/definitions." in i.key or i.key.endswith((".zst", ".json")))
    bomb = b'{"queues":[' + b"{}," * (16 * 1024 * 1024 // 3) + b"{}]}"
    storage.put(export_key, compress(bomb, Compression.ZSTD, 3))
    before = target_state(broker)

    with pytest.raises(RbakError) as refused:
        RestoreRun(broker.connection, request(location, target, "src", restore_definitions=True)).run()

    assert export_key in str(refused.value)
    assert changes(before, target_state(broker)) == []




# --- records and exports that read two ways -------------------------------------------------------------------------


def test_a_record_with_two_bodies_is_refused_as_damage_and_publishes_nothing(broker, location, target):  # noqa: F811
    """The strict reader that verifies a segment and the fast path that publishes it would take different bodies."""
    storage = open_storage(location)
    writer = BackupWriter(storage, BACKUP)
    sink = writer.queue("src", "orders")
    for record in records("orders", 3):
        stored = encode_record(record)
        sink.add_encoded(stored[:-1] + b',"body":[101,118,105,108]}' if record.delivery_tag == 2 else stored,
                         record.backed_up_at)
    sink.close()
    writer.write_definitions(b'{"vhosts": [{"name": "src"}]}')
    writer.finish()
    before = target_state(broker)

    with pytest.raises(RbakError) as refused:
        RestoreRun(broker.connection, request(location, target, "src")).run()

    assert "segment-0001" in str(refused.value)
    assert changes(before, target_state(broker)) == []


@pytest.mark.parametrize("entry", ['"orders"', '["orders"]', '{"name": 7, "vhost": "src"}'])
def test_an_export_entry_that_is_not_an_object_is_named_and_imports_nothing(broker, location, target, entry):  # noqa: F811
    storage = open_storage(location)
    write_backup(storage, "src", {"orders": records("orders", 2)})
    export_key = next(i.key for i in storage.list(f"{BACKUP}/definitions/"))
    storage.put(export_key, compress(b'{"vhosts": [{"name": "src"}], "queues": [' + entry.encode() + b"]}",
                                     Compression.ZSTD, 3))
    before = target_state(broker)

    with pytest.raises(RbakError) as refused:
        RestoreRun(broker.connection, request(location, target, "src", restore_definitions=True)).run()

    assert "queues[0]" in str(refused.value)
    assert changes(before, target_state(broker)) == []


def test_a_planted_completed_capture_checkpoint_leaves_the_source_unchanged_and_the_queue_in_the_backup(
        broker, location, vhost):  # noqa: F811
    """The next backup's id is predictable; a checkpoint planted for it saying "completed" is not taken."""
    storage = open_storage(location)
    declare_typed(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    storage.put(checkpoint_key("next-1", vhost, "orders"), json.dumps(
        QueueProgress("next-1", vhost, "orders", "classic", target_count=0, completed=True).__dict__).encode())
    before = target_state(broker)

    manifest = backup(broker.connection, location, "next-1", vhost)

    assert changes(before, target_state(broker)) == []
    (queue,) = [q for q in manifest.queues if q.name == "orders"]
    assert queue.message_count == 5
