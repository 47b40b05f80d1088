"""Whether a restored quorum queue delivers its messages in the order its source did: quorum priorities by version.

A restore publishes a queue's records in the order the backup stored them, which is the order the source delivered
them in. A target queue that orders by priority the way the source did, or less (not at all; two levels after 4.3's
32, whose order is already highest first), delivers them in that order again; one that orders by more reorders
them. Nothing in the messages is lost, so the restore is not refused: the plan and the approval request say it, per
queue, before anything is published. Quorum queues order priorities by version (the version table's
``QUORUM_PRIORITY_ORDER``, :mod:`airflow_rbak.broker.versions`; measured on 3.10.8, 4.0.5 and 4.3.6,
``tests/broker/behaviour.py``):

* before 4.0: no priorities, publish order;
* 4.0 to 4.2: two levels (above 4 is high), high first but every third delivery the older of the two levels' oldest
  (two high for one normal while the normal ones are older);
* from 4.3: 32 levels (0..31), the higher first.

A classic queue's order depends on its ``x-max-priority`` alone, the same on every version; a stream has no
priorities. A classic queue converted to quorum is the transformations' note (``PRIORITY_ORDER_NOTE``), not this one.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_rbak.broker.versions import QUORUM_PRIORITY_ORDER
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.plan import RestorePlan
from airflow_rbak.restore.quorum_support import Version, target_version, version_text

#: The first versions of each quorum ordering (the version table's ``QUORUM_PRIORITY_ORDER``, by levels).
TWO_LEVELS_SINCE: Version = QUORUM_PRIORITY_ORDER.since(2)
THIRTY_TWO_LEVELS_SINCE: Version = QUORUM_PRIORITY_ORDER.since(32)


def quorum_ordering(version: Version) -> str:
    """How a quorum queue of ``version`` orders messages of different priorities, in words."""
    return QUORUM_PRIORITY_ORDER.step(version).broker


def _strength(version: Version) -> int:
    """0: publish order, 1: two levels, 2: 32 levels (the table's steps, in order). A stored order comes out of a
    queue of the same or a lower strength unchanged (a 4.3 order is highest first, so 4.0's high messages are all the
    older ones), and is reordered by a higher one."""
    return QUORUM_PRIORITY_ORDER.level(version)


def order_warning(source_version: Version | None, source_type: str, target_version: Version | None,
                  target_type: str) -> str | None:
    """Why the target will deliver a queue's messages of different priorities in another order than the source did
    (None: the same order, or a queue that is not quorum on both sides). An unknown version on either side is said."""
    if source_type != "quorum" or target_type != "quorum" or target_version is None or not _strength(target_version):
        return None
    target = f"the target's RabbitMQ {version_text(target_version)} quorum queues have {quorum_ordering(target_version)}"
    if source_version is None:
        return (f"delivery order: the backup does not say its RabbitMQ version, and {target}: messages of different "
                "priorities may be delivered in another order than the source delivered them")
    if _strength(target_version) <= _strength(source_version):
        return None  # the stored order (the source's delivery order) comes out again
    return (f"delivery order: the source's RabbitMQ {version_text(source_version)} quorum queues have "
            f"{quorum_ordering(source_version)}; {target}: messages of different priorities will be delivered in "
            "another order than the source delivered them (every message is restored)")


def _version(text: str | None) -> Version | None:
    """A manifest's version (untrusted text) as a tuple; None when absent or unreadable."""
    try:
        return target_version(text) if text else None
    except ConfigurationError:
        return None


def with_warnings(plan: RestorePlan) -> RestorePlan:
    """The plan with each queue's delivery-order warning, from the backup's and the target's versions."""
    source, target = _version(plan.source_rabbitmq_version), _version(plan.target_rabbitmq_version)
    return replace(plan, queues=tuple(
        replace(q, delivery_order_warning=order_warning(source, q.queue_type, target, q.target_queue_type or q.queue_type))
        for q in plan.queues))
