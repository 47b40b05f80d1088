"""The approved plan is the contract: a step refuses, naming what changed, when the export, the target or a resume
point is no longer what the plan pinned; and a manifest that names no vhosts never widens the definitions import."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import quote

import orjson
import pika
import pytest

from airflow_rbak.codec.compression import compress, decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.codec.manifest import SELECTED_VHOSTS
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.checkpoints import RestoreCheckpoints
from airflow_rbak.restore.errors import DefinitionsImportError, PlanChangedError
from airflow_rbak.restore.plan import queue_checkpoint
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, ready_count

pytestmark = pytest.mark.broker


def _topology(broker, vhost: str) -> None:
    """``orders.x`` -> ``orders`` with arguments, 30 messages, and a policy on ``orders`` only."""
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        ch = conn.channel()
        ch.exchange_declare("orders.x", "topic", durable=True)
        ch.queue_declare("orders", durable=True, arguments={"x-queue-type": "classic", "x-max-length": 1000})
        ch.queue_bind("orders", "orders.x", "order.#")
        ch.confirm_delivery()
        for i in range(30):
            ch.basic_publish("orders.x", f"order.{i}", f"o-{i}".encode())
    broker.api("PUT", f"policies/{quote(vhost, safe='')}/limits",
               json={"pattern": "^orders$", "apply-to": "queues", "priority": 5, "definition": {"max-length": 5000}})


@pytest.fixture
def source(broker, vhost, tmp_path):
    _topology(broker, vhost)
    location = (tmp_path / "b").as_uri()
    backup(broker.connection, location, "pin-1", vhost)
    return location


def _settings(source, vhost, target_vhost, tmp_path, **more) -> RestoreRequest:
    return RestoreRequest(**{"storage_url": source, "backup_id": "pin-1", "vhosts": [vhost],
                             "vhost_map": {vhost: target_vhost}, "restore_definitions": True,
                             "checkpoint_state": str(tmp_path / "r.db"), **more})


def _definitions(broker) -> dict:
    """The target's definitions, every vhost (what must not change when a step refuses)."""
    doc = broker.api("GET", "definitions").json()
    return {k: sorted(orjson.dumps(i, option=orjson.OPT_SORT_KEYS) for i in doc.get(k, []))
            for k in ("vhosts", "queues", "exchanges", "bindings", "policies", "users", "permissions")}


def _rewrite_export(location: str, change) -> None:
    storage = open_storage(location)
    key = next(i.key for i in storage.list("pin-1/definitions/"))
    doc = orjson.loads(decompress(storage.get(key), compression_from_key(key), 1 << 30, key))
    storage.put(key, compress(orjson.dumps(change(doc)), compression_from_key(key), 3))


def _rollbacks(location: str) -> list[str]:
    return [i.key for i in open_storage(location).list("pin-1/definitions/") if "definitions/rollback" in i.key
            or "import-record" in i.key]


def test_an_export_replaced_after_approval_is_refused_naming_both_checksums_and_nothing_is_imported(
        broker, vhost, target_vhost, source, tmp_path):
    # Given an approved plan whose import is pinned
    run = RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path))
    plan = run.plan()
    assert plan.definitions_pin["size"] > 0 and len(plan.definitions_pin["sha256"]) == 64

    # When the export is replaced while the run waits at approval, with a planted ".*" policy that empties queues
    def planted(doc):
        doc["policies"].append({"vhost": vhost, "name": "evil", "pattern": ".*", "apply-to": "all", "priority": 999,
                                "definition": {"message-ttl": 0}})
        return doc

    _rewrite_export(source, planted)
    before = _definitions(broker)
    with pytest.raises(PlanChangedError, match="the definitions export changed") as refused:
        run.definitions(plan)

    # Then the refusal names the checksum before and after, and the target and the location are untouched
    assert plan.definitions_pin["sha256"] in str(refused.value)
    assert _definitions(broker) == before
    assert _rollbacks(source) == []


def test_the_same_bytes_written_again_are_not_a_change(broker, vhost, target_vhost, source, tmp_path):
    run = RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path))
    plan = run.plan()
    storage = open_storage(source)
    key = plan.definitions_pin["key"]
    storage.put(key, storage.get(key))  # rewritten, same bytes

    result = run.definitions(plan)

    assert result.imported
    policies = broker.api("GET", f"policies/{quote(target_vhost, safe='')}").json()
    assert [(p["name"], p["pattern"], p["definition"]) for p in policies] == [("limits", "^orders$", {"max-length": 5000})]


