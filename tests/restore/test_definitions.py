"""Must show 3: the rollback snapshot is written before import and equals the target's previous
definitions; an invalid definitions file aborts the restore before anything is published."""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pika
import pytest

from airflow_rbak.codec.compression import compress, decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.restore import DefinitionsImportError, RestoreRequest, RestoreRun
from airflow_rbak.restore.checkpoints import RestoreCheckpoints
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, read_queue

pytestmark = pytest.mark.broker


def _topology(broker, vhost: str) -> None:
    """``orders.x`` -> ``orders`` (order.#), ``audit.x`` -> ``orders.x`` (e2e), and an unrelated ``other.x`` -> ``other``."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        for name in ("orders.x", "audit.x", "other.x"):
            ch.exchange_declare(name, "topic", durable=True)
        for name in ("orders", "other"):
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum" if name == "orders" else "classic"})
        ch.queue_bind("orders", "orders.x", "order.#")
        ch.exchange_bind("orders.x", "audit.x", "#")
        ch.queue_bind("other", "other.x", "#")
        ch.confirm_delivery()
        for i in range(30):
            ch.basic_publish("orders.x", f"order.{i}", f"o-{i}".encode(), pika.BasicProperties(message_id=str(i)))
            ch.basic_publish("other.x", "x", f"x-{i}".encode())


def _vhost_part(doc: dict, vhost: str) -> dict:
    return {k: sorted(orjson.dumps(i, option=orjson.OPT_SORT_KEYS) for i in doc.get(k, []) if i.get("vhost") == vhost)
            for k in ("queues", "exchanges", "bindings", "policies")}


@pytest.fixture
def source(broker, vhost, tmp_path):
    _topology(broker, vhost)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "def-1", vhost)
    return location


def test_the_rollback_snapshot_holds_the_previous_definitions_and_selection_pulls_in_the_routes(
        broker, vhost, target_vhost, source, tmp_path):
    broker.api("PUT", f"vhosts/{target_vhost}")
    declare(broker.connection, target_vhost, {"already-here": "classic"})
    before = broker.api("GET", "definitions").json()
    settings = RestoreRequest(source, backup_id="def-1", vhosts=[vhost], queues=["orders"], vhost_map={vhost: target_vhost},
                               restore_definitions=True, definitions_selection={"queues": ["orders"]},
                               publish_mode="exchange", checkpoint_state=str(tmp_path / "r.db"))

    report = RestoreRun(broker.connection, settings).run()

    key = report.definitions["rollback_key"]
    assert key.startswith("def-1/definitions/rollback-before-import-") and key.endswith(".zst")
    storage = open_storage(source)
    snapshot = orjson.loads(decompress(storage.get(key), compression_from_key(key), 1 << 30, key))
    assert _vhost_part(snapshot, target_vhost) == _vhost_part(before, target_vhost)  # other tests change other vhosts
    assert [q["name"] for q in snapshot["queues"] if q["vhost"] == target_vhost] == ["already-here"]  # taken before import
    assert "users" not in snapshot and "permissions" not in snapshot  # a restore never changes them: no credentials kept
    after = broker.api("GET", f"definitions/{quote(target_vhost, safe='')}").json()
    assert sorted(q["name"] for q in after["queues"]) == ["already-here", "orders"]
    assert sorted(e["name"] for e in after["exchanges"]) == ["audit.x", "orders.x"]
    assert sorted((b["source"], b["destination"]) for b in after["bindings"]) == [("audit.x", "orders.x"), ("orders.x", "orders")]
    assert report.published == 30
    restored = read_queue(broker.connection, target_vhost, "orders", "quorum", 30)
    assert [m[0] for m in restored] == [f"o-{i}".encode() for i in range(30)]


@pytest.mark.parametrize("damage", ["broker-rejects", "not-json"])
def test_invalid_definitions_abort_the_restore_before_any_publish(broker, vhost, target_vhost, source, tmp_path, damage):
    storage = open_storage(source)
    key = next(i.key for i in storage.list("def-1/definitions/"))
    if damage == "broker-rejects":
        doc = {"vhosts": [{"name": vhost}], "queues": [{"name": "orders", "vhost": vhost, "durable": True, "auto_delete": False,
                                                      "arguments": {"x-queue-type": "no-such-type"}}]}
        storage.put(key, compress(orjson.dumps(doc), compression_from_key(key), 3))
    else:
        storage.put(key, b"\x28\xb5\x2f\xfd garbage")
    broker.api("PUT", f"vhosts/{target_vhost}")
    settings = RestoreRequest(source, backup_id="def-1", vhosts=[vhost], vhost_map={vhost: target_vhost}, restore_definitions=True,
                               checkpoint_state=str(tmp_path / "r.db"))

    with pytest.raises(DefinitionsImportError, match="no-such-type" if damage == "broker-rejects" else "cannot be read"):
        RestoreRun(broker.connection, settings).run()

    queues = broker.api("GET", f"queues/{quote(target_vhost, safe='')}").json()
    assert [q["name"] for q in queues] == []  # nothing declared, nothing published
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        assert checkpoints._db.execute("SELECT COUNT(*) FROM queue_progress").fetchone()[0] == 0
    rollbacks = [i.key for i in storage.list("def-1/definitions/rollback-before-import-")]
    assert len(rollbacks) == (1 if damage == "broker-rejects" else 0)  # saved before the import was tried


def test_a_restore_imports_only_the_definitions_of_the_vhosts_the_backup_was_asked_for(
        broker, vhost, target_vhost, bystander, tmp_path):
    # Given a backup of one vhost, on a broker where another holds a queue the backup was not asked for
    _topology(broker, vhost)
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "def-2", vhost)
    assert manifest.selected_vhosts() == (vhost,)
    export = open_storage(location).get(manifest.definitions.key)
    assert bystander.encode() in decompress(export, compression_from_key(manifest.definitions.key), 1 << 30, "export")

    # When it is restored with its definitions into another vhost, naming no vhosts and no selection
    settings = RestoreRequest(location, backup_id="def-2", vhost_map={vhost: target_vhost}, restore_definitions=True,
                               checkpoint_state=str(tmp_path / "r.db"))
    report = RestoreRun(broker.connection, settings).run()

    # Then only the backup's vhost was imported (under its new name), and nothing of the bystander was planned
    assert set(report.definitions["vhosts"]) == {target_vhost}
    planned = report.definitions["changes"]
    assert f"vhost {target_vhost}" in planned["create"] and all(target_vhost in item for item in planned["create"]), planned
    assert not any(bystander in item for part in ("create", "replace", "cannot_replace") for item in planned[part])
    assert report.published == 60

    # And a selection that asks for every vhost gets the bystander's definitions too (planned, in a dry run)
    wide = RestoreRequest(location, backup_id="def-2", vhost_map={vhost: target_vhost}, restore_definitions=True,
                           definitions_selection={"vhosts": ["*"]}, dry_run=True, checkpoint_state="memory://")
    assert bystander in RestoreRun(broker.connection, wide).run().definitions["vhosts"]
