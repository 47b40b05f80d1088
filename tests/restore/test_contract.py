"""The pins of an approved plan, without a broker: which checkpoints a publish takes up, and what counts as drift
in a definitions import."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_rbak.restore.checkpoints import QueueCheckpoint
from airflow_rbak.restore.contract import DefinitionsPin, check_definitions, check_resume, pin_definitions
from airflow_rbak.restore.errors import PlanChangedError
from airflow_rbak.restore.plan import QueuePlan, SegmentPlan

QUEUE = QueuePlan("prod", "orders", "dr", "orders", "classic", 30, 30,
                  (SegmentPlan("b/s0", 0, 20, 0, 20, "x"), SegmentPlan("b/s1", 1, 10, 20, 10, "y")))
BLANK = QueueCheckpoint("b", "prod", "orders", "dr", "orders", "None..None")
RESUMED = replace(QUEUE, resumes=True, published_before=10, resume_ordinal=10)
FOUND = replace(BLANK, next_ordinal=10, published=10, depth_base=0, stored=True)


@pytest.mark.parametrize("pinned, found", [
    (QUEUE, BLANK),  # a fresh start, still fresh
    (QUEUE, replace(BLANK, next_ordinal=12, published=12, depth_base=0, stored=True)),  # this restore's own progress
    (QUEUE, replace(BLANK, next_ordinal=30, published=30, completed=True, stored=True)),
    (RESUMED, FOUND),  # the pinned resume point
    (RESUMED, replace(FOUND, next_ordinal=25, published=25)),  # later
    (replace(RESUMED, completed_before=True, published_before=30, resume_ordinal=30),
     replace(FOUND, next_ordinal=30, published=30, completed=True)),
])
def test_a_publish_takes_up_the_pinned_resume_point_or_later_progress(pinned, found):
    check_resume(pinned, found)


@pytest.mark.parametrize("pinned, found, named", [
    (RESUMED, BLANK, "checkpoint is gone"),
    (RESUMED, replace(FOUND, published=4), "published went back from 10 to 4"),
    (RESUMED, replace(FOUND, next_ordinal=3), "the next record went back from 10 to 3"),
    (replace(RESUMED, completed_before=True), FOUND, "no longer says so"),
    (QUEUE, replace(BLANK, next_ordinal=30, published=0, completed=True, stored=True), "completed with 0 of the plan's 30"),
    (QUEUE, replace(BLANK, next_ordinal=31, published=5, stored=True), "lies past the plan's last (30)"),
    (QUEUE, replace(BLANK, next_ordinal=30, published=31, stored=True), "more than the 30 records"),
])
def test_any_other_checkpoint_refuses_the_queue_naming_the_difference(pinned, found, named):
    with pytest.raises(PlanChangedError, match="Nothing was published to this queue") as refused:
        check_resume(pinned, found)
    assert named in str(refused.value) and "prod/orders -> dr/orders" in str(refused.value)


POLICY = ("policies", {"vhost": "dr", "name": "limits", "pattern": "^o$", "definition": {"max-length": 5}})
QUEUE_DEF = ("queues", {"vhost": "dr", "name": "orders", "durable": True, "arguments": {}})
VHOST = ("vhosts", {"name": "dr"})


def test_the_import_pin_does_not_depend_on_the_order_of_objects_or_keys():
    one = pin_definitions("k", b"export", [VHOST, POLICY, QUEUE_DEF])
    other = pin_definitions("k", b"export", [QUEUE_DEF, VHOST, ("policies", dict(reversed(list(POLICY[1].items()))))])
    assert one == other and DefinitionsPin.from_json(one.to_json()) == one


def test_drift_is_named_and_an_object_already_there_as_approved_is_not_drift():
    pinned = pin_definitions("k", b"export", [VHOST, POLICY, QUEUE_DEF])

    with pytest.raises(PlanChangedError, match="was 6 bytes with SHA-256"):
        check_definitions(pinned, pin_definitions("k", b"export!", [VHOST, POLICY, QUEUE_DEF]), {})
    raised = ("policies", {**POLICY[1], "definition": {"max-length": 0}})
    with pytest.raises(PlanChangedError) as refused:
        check_definitions(pinned, pin_definitions("k", b"export", [VHOST, raised, QUEUE_DEF]), {})
    assert "added: 1 ('policy dr/limits'); no longer imported: 1 ('policy dr/limits')" in str(refused.value)
    with pytest.raises(PlanChangedError, match="pins no definitions"):
        check_definitions(None, pinned, {})

    # the vhost and queue were created meanwhile exactly as the import would: the rest goes on
    current = {"vhosts": [{"name": "dr"}], "queues": [QUEUE_DEF[1]]}
    check_definitions(pinned, pin_definitions("k", b"export", [POLICY]), current)
    # but a queue declared otherwise is a change
    other = {"vhosts": [{"name": "dr"}], "queues": [{**QUEUE_DEF[1], "arguments": {"x-queue-type": "quorum"}}]}
    with pytest.raises(PlanChangedError, match="no longer imported: 1 \\('queue dr/orders'\\)"):
        check_definitions(pinned, pin_definitions("k", b"export", [POLICY]), other)