def test_a_target_changed_after_approval_so_that_the_import_would_differ_is_refused(
        broker, vhost, target_vhost, source, tmp_path):
    # Given an approved plan that creates the target vhost's queue, exchange, binding and policy
    run = RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path))
    plan = run.plan()
    assert "queue " + target_vhost + "/orders" in plan.definitions_changes["create"]

    # When someone declares orders in the target (other arguments) before the definitions step
    broker.api("PUT", f"vhosts/{quote(target_vhost, safe='')}")
    declare(broker.connection, target_vhost, {"orders": "quorum"})
    before = _definitions(broker)
    with pytest.raises(PlanChangedError, match="the target changed") as refused:
        run.definitions(plan)

    # Then the refusal names what left the import (the vhost, now there as the plan would create it, is no change),
    # and nothing was imported or saved
    assert f"added: none; no longer imported: 1 ('queue {target_vhost}/orders')" in str(refused.value)
    assert _definitions(broker) == before
    assert _rollbacks(source) == []


def test_objects_already_on_the_target_exactly_as_approved_are_not_a_change(broker, vhost, target_vhost, source, tmp_path):
    # Given an approved plan, and a first attempt that imported it (the task is retried after a later failure)
    run = RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path))
    plan = run.plan()
    assert run.definitions(plan).imported

    # When the step runs again, everything it would import is already there as approved: it goes on
    again = run.definitions(plan)

    assert again.imported and again.changes["create"] == []


def test_a_replace_mode_import_refuses_when_a_target_object_changed_after_approval(
        broker, vhost, target_vhost, source, tmp_path):
    # Given a target that holds the backup's policy as it is: the approved replace-mode import leaves it alone
    broker.api("PUT", f"vhosts/{quote(target_vhost, safe='')}")
    policy = {"pattern": "^orders$", "apply-to": "queues", "priority": 5, "definition": {"max-length": 5000}}
    broker.api("PUT", f"policies/{quote(target_vhost, safe='')}/limits", json=policy)
    run = RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path, definitions_mode="replace"))
    plan = run.plan()
    assert not any("limits" in label for label in plan.definitions_changes["replace"])

    # When someone raises the policy on the target before the definitions step (the import would now replace it)
    broker.api("PUT", f"policies/{quote(target_vhost, safe='')}/limits",
               json={**policy, "definition": {"max-length": 7}})
    before = _definitions(broker)
    with pytest.raises(PlanChangedError, match="the target changed") as refused:
        run.definitions(plan)

    # Then the refusal names the object the import would add, and nothing was imported
    assert f"added: 1 ('policy {target_vhost}/limits')" in str(refused.value)
    assert _definitions(broker) == before
    assert _rollbacks(source) == []


def test_a_resume_point_other_than_the_pinned_one_refuses_that_queue_and_publishes_nothing(
        broker, vhost, target_vhost, source, tmp_path):
    settings = _settings(source, vhost, target_vhost, tmp_path, restore_definitions=False)
    broker.api("PUT", f"vhosts/{quote(target_vhost, safe='')}")
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()
    queue = plan.queues[0]
    assert not queue.resumes and queue.records_in_window == 30
    blank = queue_checkpoint(plan, queue, settings)

    # a checkpoint that appeared after a fresh start was approved, claiming the queue completed with nothing confirmed
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        checkpoints.save(replace(blank, next_ordinal=30, published=0, completed=True))
    with pytest.raises(PlanChangedError, match="says completed with 0 of the plan's 30"):
        run.publish(plan, queue)

    # a checkpoint past the plan's last record
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        checkpoints.save(replace(blank, next_ordinal=31, published=10, depth_base=0))
    with pytest.raises(PlanChangedError, match="lies past the plan's last"):
        run.publish(plan, queue)

    # a pinned resume whose checkpoint went backwards, or vanished
    resumed = replace(queue, resumes=True, published_before=10, resume_ordinal=10)
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        checkpoints.save(replace(blank, next_ordinal=5, published=5, depth_base=0))
    with pytest.raises(PlanChangedError, match="published went back from 10 to 5"):
        run.publish(plan, resumed)
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        checkpoints._db.execute("DELETE FROM queue_progress")
    with pytest.raises(PlanChangedError, match="checkpoint is gone"):
        run.publish(plan, resumed)
    assert broker.api("GET", f"queues/{quote(target_vhost, safe='')}").json() == []  # nothing declared or published

    # progress that only moved forward is taken up: the run publishes the rest
    with RestoreCheckpoints(tmp_path / "r.db") as checkpoints:
        checkpoints.save(replace(blank, next_ordinal=0, published=0, depth_base=0))
    assert run.publish(plan, queue).published == 30
    assert ready_count(broker.connection, target_vhost, "orders") == 30


