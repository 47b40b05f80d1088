"""Transformations of a definitions document before a restore imports it: pure, and each says what it changed.

Moving off mirrored classic queues (gone in RabbitMQ 4.0) means importing
definitions other than the backup's: queues converted to quorum, mirroring
keys removed, policies left empty dropped. Each transformation takes a
definitions document (the export's shape: queues, exchanges, bindings,
policies, each item naming its vhost) and the options, and returns a new
document with every change it made. It never mutates its input, never
removes an object without a change naming it (``dropped`` or ``refused``),
and applied twice changes nothing more. What a quorum queue cannot keep
comes from the target's version (:mod:`~airflow_rbak.restore.quorum_support`):
a queue that would lose a behaviour is refused, left out with its bindings,
unless the user accepts that loss by name or keeps the queue's type.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from airflow_rbak.broker.versions import QUORUM_PRIORITY_ORDER
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore.definitions_diff import identity
from airflow_rbak.restore.quorum_support import DROP, LOSS, REPLACE, Version, argument_outcome, policy_key_outcome, version_text

CHANGED, DROPPED, REFUSED, KEPT = "changed", "dropped", "refused", "kept"
#: The queue types a ``queue_types`` rule may name: convert to quorum, or keep the classic queue as it is.
RULE_TYPES = ("quorum", "classic")
#: Classic queue mirroring: policy keys ``ha-*`` and queue arguments ``x-ha-*``.
MIRRORING_POLICY_PREFIX, MIRRORING_ARGUMENT_PREFIX = "ha-", "x-ha-"
#: A policy's ``apply-to`` values that reach quorum queues.
QUORUM_POLICY_TARGETS = ("queues", "all", "quorum_queues")
#: RabbitMQ's longest name (bytes; so at most as many characters).
MAX_NAME = 255
#: From 4.0 a quorum queue delivers by each message's priority property, which a classic queue without
#: x-max-priority ignores: measured on 4.3.6 (tests/restore/test_upgrade_to_43.py), a converted queue's messages of
#: priorities 5, 4 .. 0 published in that reverse order come out highest first.
PRIORITY_ORDER_SINCE = QUORUM_PRIORITY_ORDER.since(2)
PRIORITY_ORDER_NOTE = ("delivery order: from RabbitMQ 4.0 a quorum queue delivers messages by their priority "
                       "property, highest first (4.0: two levels, 0-4 and 5 and above), which this classic queue "
                       "ignored; messages published with different priorities no longer come out in publish order")
#: The kinds a transformed document lists, in the order the diff shows them, each with its singular.
KINDS = {"vhosts": "vhost", "queues": "queue", "exchanges": "exchange", "bindings": "binding", "policies": "policy"}


@dataclass(frozen=True)
class Change:
    """One object a transformation changed, dropped, refused or deliberately kept, and how or why."""

    transformation: str
    kind: str
    vhost: str
    name: str
    action: str
    detail: str

    def label(self) -> str:
        return f"{self.kind} {self.vhost}/{self.name}: {self.action}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class TransformOptions:
    """What the transformations need beyond the document: the target's version, the type rules, accepted losses.

    ``queue_types`` maps a queue name or glob to ``quorum`` or ``classic`` (kept as it is); an exact name wins
    over globs, and among globs the first listed. ``accept_losses`` names losses as ``ARGUMENT`` (every queue)
    or ``QUEUE_GLOB:ARGUMENT``, e.g. ``prio-*:x-max-priority``.
    """

    target_version: Version
    queue_types: tuple[tuple[str, str], ...] = (("*", "quorum"),)
    accept_losses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [f"{p}: {t}" for p, t in self.queue_types if not isinstance(p, str) or not p or t not in RULE_TYPES]
        if bad:
            raise ConfigurationError(f"queue_types maps queue names or globs to one of {list(RULE_TYPES)}; got {bad[:3]}")
        if not all(isinstance(a, str) and a.rpartition(":")[2] for a in self.accept_losses):
            raise ConfigurationError("accept_losses names each loss as ARGUMENT or QUEUE_GLOB:ARGUMENT "
                                     "(e.g. x-max-priority, or prio-*:x-max-priority)")

    def type_for(self, queue: str) -> str | None:
        """The type the rules give ``queue`` (None: no rule names it, it is left alone)."""
        for pattern, wanted in self.queue_types:
            if pattern == queue:
                return wanted
        return next((wanted for pattern, wanted in self.queue_types if fnmatch.fnmatchcase(queue, pattern)), None)

    def accepts(self, queue: str, argument: str) -> bool:
        """True when the user accepted losing ``argument`` on ``queue``."""
        for entry in self.accept_losses:
            glob, sep, named = entry.rpartition(":")
            if named == argument and (not sep or fnmatch.fnmatchcase(queue, glob)):
                return True
        return False


@dataclass(frozen=True)
class Transformed:
    """A transformed document and every change made on the way."""

    document: dict[str, Any]
    changes: tuple[Change, ...]


Transformation = Callable[[dict[str, Any], TransformOptions], Transformed]


def _is_queue(item: Any) -> bool:
    return (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("vhost"), str)
            and isinstance(item.get("arguments", {}), dict))


def _is_policy(item: Any) -> bool:
    return (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("vhost"), str)
            and isinstance(item.get("definition"), dict))


def queue_type(queue: dict[str, Any]) -> str:
    """A queue's type as an export gives it: ``type`` (newer brokers), else ``x-queue-type``, else classic."""
    return str(queue.get("type") or (queue.get("arguments") or {}).get("x-queue-type") or "classic")


