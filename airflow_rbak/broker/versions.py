"""What each RabbitMQ version does that a backup or a restore must know: the one table of version rules.

Every version boundary the code decides by is a row of :data:`VERSION_RULES`: what changes, what the broker does
from each version on (:class:`Step`, with the fact the code reads, if any), what airflow-rbak does about it, and the
tests that measured it on a real broker (pytest node ids). The capture (``capture/returns.py``,
``capture/queue_features.py``), the broker clients (``broker/discovery.py``, ``broker/message_size_limit.py``), the
restore (``restore/quorum_support.py``, ``restore/delivery_order.py``, ``restore/target_compatibility.py``,
``restore/transformations.py``) read their boundaries and facts here, and docs/operations.md's version tables are
generated from it (``scripts/version_table.py``), so a new RabbitMQ quirk is one row, its code and its test.
Measured on RabbitMQ 3.10.8, 4.0.5 and 4.3.6; ``tests/broker/behaviour.py`` holds the tests' own, independent
expectations per series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_rbak.exceptions import ConfigurationError

Version = tuple[int, int, int]
#: Where the first step of every rule starts: any version before the next step.
ANY: Version = (0, 0, 0)
#: The series the tests run on (scripts/test.sh), the columns of the docs' tables.
MEASURED_SERIES: tuple[Version, ...] = ((3, 10, 0), (4, 0, 0), (4, 3, 0))


def parse_version(version: str) -> Version:
    """``3.10.8`` -> (3, 10, 8); pre-release and build suffixes are ignored."""
    nums = [int(n) for n in re.findall(r"\d+", version.split("+")[0].split("-")[0])[:3]]
    if not nums:
        raise ConfigurationError(f"cannot read RabbitMQ version {version!r}")
    major, minor, patch = (nums + [0, 0, 0])[:3]
    return major, minor, patch


def version_text(version: Version) -> str:
    """(4, 3, 0) -> ``4.3.0``."""
    return ".".join(str(n) for n in version)


def series_text(version: Version) -> str:
    """(4, 3, 0) -> ``4.3``: how the docs and messages name a boundary."""
    return f"{version[0]}.{version[1]}"


@dataclass(frozen=True)
class Step:
    """What the broker does from ``since`` on (until the rule's next step), and the fact the code reads then."""

    since: Version
    broker: str
    value: Any = None


@dataclass(frozen=True)
class VersionRule:
    """One behaviour that changes with the version: its steps, what the code does about it, the tests that show it."""

    change: str
    steps: tuple[Step, ...]
    code: str
    #: pytest node ids (``tests/x/test_y.py::test_z``, a parameter id allowed) of the tests that measured it.
    shown_by: tuple[str, ...]
    #: Which of the docs' tables lists it: what a backup meets (``backup``), what a restore into it meets (``restore``).
    parts: tuple[str, ...] = ("backup",)

    def __post_init__(self) -> None:
        starts = [s.since for s in self.steps]
        if not starts or starts[0] != ANY or starts != sorted(set(starts)):
            raise ValueError(f"{self.change!r}: steps must start at {ANY} and rise")

    def step(self, version: Version) -> Step:
        """The step ``version`` falls in."""
        return [s for s in self.steps if s.since <= version][-1]

    def value(self, version: Version) -> Any:
        """The fact the code reads for ``version``."""
        return self.step(version).value

    def since(self, value: Any) -> Version:
        """The first version whose step holds ``value`` (a boundary the code compares with)."""
        for s in self.steps:
            if s.value == value:
                return s.since
        raise KeyError(f"{self.change!r} has no step with {value!r}")

    def level(self, version: Version) -> int:
        """The index of ``version``'s step: 0 before the first change, 1 after it, ..."""
        return self.steps.index(self.step(version))


MIB = 1024 * 1024

HEADER_ORDER = VersionRule(
    "order of a delivered message's header table",
    (Step(ANY, "the publisher's (classic; quorum until the message is returned)"),
     Step((4, 0, 0), "sorted by key, every queue type")),
    "a record keeps the table as delivered; a message's identity compares headers sorted by key "
    "(`codec/record_identity.py`), so a message read again in the other order is the same message",
    ("tests/capture/test_queue_capture.py::test_deep_queue_captured_exactly_and_left_unchanged",
     "tests/reliability/test_broker_faults.py::test_connections_closed_mid_capture_then_a_rerun_backs_up_every_message_once"),
)
QUORUM_PRIORITY_ORDER = VersionRule(
    "delivery order of a quorum queue holding priorities",
    (Step(ANY, "no priorities: publish order", 0),
     Step((4, 0, 0), "two priority levels (0-4 normal, 5 and above high), high first but every third delivery the "
                     "older of the two levels' oldest", 2),
     Step((4, 3, 0), "32 priority levels (0-31), the higher delivered first", 32)),
    "a backup stores the order the queue delivered; a restore warns per queue when the target orders by more levels "
    "than the source (a quorum queue restored "
    "from an older version: 3.x into 4.0 or 4.3, 4.0 into 4.3); every message is restored "
    "(`restore/delivery_order.py`); a classic queue converted to quorum: its `x-max-priority` is a loss before 4.0 "
    "and removed, with a note, from 4.0, and one without it gets the note that it now delivers by priority "
    "(`restore/quorum_support.py`, `restore/transformations.py`)",
    ("tests/capture/test_queue_capture.py::test_deep_queue_captured_exactly_and_left_unchanged[quorum-70000]",
     "tests/capture/test_queue_features_on_broker.py::"
     "test_a_quorum_single_active_consumer_queue_is_read_one_consumer_at_a_time_or_left_out_while_in_use",
     "tests/restore/test_delivery_order.py::"
     "test_the_plan_warns_exactly_when_the_target_delivers_a_quorum_queue_in_another_order",
     "tests/restore/test_migration.py::test_a_priority_queue_whose_loss_is_accepted_becomes_quorum_in_stored_order",
     "tests/restore/test_upgrade_to_43.py::test_mirrored_classic_queues_of_3_10_become_quorum_on_4_3_with_every_message"),
    parts=("backup", "restore"),
)
QUORUM_RETURNS_COUNT = VersionRule(
    "a backup's return raises `x-delivery-count` (quorum)",
    (Step(ANY, "yes (`basic.nack` and channel close alike)", True),
     Step((4, 3, 0), "no (`basic.nack` raises `x-acquired-count`)", False)),
    "capture: while returns count, a quorum queue with a delivery limit is left out unless "
    "`allow_delivery_count_increase`, and an allowed capture stops before any return brings a message to the limit "
    "(`capture/returns.py`, `capture/queue_features.py`)",
    ("tests/capture/test_queue_capture.py::test_delivery_limit_refused_by_default_and_never_exceeded_when_allowed",
     "tests/capture/test_queue_capture.py::"
     "test_on_4_3_a_delivery_limit_leaves_nothing_out_and_repeated_backups_raise_no_delivery_count",
     "tests/capture/test_returns.py::test_returns_count_toward_the_limit_before_4_3"),
)
QUORUM_RETURN_METHOD = VersionRule(
    "how a capture gives a quorum queue's messages back",
    (Step(ANY, "a closed channel's messages go back in delivery order per consumer, in tag order up to 32 consumers "
               "(a `basic.nack` would count too, and 3.10 re-appends each nacked message to the Raft log)", "close"),
     Step((4, 3, 0), "a `basic.nack` of a channel's messages counts no delivery (a close does) and returns them per "
                     "consumer, in tag order only up to 32 consumers on the channel", "nack")),
    "closes each channel before 4.3 and sends one `basic.nack` per channel from 4.3, at most 32 consumers on a "
    "channel (`capture/returns.py`)",
    ("tests/capture/test_queue_capture.py::test_order_survives_many_consumers_and_for_quorum_a_delivery_limit[quorum]",
     "tests/capture/test_returns.py::test_returns_count_toward_the_limit_before_4_3"),
)
DEFAULT_DELIVERY_LIMIT = VersionRule(
    "delivery limit of a quorum queue with no limit of its own",
    (Step(ANY, "none"),
     Step((4, 0, 0), "20 (a negative limit means none)", 20)),
    "the limit is computed from the argument, the policy and the operator policy, the smallest winning "
    "(`broker/discovery.py`); where returns count (4.0), such a queue is left out unless "
    "`allow_delivery_count_increase`; 3.10 and 4.3 capture it",
    ("tests/backup/test_broker_state_headers.py::"
     "test_on_4_0_the_same_quorum_queues_are_left_out_with_the_reason_and_untouched",
     "tests/broker/test_management_fields.py::test_the_delivery_limit_the_code_computes_is_the_one_the_broker_applies"),
)
LIMIT_POLICY_AFTER_DISCOVERY = VersionRule(
    "a delivery-limit policy added after discovery",
    (Step(ANY, "counts every return toward it"),
     Step((4, 3, 0), "counts no return toward it")),
    "each capture task reads the queue's arguments and policies again before reading it "
    "(`capture/queue_capture.py`): the queue is left out before 4.3, read with no count raised from 4.3",
    ("tests/capture/test_queue_features_on_broker.py::"
     "test_a_delivery_limit_policy_added_after_discovery_leaves_the_queue_out_untouched",
     "tests/capture/test_queue_features_on_broker.py::"
     "test_on_4_3_a_delivery_limit_policy_added_after_discovery_is_read_by_the_capture_and_counts_no_return"),
)
POLICY_SHOWN_AFTER = VersionRule(
    "the management API shows a new policy on a queue",
    (Step(ANY, "once its statistics refresh"),
     Step((4, 0, 0), "after about 6 s (measured on 4.0.5)"),
     Step((4, 3, 0), "after its statistics refresh")),
    "the capture reads the policy when it starts; the tests wait until the queue shows the policy, never a fixed time",
    ("tests/capture/test_queue_features_on_broker.py::"
     "test_a_delivery_limit_policy_added_after_discovery_leaves_the_queue_out_untouched",),
)
CLASSIC_CONSUMER_TIMEOUT_ARGUMENT = VersionRule(
    "`x-consumer-timeout` on a classic queue",
    (Step(ANY, "accepted (3.12 made it a setting: no effect here; no `consumer-timeout` policy)"),
     Step((4, 0, 0), "accepted"),
     Step((4, 3, 0), "refused (406 PRECONDITION_FAILED; quorum queues take it)")),
    "the capture's time limit is the queue's `x-consumer-timeout` or `consumer-timeout` policy where set, else "
    "`consumer_timeout_ms` (`capture/queue_features.py`)",
    ("tests/capture/test_queue_feature_rows.py::test_row_consumer_timeout",),
)
CONSUMER_TIMEOUT_ENFORCED = VersionRule(
    "the broker's `consumer_timeout` passes while a capture holds messages",
    (Step(ANY, "closes the classic queue's channel"),
     Step((4, 0, 0), "closes the channel (classic and quorum)"),
     Step((4, 3, 0), "classic: nothing happens (a capture held past it completes); quorum: cancels the consumer and "
                     "takes its messages back, the channel stays open")),
    "a capture gives everything back and fails (`ConsumerTimeoutError`) before the timeout, less a margin; a closed "
    "channel or a cancelled consumer fails it the same way",
    ("tests/capture/test_queue_features_on_broker.py::"
     "test_a_capture_that_outlives_the_consumer_timeout_fails_clearly_and_loses_nothing",
     "tests/capture/test_queue_feature_rows.py::"
     "test_on_4_3_a_classic_capture_held_past_the_brokers_consumer_timeout_completes"),
)
STREAM_BYTE_ARRAY_HEADER = VersionRule(
    "a stream's byte-array header (`x`)",
    (Step(ANY, "kept"),
     Step((4, 0, 0), "delivered as a long string of the same bytes")),
    "a record keeps the header as delivered, with its wire type (`codec/field_table.py`), and a restore publishes "
    "it so",
    ("tests/capture/test_stream_capture.py::test_stream_first_run_captures_all_then_a_second_run_only_the_new_messages",),
)
STREAM_TABLE_HEADERS = VersionRule(
    "a stream's table and array headers",
    (Step(ANY, "dropped at publish"),
     Step((4, 0, 0), "kept")),
    "a record keeps what the stream delivers",
    ("tests/backup/test_run.py::test_a_full_backup_keeps_every_message_byte_exact_and_leaves_the_queues_as_they_were",),
)
DELIVERY_LIMIT_FIELD = VersionRule(
    "a quorum queue's delivery limit in the management API",
    (Step(ANY, "not given"),
     Step((4, 0, 0), "`delivery_limit`: the number the broker applies, or `unlimited` (a negative limit)")),
    "computes the limit on every version from the argument, the effective policy and the operator policy, smallest "
    "winning (`broker/discovery.py`); on 4.x the tests hold it equal to the broker's field",
    ("tests/broker/test_management_fields.py::test_the_delivery_limit_the_code_computes_is_the_one_the_broker_applies",),
)
MANAGEMENT_FIELDS = VersionRule(
    "the management API fields a backup decides from (`rabbitmq_version`, a queue's `type`, `arguments`, "
    "`effective_policy_definition` with the operator policy merged in, `operator_policy`, "
    "`messages_ready`/`messages_unacknowledged`; a named stream consumer's queue and name in "
    "`/api/stream/consumers`; the export's queue types and `rabbitmq_version`)",
    (Step(ANY, "as the code reads them"),),
    "reads them the same way on every version (`broker/discovery.py`, `broker/management.py`)",
    ("tests/broker/test_management_fields.py::test_each_queue_type_and_its_arguments_are_read_as_declared",
     "tests/broker/test_management_fields.py::test_the_message_counts_the_capture_reads_are_the_queues",
     "tests/broker/test_management_fields.py::test_a_named_stream_consumer_is_listed_as_the_stream_capture_reads_it"),
)
POLICY_KEY_OF_ANOTHER_TYPE = VersionRule(
    "a policy with a key the queue's type does not take (e.g. `delivery-limit` on a classic queue)",
    (Step(ANY, "not applied to that queue at all: neither shown nor enforced"),),
    "decides from the effective policy the broker shows",
    ("tests/broker/test_management_fields.py::test_the_effective_policy_the_code_reads_is_the_one_the_broker_enforces",),
)
ROLES = VersionRule(
    "the least-privilege roles",
    (Step(ANY, "as documented"),),
    "the same roles on every version (a quorum queue under a counting limit needs `allow_delivery_count_increase`, "
    "as for any user)",
    ("tests/broker/test_roles.py::test_the_backup_role_backs_up_every_message_and_is_told_what_else_it_cannot_do",
     "tests/broker/test_roles.py::test_the_restore_role_restores_every_message_into_queues_it_creates"),
)
MAX_MESSAGE_SIZE = VersionRule(
    "the default `max_message_size` (a larger publish closes the channel)",
    (Step(ANY, "128 MiB; not told to clients", 128 * MIB),
     Step((4, 0, 0), "16 MiB; announced over AMQP 1.0 on the AMQP port", 16 * MIB)),
    "the plan reads the target's limit over AMQP 1.0, else takes its version's default and says so "
    "(`broker/message_size_limit.py`), and refuses a restore with a larger record",
    ("tests/broker/test_message_size_limit.py::test_the_limit_is_the_nodes_own_on_4_x_and_the_versions_default_on_3_10",
     "tests/restore/test_message_size.py::"
     "test_a_message_over_the_targets_limit_is_refused_in_the_plan_and_nothing_is_published"),
    parts=("restore",),
)
CLASSIC_MIRRORING = VersionRule(
    "a policy with `ha-*` keys, a queue with `x-ha-*` arguments (classic queue mirroring)",
    (Step(ANY, "mirrors the queue", False),
     Step((4, 0, 0), "import rejected (\"not recognised policy settings\")", True)),
    "**refused** in the plan where the import is rejected, naming each object: name `strip_mirroring` (with "
    "`convert_to_quorum` to keep the queues replicated) (`restore/target_compatibility.py`)",
    ("tests/restore/test_definitions_into_4x.py::"
     "test_a_mirroring_policy_fails_the_whole_import_and_a_queue_mode_policy_is_accepted",
     "tests/restore/test_target_compatibility.py::"
     "test_on_4_x_each_object_gets_its_outcome_and_only_x_queue_version_1_is_changed",
     "tests/restore/test_upgrade_to_43.py::test_3_10_definitions_as_they_are_each_applied_changed_or_refused_in_the_plan"),
    parts=("restore",),
)
QUEUE_VERSION_1 = VersionRule(
    "a classic queue with `x-queue-version: 1`",
    (Step(ANY, "a version 1 queue", "kept"),
     Step((4, 0, 0), "accepted and ignored (every classic queue is version 2)", "ignored"),
     Step((4, 1, 0), "import rejected (\"unsupported queue version\"; measured on 4.3.6, 4.1 and 4.2 taken to "
                     "reject it)", "refused")),
    "**applied** as it is where ignored; **changed** where rejected: the argument is removed (an on-disk format no "
    "client sees) (`restore/target_compatibility.py`)",
    ("tests/restore/test_definitions_into_4x.py::test_x_queue_version_1_fails_the_whole_import_on_4_3_and_is_ignored_on_4_0",
     "tests/restore/test_target_compatibility.py::test_on_4_0_x_queue_version_1_is_applied_as_it_is"),
    parts=("restore",),
)
LAZY_QUEUE_MODE = VersionRule(
    "a queue with `x-queue-mode: lazy`, a policy with `queue-mode`",
    (Step(ANY, "a lazy classic queue"),
     Step((3, 12, 0), "accepted, no effect (classic queues have no lazy mode)")),
    "into 4.x: **applied**, with that note; `convert_to_quorum` removes them (`restore/target_compatibility.py`)",
    ("tests/restore/test_definitions_into_4x.py::test_x_queue_mode_lazy_is_kept_as_an_argument_and_means_nothing",
     "tests/restore/test_upgrade_to_43.py::test_3_10_definitions_as_they_are_each_applied_changed_or_refused_in_the_plan"),
    parts=("restore",),
)
TRANSIENT_QUEUES = VersionRule(
    "a transient (non-durable) non-exclusive queue",
    (Step(ANY, "a transient queue"),
     Step((4, 0, 0), "accepted, as a deprecated feature")),
    "into 4.x: **applied**, with the note that a node restart loses its messages; `convert_to_quorum` makes it "
    "durable (`restore/target_compatibility.py`)",
    ("tests/restore/test_definitions_into_4x.py::test_a_transient_non_exclusive_queue_is_still_imported",
     "tests/restore/test_upgrade_to_43.py::test_3_10_definitions_as_they_are_each_applied_changed_or_refused_in_the_plan"),
    parts=("restore",),
)
QUORUM_MESSAGE_TTL = VersionRule(
    "message TTL on a quorum queue",
    (Step(ANY, "none", False),
     Step((3, 10, 0), "`x-message-ttl` and `message-ttl` taken", True)),
    "a classic queue's message TTL converted to quorum is a loss before 3.10, refused unless accepted by name "
    "(`restore/quorum_support.py`)",
    ("tests/restore/test_quorum_support.py::test_each_argument_has_the_outcome_the_targets_version_gives_it",),
    parts=("restore",),
)
JOURNAL_TRACING = VersionRule(
    "a vhost's tracing (the firehose the journal reads)",
    (Step(ANY, "a setting of each node: set through one node's endpoint, only that node traces (measured on 3.10.8 "
               "and 4.3.6 clusters); off again after the node restarts (3.10.8, 4.0.5 and 4.3.6)"),),
    "`rbak journal enable` sets it through every node's own endpoint the connection lists; every archive run reads it "
    "on each node, turns it back on where it is off and names the time since the last archive as a gap "
    "(`broker/journal.py`, `journal/archive_run.py`)",
    ("tests/journal/test_journal_cluster.py::test_tracing_set_through_one_nodes_endpoint_is_that_nodes_alone",
     "tests/journal/test_archive_gaps.py::test_a_node_restart_turns_tracing_off_and_the_next_archive_names_the_gap",
     "tests/journal/test_archive_gaps.py::test_tracing_turned_off_by_rabbitmqctl_is_a_gap_and_is_turned_back_on"),
)
JOURNAL_OVERFLOW = VersionRule(
    "a quorum queue's length limit against the firehose's enqueues",
    (Step(ANY, "`reject-publish` does not hold them (they are not confirmed: 20 kept under a limit of 6); `drop-head` "
               "does (measured on 3.10.8, 4.0.5 and 4.3.6)"),),
    "the journal overflows by `drop-head`: a full journal drops its oldest trace messages, never the users' messages; "
    "the next archive run names the gap (`broker/journal.py`)",
    ("tests/journal/test_archive_gaps.py::"
     "test_a_full_journal_drops_its_oldest_and_is_a_gap_from_the_last_archive_to_the_first_mark_kept",),
)
JOURNAL_TRACE_HEADERS = VersionRule(
    "the firehose's copy of a publish's header table",
    (Step(ANY, "the publisher's order"),
     Step((4, 0, 0), "sorted by key, every wire type kept (measured on 4.0.5 and 4.3.6)")),
    "a journal record keeps the table as the trace gives it; the message's routing is the same "
    "(`journal/trace_record.py`)",
    ("tests/journal/test_archive_routes.py::test_every_route_is_a_record_with_what_routes_it_again",),
)

#: The table, in the order the docs list it.
VERSION_RULES: tuple[VersionRule, ...] = (
    HEADER_ORDER, QUORUM_PRIORITY_ORDER, QUORUM_RETURNS_COUNT, QUORUM_RETURN_METHOD, DEFAULT_DELIVERY_LIMIT,
    LIMIT_POLICY_AFTER_DISCOVERY, POLICY_SHOWN_AFTER, CLASSIC_CONSUMER_TIMEOUT_ARGUMENT, CONSUMER_TIMEOUT_ENFORCED,
    STREAM_BYTE_ARRAY_HEADER, STREAM_TABLE_HEADERS, DELIVERY_LIMIT_FIELD, MANAGEMENT_FIELDS, POLICY_KEY_OF_ANOTHER_TYPE,
    ROLES, MAX_MESSAGE_SIZE, CLASSIC_MIRRORING, QUEUE_VERSION_1, LAZY_QUEUE_MODE, TRANSIENT_QUEUES, QUORUM_MESSAGE_TTL,
    JOURNAL_TRACING, JOURNAL_OVERFLOW, JOURNAL_TRACE_HEADERS,
)
