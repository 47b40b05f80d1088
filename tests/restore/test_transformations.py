"""The definitions transformations: pure functions, each with its own cases, and properties that hold for all of them."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.definitions_diff import identity
from airflow_rbak.restore.transformations import (
    CHANGED,
    DROPPED,
    KEPT,
    KINDS,
    REFUSED,
    TRANSFORMATIONS,
    TransformOptions,
    convert_to_quorum,
    diff,
    drop_empty_policies,
    strip_mirroring,
    transform,
)

V3_10, V4_0 = (3, 10, 8), (4, 0, 0)


def queue(name, vhost="v", durable=True, auto_delete=False, **arguments):
    return {"name": name, "vhost": vhost, "durable": durable, "auto_delete": auto_delete, "arguments": dict(arguments)}


def policy(name, definition, pattern=".*", vhost="v", apply_to="queues"):
    return {"name": name, "vhost": vhost, "pattern": pattern, "apply-to": apply_to, "definition": definition, "priority": 0}


def binding(source, destination, vhost="v"):
    return {"source": source, "vhost": vhost, "destination": destination, "destination_type": "queue",
            "routing_key": destination, "arguments": {}}


def changes_of(result):
    return [(c.transformation, c.kind, c.name, c.action) for c in result.changes]


# convert_to_quorum

def test_a_classic_queue_becomes_quorum_losing_only_what_quorum_queues_ignore():
    doc = {"queues": [queue("orders", **{"x-queue-mode": "lazy", "x-dead-letter-exchange": "dlx",
                                        "x-overflow": "reject-publish-dlx", "x-max-length": 10})]}
    result = convert_to_quorum(doc, TransformOptions(V3_10))
    assert result.document["queues"] == [queue("orders", **{"x-dead-letter-exchange": "dlx", "x-overflow": "reject-publish",
                                                            "x-max-length": 10, "x-queue-type": "quorum"})]
    [change] = result.changes
    assert change.action == CHANGED and "removed x-queue-mode" in change.detail
    assert "x-overflow reject-publish-dlx -> reject-publish" in change.detail


def test_a_non_durable_or_auto_delete_queue_is_made_durable_and_an_exclusive_one_keeps_its_type():
    doc = {"queues": [queue("t", durable=False, auto_delete=True), {**queue("x"), "exclusive": True}]}
    result = convert_to_quorum(doc, TransformOptions(V3_10))
    converted, exclusive = result.document["queues"]
    assert (converted["durable"], converted["auto_delete"]) == (True, False)
    assert exclusive == {**queue("x"), "exclusive": True}
    assert changes_of(result) == [("convert_to_quorum", "queue", "t", CHANGED), ("convert_to_quorum", "queue", "x", KEPT)]


def test_a_priority_queue_is_refused_on_3_10_with_its_bindings_and_says_how_to_go_on():
    doc = {"queues": [queue("prio", **{"x-max-priority": 5}), queue("orders")],
           "bindings": [binding("x", "prio"), binding("x", "orders")]}
    result = convert_to_quorum(doc, TransformOptions(V3_10))
    assert [q["name"] for q in result.document["queues"]] == ["orders"]
    assert result.document["bindings"] == [binding("x", "orders")]
    refusal = result.changes[0]
    assert (refusal.name, refusal.action) == ("prio", REFUSED)
    assert "3.10.8" in refusal.detail and '"prio:x-max-priority"' in refusal.detail and '{"prio": "classic"}' in refusal.detail
    assert ("convert_to_quorum", "binding", "x -> queue prio", DROPPED) in changes_of(result)


def test_a_priority_queue_converts_when_its_loss_is_accepted_or_the_target_is_4_x_and_stays_when_kept():
    doc = {"queues": [queue("prio", **{"x-max-priority": 5})]}
    accepted = convert_to_quorum(doc, TransformOptions(V3_10, accept_losses=("p*:x-max-priority",)))
    on_4 = convert_to_quorum(doc, TransformOptions(V4_0))
    kept = convert_to_quorum(doc, TransformOptions(V3_10, queue_types=(("*", "quorum"), ("prio", "classic"))))
    assert accepted.document["queues"] == on_4.document["queues"] == [queue("prio", **{"x-queue-type": "quorum"})]
    assert "loss accepted" in accepted.changes[0].detail and "two levels" in on_4.changes[0].detail
    assert kept.document == doc and changes_of(kept) == [("convert_to_quorum", "queue", "prio", KEPT)]


def test_a_loss_accepted_for_another_queue_or_argument_does_not_count():
    doc = {"queues": [queue("prio", **{"x-max-priority": 5})]}
    for accepted in (("other:x-max-priority",), ("prio:x-message-ttl",)):
        assert convert_to_quorum(doc, TransformOptions(V3_10, accept_losses=accepted)).changes[0].action == REFUSED


def test_rules_pick_queues_by_exact_name_first_then_the_first_matching_glob_and_leave_the_rest():
    doc = {"queues": [queue("orders-1"), queue("orders-keep"), queue("audit"), queue("q", **{"x-queue-type": "quorum"})]}
    rules = (("orders-*", "quorum"), ("orders-keep", "classic"))
    result = convert_to_quorum(doc, TransformOptions(V3_10, queue_types=rules))
    assert [q["arguments"].get("x-queue-type") for q in result.document["queues"]] == ["quorum", None, None, "quorum"]


def test_policies_reaching_quorum_queues_lose_queue_mode_and_the_others_are_left_alone():
    doc = {"queues": [queue("orders"), queue("keep")],
           "policies": [policy("lazy", {"queue-mode": "lazy", "max-length": 5}, "^orders$"),
                        policy("lazy-kept", {"queue-mode": "lazy"}, "^keep$"),
                        policy("exchanges", {"queue-mode": "lazy"}, apply_to="exchanges"),
                        policy("bad-pattern", {"queue-mode": "lazy"}, "(")]}
    result = convert_to_quorum(doc, TransformOptions(V3_10, queue_types=(("orders", "quorum"),)))
    assert result.document["policies"] == [policy("lazy", {"max-length": 5}, "^orders$")] + doc["policies"][1:]
    assert "it applies to quorum queues orders" in result.changes[-1].detail


# strip_mirroring and drop_empty_policies

def test_mirroring_keys_leave_policies_and_queue_arguments_and_the_other_keys_stay():
    doc = {"policies": [policy("ha", {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic", "max-length": 5})],
           "queues": [queue("q", **{"x-ha-policy": "all", "x-ha-mode": "all", "x-message-ttl": 5})]}
    result = strip_mirroring(doc, TransformOptions(V3_10))
    assert result.document == {"policies": [policy("ha", {"max-length": 5})], "queues": [queue("q", **{"x-message-ttl": 5})]}
    assert [c.detail.split(" (")[0] for c in result.changes] == ["removed ha-mode, ha-params, ha-sync-mode",
                                                                  "removed x-ha-mode, x-ha-policy"]


def test_empty_policies_are_dropped_and_named():
    doc = {"policies": [policy("empty", {}), policy("full", {"max-length": 1})]}
    result = drop_empty_policies(doc, TransformOptions(V3_10))
    assert result.document == {"policies": [policy("full", {"max-length": 1})]}
    assert changes_of(result) == [("drop_empty_policies", "policy", "empty", DROPPED)]


def test_transformations_run_in_their_order_whatever_order_they_are_named_in_and_unknown_names_are_refused():
    doc = {"policies": [policy("ha", {"ha-mode": "all"})], "queues": [queue("q", **{"x-ha-mode": "all"})]}
    result = transform(doc, ["drop_empty_policies", "strip_mirroring", "convert_to_quorum"], TransformOptions(V3_10))
    assert result.document == {"policies": [], "queues": [queue("q", **{"x-queue-type": "quorum"})]}
    with pytest.raises(ConfigurationError, match="unknown transformations"):
        transform(doc, ["prepare_for_quorum"], TransformOptions(V3_10))


def test_the_diff_shows_each_changed_object_removed_then_added_and_nothing_else():
    doc = {"queues": [queue("q"), queue("same", **{"x-queue-type": "quorum"})], "policies": [policy("ha", {"ha-mode": "all"})]}
    result = transform(doc, list(TRANSFORMATIONS), TransformOptions(V3_10))
    lines = diff(doc, result.document)
    assert sorted(line[:7] for line in lines) == ["+queue ", "-policy", "-queue "]
    assert '"x-queue-type":"quorum"' in next(line for line in lines if line.startswith("+queue"))


# Properties over any document

names = st.sampled_from(["orders", "prio", "audit", "q-1", "keep"])
arguments = st.dictionaries(st.sampled_from(["x-max-priority", "x-queue-mode", "x-ha-mode", "x-overflow", "x-message-ttl",
                                             "x-dead-letter-exchange", "x-queue-type", "x-queue-master-locator"]),
                            st.sampled_from([5, "lazy", "all", "reject-publish-dlx", "quorum", "classic", "dlx"]), max_size=4)
queues = st.builds(lambda n, v, d, a, args, x: {**queue(n, v, d, a, **args), **({"exclusive": True} if x else {})},
                   names, st.sampled_from(["v", "w"]), st.booleans(), st.booleans(), arguments, st.booleans())
definitions = st.dictionaries(st.sampled_from(["ha-mode", "ha-sync-mode", "queue-mode", "overflow", "max-length",
                                               "message-ttl"]), st.sampled_from(["all", "lazy", "reject-publish-dlx", 5]),
                              max_size=3)
policies = st.builds(policy, st.sampled_from(["p1", "p2", "p3"]), definitions, st.sampled_from([".*", "^o", "prio", "("]),
                     st.sampled_from(["v", "w"]), st.sampled_from(["queues", "all", "exchanges", "classic_queues"]))
bindings = st.builds(binding, st.sampled_from(["x", "dlx"]), names, st.sampled_from(["v", "w"]))
junk = st.sampled_from([3, "text", None, {"name": 1}])


def _unique(items, kind="queues"):
    seen = {}
    for item in items:
        key = str(identity(kind, item)) if isinstance(item, dict) else repr(item)
        seen.setdefault(key, item)
    return list(seen.values())


documents = st.builds(lambda q, p, b, j: {"queues": _unique(q + j), "policies": _unique(p, "policies"),
                                                  "bindings": _unique(b, "bindings")},
                      st.lists(queues, max_size=6), st.lists(policies, max_size=4), st.lists(bindings, max_size=5),
                      st.lists(junk, max_size=2))
options = st.builds(TransformOptions, st.sampled_from([(3, 9, 0), V3_10, V4_0]),
                    st.sampled_from([(("*", "quorum"),), (("o*", "quorum"), ("prio", "classic")), (("prio", "quorum"),)]),
                    st.sampled_from([(), ("x-max-priority",), ("prio:x-max-priority", "x-message-ttl")]))
chains = st.sampled_from([[name] for name in TRANSFORMATIONS] + [list(TRANSFORMATIONS)])
MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _objects(doc):
    """Every object by (kind, vhost, name) as the changes name them."""
    found = {}
    for kind, singular in KINDS.items():
        for item in doc.get(kind) or []:
            if isinstance(item, dict) and kind == "bindings":
                name = f"{item.get('source')} -> {item.get('destination_type')} {item.get('destination')}"
                found[(singular, item.get("vhost"), name)] = item
            elif isinstance(item, dict):
                found[(singular, item.get("vhost"), item.get("name"))] = item
    return found


@MANY
@given(doc=documents, opts=options, names=chains)
def test_every_transformation_is_idempotent_and_leaves_its_input_alone(doc, opts, names):
    original = copy.deepcopy(doc)
    once = transform(doc, names, opts)
    assert doc == original
    assert transform(once.document, names, opts).document == once.document


@MANY
@given(doc=documents, opts=options, names=chains)
def test_no_object_is_dropped_or_changed_without_a_change_naming_it(doc, opts, names):
    result = transform(doc, names, opts)
    before, after = _objects(doc), _objects(result.document)
    said = {(c.kind, c.vhost, c.name): c.action for c in result.changes}
    for key, item in before.items():
        if key not in after:
            assert said.get(key) in (DROPPED, REFUSED), key
        elif after[key] != item:
            assert key in said, key
    # and what is not an object the transformations know passes through untouched
    assert [i for i in result.document["queues"] if not isinstance(i, dict) or not isinstance(i.get("name"), str)] == \
        [i for i in doc["queues"] if not isinstance(i, dict) or not isinstance(i.get("name"), str)]