def _items(doc: dict[str, Any], kind: str) -> list[Any]:
    items = doc.get(kind)
    return list(items) if isinstance(items, list) else []


def _with(doc: dict[str, Any], **parts: list[Any]) -> dict[str, Any]:
    """``doc`` with the given lists, adding none the document did not have."""
    return {**doc, **{k: v for k, v in parts.items() if k in doc or v}}


def convert_to_quorum(doc: dict[str, Any], options: TransformOptions) -> Transformed:
    """Classic queues the rules name become quorum queues; policies reaching quorum queues lose what those ignore."""
    name, changes = "convert_to_quorum", []
    queues, refused = [], set()
    for q in _items(doc, "queues"):
        wanted = options.type_for(q["name"]) if _is_queue(q) and queue_type(q) == "classic" else None
        if wanted is None:
            queues.append(q)
        elif wanted == "classic" or q.get("exclusive"):
            why = "an exclusive queue belongs to one connection and cannot be a quorum queue" if wanted == "quorum" \
                else "kept a classic queue as queue_types asks"
            queues.append(q)
            changes.append(Change(name, "queue", q["vhost"], q["name"], KEPT, why))
        else:
            converted, notes, losses = _to_quorum(q, options)
            if losses:
                refused.add((q["vhost"], q["name"]))
                changes.append(Change(name, "queue", q["vhost"], q["name"], REFUSED, _refusal(q["name"], losses)))
            else:
                queues.append(converted)
                if options.target_version >= PRIORITY_ORDER_SINCE and "x-max-priority" not in (q.get("arguments") or {}):
                    notes.append(PRIORITY_ORDER_NOTE)
                changes.append(Change(name, "queue", q["vhost"], q["name"], CHANGED, "; ".join(notes)))
    bindings = []
    for b in _items(doc, "bindings"):
        if isinstance(b, dict) and b.get("destination_type") == "queue" and (b.get("vhost"), b.get("destination")) in refused:
            changes.append(Change(name, "binding", str(b.get("vhost")), _binding_name(b), DROPPED, "its queue was refused"))
        else:
            bindings.append(b)
    quorum = [(q["vhost"], q["name"]) for q in queues if _is_queue(q) and queue_type(q) == "quorum"]
    policies = [_quorum_policy(p, quorum, options, changes) for p in _items(doc, "policies")]
    return Transformed(_with(doc, queues=queues, bindings=bindings, policies=policies), tuple(changes))


