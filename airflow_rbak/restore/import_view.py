"""Every object a definitions import creates or replaces, with what acts beyond it: what the approver must see.

A queue's name tells little of what importing it does. A policy applies to
every matching queue of its vhost, restored or not (a planted ``.*`` policy
with ``message-ttl: 0`` empties live queues); arguments change how a queue or
exchange behaves; a binding whose source exchange already exists on the target
copies live traffic into the restored queue. So the plan keeps each object to
import whole, sorted by kind, vhost and name (never in the export's order),
with notes computed against the target's definitions at plan time: which
existing queues that the restore does not bring a policy would match, and
which bindings start from an existing exchange. No I/O here.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_rbak.restore.definitions_diff import ImportChanges, identity, index, label

#: Kinds in the order the approval lists them.
KIND_ORDER = ("vhosts", "policies", "queues", "exchanges", "bindings")
#: A policy's ``apply-to`` values and the queue types they reach (None: every type).
QUEUE_TARGETS: dict[str, tuple[str, ...] | None] = {"all": None, "queues": None, "classic_queues": ("classic",),
                                                   "quorum_queues": ("quorum",), "streams": ("stream",)}
#: Nested repetition (``(a+)+``) may take exponential time in Python's ``re``; such patterns are not evaluated.
_NESTED_REPEAT = re.compile(r"[+*}]\s*\)[+*{?]")


def import_view(changes: ImportChanges, current: dict[str, Any],
                selected: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One entry per object the import applies: ``kind``, ``action`` (create/replace), ``vhost``, ``label``, the
    object as imported, and ``notes`` on what it does beyond itself; sorted. ``selected``: the queues the restore
    brings (per target vhost), which a policy's reach leaves out."""
    have = index(current)
    imported = {(vhost, q.get("name")) for vhost, part in selected.items() for q in part.get("queues", [])}
    created = {id(item) for _, item in changes.create}
    entries = []
    for kind, item in changes.to_apply():
        entry = {"kind": kind, "action": "create" if id(item) in created else "replace",
                 "vhost": item.get("vhost") or item.get("name"), "label": label(identity(kind, item)), "item": item,
                 "notes": {}}
        if kind == "policies":
            entry["notes"] = {"matches_other_queues": _policy_reach(item, current, imported)}
        elif kind == "bindings":
            source = identity("exchanges", {"vhost": item["vhost"], "name": item["source"]})
            live = item["source"] == "" or source in have
            entry["notes"] = {"from_existing_exchange": bool(live and item.get("destination_type") == "queue")}
        entries.append(entry)
    return sorted(entries, key=lambda e: (KIND_ORDER.index(e["kind"]) if e["kind"] in KIND_ORDER else len(KIND_ORDER),
                                          str(e["vhost"]), e["label"]))


def _policy_reach(policy: dict[str, Any], current: dict[str, Any], imported: set[tuple[str, Any]]) -> list[str] | str:
    """The target's existing queues of the policy's vhost that it would match and that this import does not bring,
    sorted; a string when that cannot be computed."""
    pattern, apply_to = policy.get("pattern", ""), policy.get("apply-to", "all")
    if apply_to not in QUEUE_TARGETS:
        return []  # applies to exchanges only
    if _NESTED_REPEAT.search(pattern) or len(pattern) > 1000:
        return "not computed (a pattern with nested repetition); assume it may match every queue of its vhost"
    try:
        regex = re.compile(pattern)
    except re.error:
        return "not computed (Python cannot read the pattern); assume it may match every queue of its vhost"
    types = QUEUE_TARGETS[apply_to]
    found = set()
    for queue in current.get("queues") or []:
        if not isinstance(queue, dict) or queue.get("vhost") != policy["vhost"] or not isinstance(queue.get("name"), str):
            continue
        kind = str(queue.get("type") or (queue.get("arguments") or {}).get("x-queue-type") or "classic")
        if (queue["vhost"], queue["name"]) in imported or (types is not None and kind not in types):
            continue
        if regex.search(queue["name"]):
            found.add(queue["name"])
    return sorted(found)
