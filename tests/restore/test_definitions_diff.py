"""Definitions compared object by object (no broker): what each import mode creates, replaces, or cannot change."""

from __future__ import annotations

from airflow_rbak.restore.definitions_diff import compare, identity, index, label, per_vhost

SELECTED = {"dr": {
    "queues": [{"name": "orders", "durable": True, "auto_delete": False, "arguments": {}}],
    "exchanges": [{"name": "orders.x", "type": "direct", "durable": True, "auto_delete": False, "internal": False, "arguments": {}}],
    "bindings": [{"source": "orders.x", "destination": "orders", "destination_type": "queue", "routing_key": "new", "arguments": {}}],
    "policies": [{"name": "limits", "pattern": "^orders$", "apply-to": "queues", "definition": {"max-length": 1000}, "priority": 0}],
}}


def current(**changes) -> dict:
    doc = {kind: [{**item, "vhost": "dr"} for item in items] for kind, items in SELECTED["dr"].items()}
    doc["vhosts"] = [{"name": "dr"}]
    for kind, item in changes.items():
        doc[kind] = [{**item, "vhost": "dr"}]
    return doc


def test_a_target_without_the_vhost_gets_everything_created():
    changes = compare(SELECTED, {"vhosts": [{"name": "/"}]}, "missing")
    assert changes.to_json()["create"] == ["vhost dr", "queue dr/orders", "exchange dr/orders.x",
                                           'binding dr/orders.x/queue/orders/new', "policy dr/limits"]
    assert per_vhost(changes.to_apply())["dr"]["queues"] == SELECTED["dr"]["queues"]


def test_a_changed_policy_is_kept_by_missing_and_replaced_by_replace_while_queues_are_never_changed():
    newer = {**SELECTED["dr"]["policies"][0], "definition": {"max-length": 50000}}
    other_queue = {**SELECTED["dr"]["queues"][0], "arguments": {"x-max-length": 5}}
    for mode, applied in (("missing", []), ("replace", ["policy dr/limits"])):
        changes = compare(SELECTED, {**current(policies=newer), "queues": [{**other_queue, "vhost": "dr"}]}, mode)
        body = changes.to_json()
        assert (body["create"], body["replace"], body["cannot_replace"]) == ([], ["policy dr/limits"], ["queue dr/orders"])
        assert [label(identity(k, i)) for k, i in changes.to_apply()] == applied
        assert body["unchanged"] == 2


def test_identities_ignore_table_key_order():
    a = {"vhost": "v", "source": "x", "destination_type": "queue", "destination": "q", "routing_key": "", "arguments": {"a": 1, "b": 2}}
    b = {**a, "arguments": {"b": 2, "a": 1}}
    assert identity("bindings", a) == identity("bindings", b) and len(index({"bindings": [a, b]})) == 1
