"""Definitions compared object by object: what an import would create, replace, or leave as it is.

RabbitMQ's ``POST /api/definitions`` only adds and overwrites, so an import
of a backup taken before a policy was raised puts the old policy back. The
restore therefore compares each selected object with the target's current
one by its identity (:data:`IDENTITY`, one table for import and rollback):
``missing`` mode imports only what the target lacks, ``replace`` mode also
overwrites what differs. The same table tells a rollback which objects an
import created (to delete) and which it replaced (to put back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

#: Kinds an import never changes once they exist (see the module docstring).
FIXED_ONCE_DECLARED = ("queues", "exchanges")
#: The fields that name an object of each kind of a definitions document, in the order a rollback deletes kinds
#: (what depends on an object goes before it).
IDENTITY: dict[str, tuple[str, ...]] = {
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key", "arguments"),
    "queues": ("vhost", "name"),
    "exchanges": ("vhost", "name"),
    "policies": ("vhost", "name"),
    "parameters": ("vhost", "component", "name"),
    "topic_permissions": ("user", "vhost", "exchange"),
    "permissions": ("user", "vhost"),
    "global_parameters": ("name",),
    "users": ("name",),
    "vhosts": ("name",),
}


def identity(kind: str, item: dict[str, Any]) -> tuple:
    """The identity of ``item`` (a document entry of ``kind``); tables and lists compare by their sorted JSON."""
    return (kind, *(_plain(item.get(name)) for name in IDENTITY[kind]))


def _plain(value: Any) -> Any:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode() if isinstance(value, (dict, list)) else value


def index(document: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """Every object of the document's known kinds by identity."""
    return {identity(kind, item): item for kind in IDENTITY for item in document.get(kind) or [] if isinstance(item, dict)}


_SINGULAR = {"policies": "policy", "global_parameters": "global_parameter"}


def label(key: tuple) -> str:
    """A short human name of an object identity, e.g. ``policy prod/limits``."""
    kind, *parts = key
    return f"{_SINGULAR.get(kind, kind[:-1])} " + "/".join("" if p is None else str(p) for p in parts if p not in ("", "{}"))


@dataclass
class ImportChanges:
    """What importing the selected definitions would do to the target, object by object."""

    mode: str
    create: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    replace: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    cannot_replace: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    unchanged: int = 0

    def to_apply(self) -> list[tuple[str, dict[str, Any]]]:
        """The objects the mode imports: ``missing`` only creates, ``replace`` also overwrites."""
        return self.create + (self.replace if self.mode == "replace" else [])

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "create": [label(identity(k, i)) for k, i in self.create],
                "replace": [label(identity(k, i)) for k, i in self.replace],
                "cannot_replace": [label(identity(k, i)) for k, i in self.cannot_replace], "unchanged": self.unchanged}


def compare(selected: dict[str, dict[str, list[dict[str, Any]]]], current: dict[str, Any], mode: str) -> ImportChanges:
    """Sort every selected object (per target vhost, as ``select_definitions`` gives them) by what the target has."""
    have = index(current)
    changes = ImportChanges(mode)
    for vhost, part in selected.items():
        if identity("vhosts", {"name": vhost}) not in have:
            changes.create.append(("vhosts", {"name": vhost}))
        for kind, items in part.items():
            for item in items:
                full = {**item, "vhost": vhost}
                existing = have.get(identity(kind, full))
                if existing is None:
                    changes.create.append((kind, full))
                elif {k: v for k, v in existing.items() if k != "vhost"} != item:
                    (changes.cannot_replace if kind in FIXED_ONCE_DECLARED else changes.replace).append((kind, full))
                else:
                    changes.unchanged += 1
    return changes


def per_vhost(objects: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Objects (vhosts aside) as one import document per vhost, without their ``vhost`` field."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for kind, item in objects:
        if kind == "vhosts":
            continue
        part = out.setdefault(item["vhost"], {})
        part.setdefault(kind, []).append({k: v for k, v in item.items() if k != "vhost"})
    return out
