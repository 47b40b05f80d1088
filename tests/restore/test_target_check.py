"""The refusal rule of ``on_existing_messages`` over plans as ``inspect_target`` fills them in (no broker)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_rbak.restore import RestorePlan, RestoreRequest
from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.plan import QueuePlan
from airflow_rbak.restore.plan_log import summary_lines
from airflow_rbak.restore.target import check_target, refusal

QUEUE = QueuePlan("/", "orders", "dr", "orders", "classic", 10, 10, ())


def plan(*queues: QueuePlan, source: str = "rabbit@a", target: str = "rabbit@b") -> RestorePlan:
    return RestorePlan("b-1", "file:///b", None, None, queues, source_cluster=source, target_cluster=target,
                       target_cluster_id="id-b")


def settings(**extra) -> RestoreRequest:
    return RestoreRequest("file:///b", backup_id="b-1", **extra)


def test_an_empty_or_missing_target_queue_is_no_reason_to_refuse():
    assert refusal(plan(replace(QUEUE, target_depth=None), replace(QUEUE, target_queue="o2", target_depth=0)), settings()) is None


def test_a_queue_holding_messages_is_refused_by_default_and_named_with_what_to_set():
    reason = refusal(plan(replace(QUEUE, target_depth=7), source="rabbit@a", target="rabbit@a"), settings())
    assert "dr/orders holds 7" in reason and "the cluster this backup was taken from" in reason
    assert "on_existing_messages: append" in reason
    with pytest.raises(RestoreRefusedError):
        check_target(plan(replace(QUEUE, target_depth=7)), settings())


def test_append_a_resumed_restore_or_nothing_to_publish_are_not_refused_and_a_dry_run_only_warns():
    full = replace(QUEUE, target_depth=7)
    assert refusal(plan(full), settings(on_existing_messages="append")) is None
    assert refusal(plan(replace(full, resumes=True, published_before=7)), settings()) is None
    assert refusal(plan(replace(full, records_in_window=0)), settings()) is None
    check_target(plan(full), settings(dry_run=True))  # logged, not raised


def test_exchange_mode_refuses_any_non_empty_queue_of_the_target_vhost():
    reason = refusal(plan(replace(QUEUE, target_depth=0, vhost_depths={"audit": 3})), settings(publish_mode="exchange"))
    assert "dr/audit holds 3" in reason


def test_the_plan_says_what_each_queue_adds_and_names_both_clusters():
    lines = summary_lines(plan(replace(QUEUE, target_depth=4, resumes=True, published_before=4), source="rabbit@a",
                               target="rabbit@a"))
    assert "source cluster rabbit@a -> target cluster rabbit@a (THE SAME CLUSTER)" in lines[1]
    assert "target holds 4, adds 6 (resuming: 4 confirmed before)" in lines[2]
