"""What a quorum queue keeps of a classic queue is decided by the target's version: 3.10 (the broker here) and 4.x."""

from __future__ import annotations

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.delivery_order import order_warning
from airflow_rbak.restore.quorum_support import (
    DROP,
    KEEP,
    LOSS,
    QUORUM_RULES,
    REPLACE,
    argument_outcome,
    policy_key_outcome,
    target_version,
)

V3_10, V3_9, V4_0, V4_1 = (3, 10, 8), (3, 9, 29), (4, 0, 0), (4, 1, 2)


@pytest.mark.parametrize(("argument", "value", "version", "action"), [
    # priorities: a loss before 4.0; from 4.0 quorum queues order by priority without the argument
    ("x-max-priority", 5, V3_10, LOSS), ("x-max-priority", 5, V4_0, DROP), ("x-max-priority", 10, V4_1, DROP),
    # message TTL: quorum queues have it from 3.10
    ("x-message-ttl", 60000, V3_9, LOSS), ("x-message-ttl", 60000, V3_10, KEEP), ("x-message-ttl", 60000, V4_0, KEEP),
    # classic-only settings mean nothing to a quorum queue on any version (3.10 refuses them in a declare)
    ("x-queue-mode", "lazy", V3_10, DROP), ("x-queue-mode", "lazy", V4_0, DROP),
    ("x-queue-master-locator", "min-masters", V3_10, DROP), ("x-queue-version", 2, V4_1, DROP),
    # overflow: only reject-publish-dlx is replaced, on every version
    ("x-overflow", "reject-publish-dlx", V3_10, REPLACE), ("x-overflow", "reject-publish-dlx", V4_0, REPLACE),
    ("x-overflow", "reject-publish", V3_10, KEEP), ("x-overflow", "drop-head", V4_0, KEEP),
    # what quorum queues share with classic ones is kept
    ("x-dead-letter-exchange", "dlx", V3_10, KEEP), ("x-max-length", 10, V4_0, KEEP), ("x-expires", 1000, V3_10, KEEP),
])
def test_each_argument_has_the_outcome_the_targets_version_gives_it(argument, value, version, action):
    assert argument_outcome(argument, value, version).action == action


def test_a_replaced_overflow_becomes_reject_publish_and_every_drop_or_loss_says_why():
    assert argument_outcome("x-overflow", "reject-publish-dlx", V3_10).replacement == "reject-publish"
    for rule in QUORUM_RULES:
        for version in (V3_9, V3_10, V4_0):
            outcome = rule.outcome(version)
            assert outcome.action == KEEP or outcome.why, (rule.argument, version)


@pytest.mark.parametrize(("key", "value", "version", "action"), [
    ("queue-mode", "lazy", V3_10, DROP), ("overflow", "reject-publish-dlx", V4_0, REPLACE),
    ("message-ttl", 1000, V3_9, LOSS), ("message-ttl", 1000, V3_10, KEEP), ("max-length", 5, V3_10, KEEP),
    ("ha-mode", "all", V3_10, KEEP),  # mirroring is the strip_mirroring transformation's, not this table's
])
def test_policy_keys_follow_the_same_table(key, value, version, action):
    assert policy_key_outcome(key, value, version).action == action


def test_the_version_is_read_from_the_management_apis_text():
    assert target_version("3.10.8") == V3_10 and target_version("4.1.2+1.g0d2e") == V4_1
    with pytest.raises(ConfigurationError):
        target_version("unknown")


@pytest.mark.parametrize(("source", "target", "warned"), [
    # the same ordering on both sides: the stored order (the source's delivery order) comes out again
    ((3, 10, 8), (3, 13, 0), False), ((4, 0, 5), (4, 2, 1), False), ((4, 3, 6), (4, 4, 0), False),
    # a target that orders by less delivers the stored order: none (3.x), or 4.0's two levels after 4.3's strict
    # order (highest first, so the high messages are the older ones: test_delivery_order.py shows it on 4.0)
    ((4, 3, 6), (3, 10, 8), False), ((4, 0, 5), (3, 10, 8), False), ((4, 3, 6), (4, 0, 5), False),
    # a target that orders by more than the source did reorders messages of different priorities
    ((3, 10, 8), (4, 0, 5), True), ((3, 10, 8), (4, 3, 6), True), ((4, 0, 5), (4, 3, 6), True),
    # an unknown source version: the target's ordering is said
    (None, (4, 3, 6), True),
])
def test_a_quorum_queue_restored_onto_another_priority_ordering_is_warned(source, target, warned):
    assert (order_warning(source, "quorum", target, "quorum") is not None) == warned
    # classic queues order by x-max-priority on every version, streams have no priorities, conversions are noted
    # by the transformations
    for source_type, target_type in (("classic", "classic"), ("stream", "stream"), ("classic", "quorum")):
        assert order_warning(source, source_type, target, target_type) is None
