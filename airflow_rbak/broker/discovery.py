"""Which queues a backup covers, and what it must know about each (type, arguments, delivery limit)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.versions import DEFAULT_DELIVERY_LIMIT, parse_version  # noqa: F401 (re-exported)
from airflow_rbak.exceptions import ConfigurationError

QUEUE_TYPES = ("classic", "quorum", "stream")
#: RabbitMQ 4.0 gave quorum queues a default delivery limit of 20 (the version table's ``DEFAULT_DELIVERY_LIMIT``).
DEFAULT_QUORUM_DELIVERY_LIMIT_4X: int = DEFAULT_DELIVERY_LIMIT.steps[-1].value


@dataclass(frozen=True)
class QueueInfo:
    """One queue as the management API describes it."""

    vhost: str
    name: str
    queue_type: str
    arguments: dict[str, Any] = field(default_factory=dict)
    effective_policy: dict[str, Any] = field(default_factory=dict)
    operator_policy: dict[str, Any] = field(default_factory=dict)
    messages: int = 0
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    #: Consumers attached when the management API last sampled the queue (other clients' included).
    consumers: int = 0

    @classmethod
    def from_api(cls, data: dict[str, Any], operator_policy: dict[str, Any] | None = None) -> QueueInfo:
        return cls(
            vhost=data["vhost"],
            name=data["name"],
            queue_type=str(data.get("type") or data.get("arguments", {}).get("x-queue-type") or "classic"),
            arguments=dict(data.get("arguments") or {}),
            effective_policy=dict(data.get("effective_policy_definition") or {}),
            operator_policy=dict(operator_policy or {}),
            messages=int(data.get("messages") or 0),
            durable=bool(data.get("durable", True)),
            auto_delete=bool(data.get("auto_delete", False)),
            exclusive=bool(data.get("exclusive", False)),
            consumers=int(data.get("consumers") or 0),
        )


T = TypeVar("T")


def effective_delivery_limit(info: QueueInfo, version: tuple[int, int, int]) -> int | None:
    """The delivery limit RabbitMQ enforces on a quorum queue, or None for no limit.

    RabbitMQ takes the smallest of the ``x-delivery-limit`` argument, the
    policy's and the operator policy's ``delivery-limit``; where the version
    table gives a default (4.0 on), a quorum queue without any has that limit,
    and a negative value means none.
    """
    if info.queue_type != "quorum":
        return None
    candidates = [
        int(v)
        for v in (
            info.arguments.get("x-delivery-limit"),
            info.effective_policy.get("delivery-limit"),
            info.operator_policy.get("delivery-limit"),
        )
        if v is not None
    ]
    default = DEFAULT_DELIVERY_LIMIT.value(version)
    if default is not None:
        if any(c < 0 for c in candidates) and not [c for c in candidates if c >= 0]:
            return None
        candidates = [c for c in candidates if c >= 0]
        return min(candidates) if candidates else default
    return min(candidates) if candidates else None


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class QueueSelector:
    """Which queues to back up: vhosts, include/exclude globs, types and a minimum depth."""

    vhosts: tuple[str, ...] | None = None
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    queue_types: tuple[str, ...] = QUEUE_TYPES
    min_messages: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.queue_types) - set(QUEUE_TYPES)
        if unknown:
            raise ConfigurationError(f"unknown queue types {sorted(unknown)}; expected some of {list(QUEUE_TYPES)}")
        if self.min_messages < 0:
            raise ConfigurationError("min_messages must be >= 0")

    @classmethod
    def from_params(cls, vhosts: Iterable[str] | None = None, include: Iterable[str] | None = None,
                    exclude: Iterable[str] | None = None, queue_types: Iterable[str] | None = None) -> QueueSelector:
        """The selector a backup's parameters (DAG params, ``rbak backup --conf``) describe; empty means the default."""
        return cls(vhosts=tuple(vhosts) if vhosts else None, include=tuple(include or ("*",)), exclude=tuple(exclude or ()),
                   queue_types=tuple(queue_types) if queue_types else QUEUE_TYPES)

    def accepts(self, info: QueueInfo) -> bool:
        if self.vhosts is not None and info.vhost not in self.vhosts:
            return False
        if not _matches(info.name, self.include) or _matches(info.name, self.exclude):
            return False
        return info.queue_type in self.queue_types and info.messages >= self.min_messages


def _operator_policies(client: ManagementClient, vhost: str) -> dict[str, dict[str, Any]]:
    try:
        return {p["name"]: p.get("definition", {}) for p in client.operator_policies(vhost)}
    except Exception:  # noqa: BLE001 - older brokers or missing permission: no operator policies
        return {}


def describe_queue(client: ManagementClient, vhost: str, name: str) -> QueueInfo:
    """The one queue's info, with its operator policy's definition resolved."""
    data = client.queue(vhost, name)
    op_name = data.get("operator_policy")
    return QueueInfo.from_api(data, _operator_policies(client, vhost).get(op_name, {}) if op_name else None)


def discover_queues(client: ManagementClient, selector: QueueSelector | None = None) -> list[QueueInfo]:
    """Every queue the selector accepts, sorted by vhost then name (internal ``amq.*`` queues excluded)."""
    selector = selector or QueueSelector()
    known = client.vhosts()
    vhosts = selector.vhosts if selector.vhosts is not None else tuple(known)
    missing = [v for v in vhosts if v not in known]
    if missing:  # a typo must not make an empty backup that looks complete
        raise ConfigurationError(f"vhosts names {', '.join(repr(v) for v in missing[:10])}, which the broker does not have "
                                 f"(or this user may not see); it has {', '.join(repr(v) for v in known[:20]) or 'none'}")
    found: list[QueueInfo] = []
    for vhost in vhosts:
        op = _operator_policies(client, vhost)
        for data in client.queues(vhost):
            if data["name"].startswith("amq."):
                continue
            info = QueueInfo.from_api(data, op.get(data.get("operator_policy") or "", None))
            if selector.accepts(info):
                found.append(info)
    return sorted(found, key=lambda q: (q.vhost, q.name))


def group_queues(queues: list[T], max_groups: int) -> list[list[T]]:
    """Split the queues, in order, into at most ``max_groups`` groups of nearly equal size.

    Airflow refuses to map a task over more than ``[core] max_map_length`` (1,024) items, so a broker with
    more queues than that is captured (or restored) by tasks that each take a group in turn; up to
    ``max_groups`` queues, every queue keeps a task of its own.
    """
    if max_groups < 1:
        raise ConfigurationError(f"max_groups must be >= 1, got {max_groups}")
    count = min(len(queues), max_groups)
    size, extra = divmod(len(queues), count) if count else (0, 0)
    groups, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        groups.append(queues[start:end])
        start = end
    return groups
