"""The definitions a 4.x target treats differently, read against its version: applied, changed or refused.

The broker's side of each row is held by tests/restore/test_definitions_into_4x.py on real 4.0 and 4.3 nodes."""

from __future__ import annotations

from airflow_rbak.restore.target_compatibility import adapt, refusal

SELECTED = {"v": {
    "queues": [{"name": "v1", "durable": True, "arguments": {"x-queue-version": 1}},
               {"name": "v2", "durable": True, "arguments": {"x-queue-version": 2}},
               {"name": "lazy", "durable": True, "arguments": {"x-queue-mode": "lazy"}},
               {"name": "scratch", "durable": False, "arguments": {}},
               {"name": "mine", "durable": False, "exclusive": True, "arguments": {}},
               {"name": "mirrored", "durable": True, "arguments": {"x-ha-mode": "all"}}],
    "policies": [{"name": "ha", "pattern": ".*", "definition": {"ha-mode": "all", "max-length": 5}},
                 {"name": "lazy", "pattern": ".*", "definition": {"queue-mode": "lazy"}}],
}}


def test_before_4_0_nothing_is_read_or_changed():
    assert adapt(SELECTED, (3, 13, 7)) == (SELECTED, [])


def test_on_4_x_each_object_gets_its_outcome_and_only_x_queue_version_1_is_changed():
    selected, findings = adapt(SELECTED, (4, 3, 6))

    assert {(f["kind"], f["name"]): f["outcome"] for f in findings} == {
        ("queue", "v1"): "changed", ("queue", "lazy"): "applied", ("queue", "scratch"): "applied",
        ("queue", "mirrored"): "refused", ("policy", "ha"): "refused", ("policy", "lazy"): "applied"}
    queues = {q["name"]: q for q in selected["v"]["queues"]}
    assert queues["v1"]["arguments"] == {} and queues["v2"]["arguments"] == {"x-queue-version": 2}
    assert {k: v for k, v in queues.items() if k != "v1"} == {q["name"]: q for q in SELECTED["v"]["queues"][1:]}
    assert SELECTED["v"]["queues"][0]["arguments"] == {"x-queue-version": 1}, "the input is not changed"
    reason = refusal(findings)
    assert reason and "policy v/ha" in reason and "queue v/mirrored" in reason and "strip_mirroring" in reason


def test_on_4_0_x_queue_version_1_is_applied_as_it_is():
    # 4.0.5 takes the argument and ignores it (tests/restore/test_definitions_into_4x.py holds the broker to it)
    selected, findings = adapt(SELECTED, (4, 0, 5))

    assert {(f["kind"], f["name"]): f["outcome"] for f in findings}[("queue", "v1")] == "applied"
    assert selected["v"]["queues"][0]["arguments"] == {"x-queue-version": 1}
    assert adapt(SELECTED, (4, 1, 0))[0]["v"]["queues"][0]["arguments"] == {}, "4.1 and later: removed"


def test_nothing_refused_no_refusal():
    assert refusal(adapt({"v": {"queues": [SELECTED["v"]["queues"][0]]}}, (4, 0, 5))[1]) is None
