"""Definitions selection and renaming, on a definitions document (no broker)."""

from __future__ import annotations

import pytest

from airflow_rbak.restore.definitions import (
    MAX_NOT_IMPORTED,
    counts,
    import_selection,
    not_imported,
    rollback_timestamp,
    select_definitions,
)
from airflow_rbak.restore.errors import DefinitionsImportError
from airflow_rbak.restore.request import DefinitionsSelection, RestoreRequest

DOC = {
    "vhosts": [{"name": "prod"}, {"name": "dev"}],
    "users": [{"name": "admin", "password_hash": "secret"}],
    "queues": [{"name": n, "vhost": v, "durable": True, "arguments": {}} for v, n in
               (("prod", "orders"), ("prod", "payments"), ("prod", "audit"), ("dev", "orders"))],
    "exchanges": [{"name": n, "vhost": "prod", "type": "topic"} for n in ("orders.x", "fanin.x", "payments.x", "unused.x")],
    "bindings": [
        {"source": "orders.x", "vhost": "prod", "destination": "orders", "destination_type": "queue", "routing_key": "#"},
        {"source": "fanin.x", "vhost": "prod", "destination": "orders.x", "destination_type": "exchange", "routing_key": "#"},
        {"source": "payments.x", "vhost": "prod", "destination": "payments", "destination_type": "queue", "routing_key": "#"},
        {"source": "orders.x", "vhost": "prod", "destination": "audit", "destination_type": "queue", "routing_key": "a"},
    ],
    "policies": [{"name": "ha", "vhost": "prod", "pattern": ".*", "definition": {}}],
}


def _names(part: dict, kind: str) -> list[str]:
    return sorted(i["name"] for i in part[kind])


def test_selecting_a_queue_pulls_in_every_exchange_that_routes_to_it():
    settings = RestoreRequest("memory://", vhost_map={"prod": "dr"}, queue_map={"orders": "orders-r"})

    selected = select_definitions(DOC, DefinitionsSelection(vhosts=["prod"], queues=["orders"]), settings)

    (part,) = selected.values()
    assert list(selected) == ["dr"]
    assert _names(part, "queues") == ["orders-r"]
    assert _names(part, "exchanges") == ["fanin.x", "orders.x"]
    assert sorted((b["source"], b["destination"]) for b in part["bindings"]) == [("fanin.x", "orders.x"), ("orders.x", "orders-r")]
    assert all("vhost" not in item for items in part.values() for item in items)
    assert "users" not in part and _names(part, "policies") == ["ha"]


def test_explicit_exchanges_come_along_and_every_vhost_by_default():
    settings = RestoreRequest("memory://")

    selected = select_definitions(DOC, DefinitionsSelection(queues=["payments"], exchanges=["unused.*"]), settings)

    assert counts(selected) == {"prod": {"queues": 1, "exchanges": 2, "bindings": 1, "policies": 1}}
    everything = select_definitions(DOC, DefinitionsSelection(), settings)
    assert counts(everything) == {"prod": {"queues": 3, "exchanges": 3, "bindings": 4, "policies": 1},
                                  "dev": {"queues": 1, "exchanges": 0, "bindings": 0, "policies": 0}}


def test_the_runtime_parameters_of_the_imported_vhosts_are_named_as_not_imported_never_their_values():
    settings = RestoreRequest("memory://", vhost_map={"prod": "dr"})
    doc = {**DOC, "parameters": [
        {"vhost": "prod", "component": "operator_policy", "name": "cap", "value": {"definition": {"max-length": 5}}},
        {"vhost": "prod", "component": "federation-upstream", "name": "up", "value": {"uri": "amqp://u:secret@h"}},
        {"vhost": "dev", "component": "operator_policy", "name": "dev-cap", "value": {}},
        {"vhost": "prod", "component": 7, "name": "bad"}, "not an object"]}

    chosen = import_selection(doc, DefinitionsSelection(vhosts=["prod"]), settings, "4.3.6")

    assert list(chosen.selected) == ["dr"]
    assert chosen.not_imported == [{"kind": "federation-upstream", "vhost": "dr", "name": "up"},
                                   {"kind": "operator_policy", "vhost": "dr", "name": "cap"}]
    assert "secret" not in repr(chosen)
    many = {**DOC, "parameters": [{"vhost": "prod", "component": "operator_policy", "name": f"p{i:03d}"}
                                  for i in range(MAX_NOT_IMPORTED + 5)]}
    listed = not_imported(many, DefinitionsSelection(), select_definitions(many, DefinitionsSelection(), settings), settings)
    assert len(listed) == MAX_NOT_IMPORTED + 1 and listed[-1] == {"kind": "more", "vhost": "", "name": "5 more"}


def test_global_parameters_of_an_export_are_never_imported_a_restore_imports_per_vhost():
    settings = RestoreRequest("memory://")
    doc = {**DOC, "global_parameters": [{"name": "cluster_name", "value": "source-cluster"},
                                        {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}]}

    chosen = import_selection(doc, DefinitionsSelection(), settings, "4.3.6")

    assert set(chosen.selected) == {"prod", "dev"}
    assert all("global_parameters" not in body and "source-cluster" not in repr(body)
               for body in chosen.selected.values())


def test_rollback_timestamps_sort_and_are_safe_in_keys():
    stamp = rollback_timestamp()
    assert len(stamp) == 19 and stamp.endswith("Z") and stamp.replace("T", "").replace("Z", "").isdigit()


@pytest.mark.parametrize("kind, entry, named", [
    ("queues", "orders", "queues[4] is a string, not an object ('orders')"),
    ("vhosts", ["prod"], "vhosts[2] is a list, not an object"),
    ("exchanges", {"name": 3, "vhost": "prod"}, "exchanges[4] ({'name': 3, 'vhost': 'prod'}) has no proper name"),
    ("bindings", {"source": "x", "vhost": "prod", "destination": "q", "destination_type": "queue", "arguments": []},
     "has no proper arguments"),
    ("policies", {"name": "p", "vhost": "prod", "pattern": ".*", "definition": {}, "priority": "high"},
     "has no proper priority"),
])
def test_an_entry_that_is_not_an_object_of_its_kind_is_refused_naming_it(kind, entry, named):
    doc = {**DOC, kind: [*DOC[kind], entry]}

    with pytest.raises(DefinitionsImportError, match="nothing was imported") as refused:
        select_definitions(doc, DefinitionsSelection(), RestoreRequest("memory://"), "b/definitions/definitions.json")

    assert str(refused.value).startswith(f"definitions b/definitions/definitions.json: {kind}[") and named in str(refused.value)


def test_a_kind_that_is_not_a_list_is_refused():
    with pytest.raises(DefinitionsImportError, match="queues is an object, not a list"):
        select_definitions({**DOC, "queues": {"orders": {}}}, DefinitionsSelection(), RestoreRequest("memory://"))