def _to_quorum(queue: dict[str, Any], options: TransformOptions) -> tuple[dict[str, Any], list[str], list[tuple[str, str]]]:
    """The queue as a quorum queue, what changed, and the losses nobody accepted."""
    args = dict(queue.get("arguments") or {})
    notes: list[str] = ["classic -> quorum"]
    losses: list[tuple[str, str]] = []
    for arg, value in sorted(args.items()):
        outcome = argument_outcome(arg, value, options.target_version)
        if outcome.action == DROP:
            del args[arg]
            notes.append(f"removed {arg} ({outcome.why})")
        elif outcome.action == REPLACE:
            args[arg] = outcome.replacement
            notes.append(f"{arg} {value} -> {outcome.replacement} ({outcome.why})")
        elif outcome.action == LOSS and options.accepts(queue["name"], arg):
            del args[arg]
            notes.append(f"removed {arg}, a loss accepted by accept_losses ({outcome.why})")
        elif outcome.action == LOSS:
            losses.append((arg, f"{arg} on RabbitMQ {version_text(options.target_version)}: {outcome.why}"))
    args["x-queue-type"] = "quorum"
    converted = {**queue, "arguments": args}
    if "type" in queue:
        converted["type"] = "quorum"
    if queue.get("durable") is False:
        converted["durable"] = True
        notes.append("made durable (a quorum queue always is)")
    if queue.get("auto_delete"):
        converted["auto_delete"] = False
        notes.append("no longer auto-delete (a quorum queue cannot be)")
    return converted, notes, losses


def _refusal(queue: str, losses: list[tuple[str, str]]) -> str:
    accept = ", ".join(f'"{queue}:{arg}"' for arg, _ in losses)
    reasons = "; ".join(text for _, text in losses)
    return (f"{reasons}. Left out with its bindings and messages: accept the loss with accept_losses [{accept}]"
            f", or keep its type with queue_types {{\"{queue}\": \"classic\"}}")


def _quorum_policy(policy: Any, quorum: list[tuple[str, str]], options: TransformOptions, changes: list[Change]) -> Any:
    if not _is_policy(policy) or policy.get("apply-to", "all") not in QUORUM_POLICY_TARGETS:
        return policy
    reached = [q for v, q in quorum if v == policy["vhost"] and _pattern_matches(policy.get("pattern"), q)]
    if not reached:
        return policy
    definition, notes, kept = dict(policy["definition"]), [], []
    for key, value in sorted(policy["definition"].items()):
        outcome = policy_key_outcome(key, value, options.target_version)
        if outcome.action == DROP:
            del definition[key]
            notes.append(f"removed {key} ({outcome.why})")
        elif outcome.action == REPLACE:
            definition[key] = outcome.replacement
            notes.append(f"{key} {value} -> {outcome.replacement} ({outcome.why})")
        elif outcome.action == LOSS:
            kept.append(f"kept {key}, which these quorum queues ignore ({outcome.why})")
    more = f" and {len(reached) - 5} more" if len(reached) > 5 else ""
    reach = f"it applies to quorum queues {', '.join(reached[:5])}{more}"
    if notes or kept:
        changes.append(Change("convert_to_quorum", "policy", policy["vhost"], policy["name"], CHANGED if notes else KEPT,
                              "; ".join(notes + kept) + f"; {reach}"))
    return {**policy, "definition": definition} if notes else policy


def _pattern_matches(pattern: Any, name: str) -> bool:
    """A policy pattern as RabbitMQ reads it: a regular expression found anywhere in the name.

    Both come from the backup, untrusted: longer than RabbitMQ allows a name to be, neither is matched.
    """
    if not isinstance(pattern, str) or len(pattern) > MAX_NAME or len(name) > MAX_NAME:
        return False
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


def _binding_name(binding: dict[str, Any]) -> str:
    return f"{binding.get('source')} -> {binding.get('destination_type')} {binding.get('destination')}"


