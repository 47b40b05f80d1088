"""What a quorum queue on a given RabbitMQ version keeps of a classic queue: one table, read by the conversion.

A classic queue's arguments (and the policy keys that set the same
features) fall in four kinds when it becomes a quorum queue, and the
target's version decides which: kept; dropped because they mean nothing to a
quorum queue (``x-queue-mode``: a quorum queue keeps every message on
disk); replaced by the nearest quorum behaviour (overflow
``reject-publish-dlx``); or a behaviour the quorum queue cannot keep, a
*loss* (``x-max-priority`` before 4.0), which the conversion refuses unless
the user names it. RabbitMQ 3.10 refuses a quorum declare with
``x-max-priority``, ``x-queue-mode``, ``x-queue-master-locator`` or
``x-queue-version``, and any non-durable, auto-delete or exclusive one.
Mirroring keys (``ha-*``) are the mirroring transformation's, not this table's.
The versions from which quorum queues order priorities and take a message TTL
are the version table's (:mod:`airflow_rbak.broker.versions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_rbak.broker.versions import QUORUM_MESSAGE_TTL, QUORUM_PRIORITY_ORDER, Version, parse_version
from airflow_rbak.broker.versions import version_text as version_text  # re-exported: the restore's modules use it

KEEP, DROP, REPLACE, LOSS = "keep", "drop", "replace", "loss"


@dataclass(frozen=True)
class Outcome:
    """What happens to one argument: its action, the value that replaces it (``replace``), and why."""

    action: str
    why: str = ""
    replacement: Any = None


@dataclass(frozen=True)
class QuorumRule:
    """One classic feature: its queue argument, its policy key, and its outcome before and from ``since``.

    ``value`` limits the rule to one value of the argument (None: any value). ``since`` None: never kept.
    """

    argument: str
    policy_key: str | None
    before: Outcome
    since: Version | None = None
    after: Outcome = Outcome(KEEP)
    value: Any = None

    def outcome(self, version: Version) -> Outcome:
        return self.after if self.since is not None and version >= self.since else self.before


#: The table. Order is the order changes are listed in.
QUORUM_RULES: tuple[QuorumRule, ...] = (
    QuorumRule("x-queue-mode", "queue-mode", Outcome(DROP, "a quorum queue keeps every message on disk: it has no lazy mode")),
    QuorumRule("x-queue-master-locator", None,
               Outcome(DROP, "classic queue placement; a quorum queue's leader is placed by x-queue-leader-locator")),
    QuorumRule("x-queue-version", "queue-version", Outcome(DROP, "the classic queue index version")),
    QuorumRule("x-overflow", "overflow", value="reject-publish-dlx",
               before=Outcome(REPLACE, "quorum queues reject publishes over the limit but cannot dead-letter them",
                              "reject-publish")),
    QuorumRule("x-max-priority", None, since=QUORUM_PRIORITY_ORDER.since(2),
               before=Outcome(LOSS, "quorum queues before RabbitMQ 4.0 have no message priorities: messages would be "
                                    "delivered in the order they were published"),
               after=Outcome(DROP, "quorum queues of RabbitMQ 4.0 and later order messages by priority without the "
                                   "argument: in two levels (0-4 normal, 5 and above high: high first, every third delivery the "
                                   "older of the two levels' oldest) "
                                   "before 4.3, in 32 levels (0-31, the higher first) from 4.3")),
    QuorumRule("x-message-ttl", "message-ttl", since=QUORUM_MESSAGE_TTL.since(True),
               before=Outcome(LOSS, "quorum queues before RabbitMQ 3.10 have no message TTL: messages would never expire")),
)


def target_version(text: str) -> Version:
    """The target's version (``3.10.8``) as a tuple; a ConfigurationError for text that is not one."""
    return parse_version(text)


def _rule(name: str, value: Any, by_policy_key: bool) -> QuorumRule | None:
    for rule in QUORUM_RULES:
        if (rule.policy_key if by_policy_key else rule.argument) == name and rule.value in (None, value):
            return rule
    return None


def argument_outcome(argument: str, value: Any, version: Version) -> Outcome:
    """What a quorum queue on ``version`` does with a classic queue's ``argument`` set to ``value``."""
    rule = _rule(argument, value, by_policy_key=False)
    return rule.outcome(version) if rule else Outcome(KEEP)


def policy_key_outcome(key: str, value: Any, version: Version) -> Outcome:
    """The same for a policy key applied to quorum queues."""
    rule = _rule(key, value, by_policy_key=True)
    return rule.outcome(version) if rule else Outcome(KEEP)
