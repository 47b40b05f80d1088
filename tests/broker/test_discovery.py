"""Discovery without a broker: versions, the effective delivery limit, and queue selection."""

from __future__ import annotations

import pytest

from airflow_rbak.broker.discovery import QueueInfo, QueueSelector, effective_delivery_limit, group_queues, parse_version
from airflow_rbak.exceptions import ConfigurationError


def quorum(arg=None, policy=None, operator=None) -> QueueInfo:
    return QueueInfo(
        vhost="/", name="q", queue_type="quorum",
        arguments={} if arg is None else {"x-delivery-limit": arg},
        effective_policy={} if policy is None else {"delivery-limit": policy},
        operator_policy={} if operator is None else {"delivery-limit": operator},
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3.10.8", (3, 10, 8)), ("4.1", (4, 1, 0)), ("4.0.0-rc.1", (4, 0, 0)), ("3.13.2+12.g1234", (3, 13, 2))],
)
def test_versions_are_read_leniently(text, expected):
    assert parse_version(text) == expected


def test_an_unreadable_version_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="cannot read RabbitMQ version"):
        parse_version("unknown")


@pytest.mark.parametrize(
    ("info", "version", "expected"),
    [
        (quorum(), (3, 10, 8), None),  # 3.x: no limit unless one is set
        (quorum(arg=5), (3, 10, 8), 5),
        (quorum(arg=5, policy=3), (3, 10, 8), 3),  # the smallest of argument, policy and operator policy
        (quorum(arg=5, policy=7, operator=4), (3, 13, 0), 4),
        (quorum(), (4, 0, 0), 20),  # 4.0 gave quorum queues a default of 20
        (quorum(policy=50), (4, 1, 0), 50),
        (quorum(arg=-1), (4, 2, 0), None),  # a negative value switches the limit off
        (quorum(arg=-1, policy=8), (4, 2, 0), 8),
        (QueueInfo("/", "c", "classic", arguments={"x-delivery-limit": 2}), (4, 2, 0), None),  # only quorum queues
        (QueueInfo("/", "s", "stream"), (4, 2, 0), None),
    ],
)
def test_effective_delivery_limit(info, version, expected):
    assert effective_delivery_limit(info, version) == expected


def test_queue_info_reads_the_management_api_shape():
    info = QueueInfo.from_api(
        {"vhost": "v", "name": "n", "type": "quorum", "arguments": {"x-delivery-limit": 3},
         "effective_policy_definition": {"delivery-limit": 9}, "messages": 12, "durable": True},
        {"delivery-limit": 2},
    )

    assert (info.queue_type, info.messages, effective_delivery_limit(info, (3, 10, 8))) == ("quorum", 12, 2)


def test_selector_filters_by_vhost_glob_type_and_depth():
    selector = QueueSelector(vhosts=("prod",), include=("orders.*",), exclude=("*.dlq",), queue_types=("classic",), min_messages=1)

    def accepted(vhost="prod", name="orders.eu", queue_type="classic", messages=1) -> bool:
        return selector.accepts(QueueInfo(vhost, name, queue_type, messages=messages))

    assert accepted()
    assert not accepted(vhost="dev")
    assert not accepted(name="payments")
    assert not accepted(name="orders.dlq")
    assert not accepted(queue_type="quorum")
    assert not accepted(messages=0)


def test_selector_refuses_unknown_queue_types():
    with pytest.raises(ConfigurationError, match="unknown queue types"):
        QueueSelector(queue_types=("classic", "kafka"))


@pytest.mark.parametrize("count, max_groups, sizes", [
    (0, 256, []), (3, 256, [1, 1, 1]), (1100, 1024, [2] * 76 + [1] * 948), (1100, 6, [184, 184, 183, 183, 183, 183])])
def test_queues_are_grouped_in_order_into_at_most_max_groups_of_nearly_equal_size(count, max_groups, sizes):
    queues = [QueueInfo("/", f"q{i:04d}", "classic") for i in range(count)]

    groups = group_queues(queues, max_groups)

    assert [len(g) for g in groups] == sizes
    assert [q for g in groups for q in g] == queues


def test_grouping_into_no_group_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="max_groups must be >= 1"):
        group_queues([], 0)