def strip_mirroring(doc: dict[str, Any], options: TransformOptions) -> Transformed:
    """Remove classic queue mirroring: ``ha-*`` policy keys and ``x-ha-*`` queue arguments (RabbitMQ 4.0 has neither)."""
    changes: list[Change] = []
    why = "classic queue mirroring, removed in RabbitMQ 4.0"

    def policy(p: Any) -> Any:
        found = sorted(k for k in p["definition"] if k.startswith(MIRRORING_POLICY_PREFIX)) if _is_policy(p) else []
        if not found:
            return p
        changes.append(Change("strip_mirroring", "policy", p["vhost"], p["name"], CHANGED, f"removed {', '.join(found)} ({why})"))
        return {**p, "definition": {k: v for k, v in p["definition"].items() if k not in found}}

    def queue(q: Any) -> Any:
        found = sorted(a for a in q.get("arguments") or {} if a.startswith(MIRRORING_ARGUMENT_PREFIX)) if _is_queue(q) else []
        if not found:
            return q
        changes.append(Change("strip_mirroring", "queue", q["vhost"], q["name"], CHANGED, f"removed {', '.join(found)} ({why})"))
        return {**q, "arguments": {k: v for k, v in q["arguments"].items() if k not in found}}

    policies, queues = [policy(p) for p in _items(doc, "policies")], [queue(q) for q in _items(doc, "queues")]
    return Transformed(_with(doc, policies=policies, queues=queues), tuple(changes))


def drop_empty_policies(doc: dict[str, Any], options: TransformOptions) -> Transformed:
    """Drop policies with no keys left: an empty policy still outranks, and so hides, a lower-priority one."""
    changes, kept = [], []
    for p in _items(doc, "policies"):
        if _is_policy(p) and not p["definition"]:
            changes.append(Change("drop_empty_policies", "policy", p["vhost"], p["name"], DROPPED, "no keys left"))
        else:
            kept.append(p)
    return Transformed(_with(doc, policies=kept), tuple(changes))


#: Every transformation by name, in the order they run whatever order they are named in.
TRANSFORMATIONS: dict[str, Transformation] = {
    "convert_to_quorum": convert_to_quorum,
    "strip_mirroring": strip_mirroring,
    "drop_empty_policies": drop_empty_policies,
}


def queue_type_rules(value: Any) -> tuple[tuple[str, str], ...]:
    """The ``queue_types`` setting (a mapping, or pairs) as ordered pairs; bad rules are a ConfigurationError."""
    if isinstance(value, Mapping):
        value = list(value.items())
    try:
        rules = tuple((str(p), str(t)) for p, t in value or ())
    except (TypeError, ValueError):
        raise ConfigurationError('queue_types maps queue names or globs to "quorum" or "classic"') from None
    TransformOptions((0, 0, 0), rules)  # validates
    return rules


def check_names(names: Iterable[str]) -> tuple[str, ...]:
    """The named transformations in running order; unknown names are a ConfigurationError."""
    names = tuple(names)
    unknown = sorted(set(names) - set(TRANSFORMATIONS))
    if unknown:
        raise ConfigurationError(f"unknown transformations {unknown}; known: {list(TRANSFORMATIONS)}")
    return tuple(n for n in TRANSFORMATIONS if n in names)


def transform(doc: dict[str, Any], names: Iterable[str], options: TransformOptions) -> Transformed:
    """Apply the named transformations in their running order."""
    changes: list[Change] = []
    for name in check_names(names):
        result = TRANSFORMATIONS[name](doc, options)
        doc, changes = result.document, changes + list(result.changes)
    return Transformed(doc, tuple(changes))


def object_lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per object (its sorted JSON), kinds in order and objects by identity, so that diffs line up."""
    lines = []
    for kind, singular in KINDS.items():
        items = [i for i in doc.get(kind) or [] if isinstance(i, dict)]
        keyed = sorted((str(identity(kind, i)), _json(i)) for i in items)
        lines += [f"{singular} {text}" for _, text in keyed]
    return lines


def _json(item: Any) -> str:
    return orjson.dumps(item, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The transformed document against the original, object by object: ``-`` lines removed, ``+`` lines added."""
    lines = difflib.unified_diff(object_lines(before), object_lines(after), n=0, lineterm="")
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---"))]