def test_the_approval_of_a_pinned_plan_shows_the_policy_arguments_and_the_binding_from_a_live_exchange(
        broker, vhost, target_vhost, source, tmp_path):
    # the target already has orders.x, carrying traffic, and a queue the backup's policy would also match
    broker.api("PUT", f"vhosts/{quote(target_vhost, safe='')}")
    with pika.BlockingConnection(broker.connection.pika_parameters(target_vhost)) as conn:
        conn.channel().exchange_declare("orders.x", "topic", durable=True)
    settings = _settings(source, vhost, target_vhost, tmp_path)
    plan = RestoreRun(broker.connection, settings).plan()

    body = approval_body(plan, settings, "rabbitmq_default")

    assert f"**create** `limits` in vhost `{target_vhost}`: pattern `^orders$`, apply-to `queues`, priority `5`" in body
    assert 'definition `{"max-length":5000}`' in body
    assert '"x-max-length":1000' in body
    assert "exchange `orders.x` -> `queue` `orders`" in body and "live traffic will be copied into this queue" in body


def test_a_manifest_naming_no_vhosts_imports_only_the_definitions_of_the_selected_queues_vhosts(
        broker, vhost, target_vhost, bystander, source, tmp_path):
    # Given a manifest without the vhosts its backup was asked for (another writer's), whose export holds a bystander
    store = ManifestStore(open_storage(source))
    manifest = store.load("pin-1")
    store.save(replace(manifest, extensions={k: v for k, v in manifest.extensions.items() if k != SELECTED_VHOSTS}))
    assert store.load("pin-1").selected_vhosts() is None

    # When it is restored naming no vhosts and no definitions selection (a dry run: only what would be imported)
    settings = RestoreRequest(source, backup_id="pin-1", queues=["orders"], vhost_map={vhost: target_vhost},
                              restore_definitions=True, dry_run=True, checkpoint_state="memory://")
    plan = RestoreRun(broker.connection, settings).plan()

    # Then only the selected queue's vhost is in the import, never the bystander
    assert [q.source_vhost for q in plan.queues] == [vhost]
    imported = {e["vhost"] for e in plan.definitions_import}
    assert imported == {target_vhost}
    assert not any(bystander in label for part in ("create", "replace", "cannot_replace")
                   for label in plan.definitions_changes[part])


@pytest.mark.parametrize("entry, named", [
    ({"queues": ["orders"]}, "queues[1] is a string, not an object"),
    ({"policies": [["a", "b"]]}, "policies[1] is a list, not an object"),
    ({"queues": [{"name": 7}]}, "has no proper name"),
    ({"bindings": [{"source": "orders.x", "destination": ["q"], "destination_type": "queue"}]}, "has no proper destination"),
    ({"exchanges": {"name": "x"}}, "exchanges is an object, not a list"),
    ({"policies": [{"name": "p", "pattern": ".*", "definition": "ttl"}]}, "has no proper definition"),
])
def test_non_object_entries_in_an_export_are_refused_naming_the_entry(
        broker, vhost, target_vhost, source, tmp_path, entry, named):
    def planted(doc):
        for kind, items in entry.items():
            if isinstance(items, list):
                doc[kind] = [*(doc.get(kind) or [])[:1], *[{**i, "vhost": vhost} if isinstance(i, dict) else i
                                                           for i in items]]
            else:
                doc[kind] = items
        return doc

    _rewrite_export(source, planted)
    before = _definitions(broker)
    for more in ({}, {"transformations": ["convert_to_quorum"]}):
        with pytest.raises(DefinitionsImportError, match="nothing was imported") as refused:
            RestoreRun(broker.connection, _settings(source, vhost, target_vhost, tmp_path, **more)).plan()
        assert named in str(refused.value)
    assert _definitions(broker) == before
