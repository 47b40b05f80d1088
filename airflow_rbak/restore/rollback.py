"""Undo a definitions import: the target's definitions go back to the snapshot taken before it.

``POST /api/definitions`` only adds and overwrites, so importing the
snapshot again would leave every object the import created. A rollback
therefore reads the import record saved beside the snapshot and, object by
object, deletes what the import created (unless the snapshot held it) and
puts back the snapshot's version of what it replaced. Objects the import did
not touch are left alone, so changes others made since are kept. Deleting a
queue or vhost the import created deletes the messages restored into it:
that is what returning to the snapshot means. Afterwards every touched
object is read back and compared with the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from airflow_rbak.broker import management_admin
from airflow_rbak.broker.errors import ManagementWriteError
from airflow_rbak.broker.management import ManagementClient, addressable
from airflow_rbak.display import package_logger
from airflow_rbak.restore.definitions import current_definitions, import_record_key, load_definitions
from airflow_rbak.restore.definitions_diff import IDENTITY, identity, index, label
from airflow_rbak.restore.errors import DefinitionsImportError, DefinitionsRollbackError
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError

log = package_logger(__name__)
_SNAPSHOT_PREFIX = "definitions/rollback-before-import-"


@dataclass
class RollbackResult:
    """What a rollback deleted and put back (object labels), and from which snapshot."""

    snapshot_key: str
    deleted: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def latest_snapshot(storage: Storage, backup_id: str) -> str:
    """The newest rollback snapshot in the backup's folder (their timestamps sort)."""
    keys = sorted(i.key for i in storage.list(f"{backup_id}/{_SNAPSHOT_PREFIX}"))
    if not keys:
        raise DefinitionsRollbackError(f"backup {backup_id!r} holds no rollback snapshot: no definitions import was made from it")
    return keys[-1]


def rollback_definitions(client: ManagementClient, storage: Storage, backup_id: str, snapshot_key: str | None = None,
                         dry_run: bool = False) -> RollbackResult:
    """Return the target's definitions to the snapshot taken before the import; checks the result object by object."""
    key = snapshot_key or latest_snapshot(storage, backup_id)
    if not key.startswith(f"{backup_id}/{_SNAPSHOT_PREFIX}"):
        raise DefinitionsRollbackError(f"{key} is not a rollback snapshot of backup {backup_id!r}")
    record = _load_record(storage, key)
    try:
        snapshot = index(load_definitions(storage, key))
        current = index(current_definitions(client))
    except DefinitionsImportError as exc:
        raise DefinitionsRollbackError(str(exc).replace("nothing was imported", "nothing was changed")) from None
    deletes = _deletes(record, snapshot, current)
    restores = [(k, snapshot[identity(k, i)]) for k, i in _items(record, "replaced")
                if identity(k, i) in snapshot and current.get(identity(k, i)) != snapshot[identity(k, i)]]
    unaddressable = [label(identity(k, i)) for k, i in deletes if not all(addressable(str(v)) for v in _path_names(k, i))]
    if unaddressable:
        raise DefinitionsRollbackError(f"the management API cannot address {unaddressable[:5]} in a URL; nothing was changed")
    result = RollbackResult(
        key, [label(identity(k, i)) for k, i in deletes], [label(identity(k, i)) for k, i in restores], dry_run
    )
    if dry_run:
        return result
    try:
        for kind, item in deletes:
            _delete(client, kind, item)
        if restores:
            management_admin.send(client, "POST", "definitions", _document(restores))
    except ManagementWriteError as exc:
        raise DefinitionsImportError(str(exc)) from None
    _verify(client, [identity(k, i) for k, i in deletes + restores], snapshot)
    log.info("definitions rolled back to %s: %d deleted, %d put back", key, len(deletes), len(restores))
    return result


def _load_record(storage: Storage, snapshot_key: str) -> dict[str, Any]:
    key = import_record_key(snapshot_key)
    try:
        record = orjson.loads(storage.get(key))
    except ObjectNotFoundError:
        raise DefinitionsRollbackError(
            f"{key} is missing: without the record of what the import created, a rollback cannot tell it from what "
            "others created since; nothing was changed") from None
    except (StorageError, orjson.JSONDecodeError) as exc:
        raise DefinitionsRollbackError(f"{key} cannot be read ({type(exc).__name__}); nothing was changed") from None
    if not isinstance(record, dict):
        raise DefinitionsRollbackError(f"{key} is not an import record; nothing was changed")
    return record


def _items(record: dict[str, Any], part: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e["kind"], e["item"]) for e in record.get(part) or [] if isinstance(e, dict) and e.get("kind") in IDENTITY]


def _deletes(record: dict[str, Any], snapshot: dict, current: dict) -> list[tuple[str, dict[str, Any]]]:
    """Objects the import created that exist now and not in the snapshot, dependents first; a deleted vhost takes its
    contents with it."""
    created = [(k, i) for k, i in _items(record, "created") if identity(k, i) not in snapshot and identity(k, i) in current]
    gone_vhosts = {i["name"] for k, i in created if k == "vhosts"}
    order = list(IDENTITY)
    kept = [(k, i) for k, i in created if k == "vhosts" or i.get("vhost") not in gone_vhosts]
    return sorted(kept, key=lambda e: order.index(e[0]))


def _path_names(kind: str, item: dict[str, Any]) -> list[Any]:
    return [item.get(n) for n in ("vhost", "name", "source", "destination") if item.get(n) is not None]


def _delete(client: ManagementClient, kind: str, item: dict[str, Any]) -> None:
    q = lambda name: quote(str(name), safe="")  # noqa: E731
    vhost = item.get("vhost")
    if kind == "bindings":
        dest = "q" if item["destination_type"] == "queue" else "e"
        path = f"bindings/{q(vhost)}/e/{q(item['source'])}/{dest}/{q(item['destination'])}"
        for found in management_admin.send(client, "GET", path).json():
            same_arguments = (found.get("arguments") or {}) == (item.get("arguments") or {})
            if found.get("routing_key") == item.get("routing_key") and same_arguments:
                management_admin.send(client, "DELETE", f"{path}/{q(found['properties_key'])}")
        return
    paths = {"queues": f"queues/{q(vhost)}/{q(item.get('name'))}", "exchanges": f"exchanges/{q(vhost)}/{q(item.get('name'))}",
             "policies": f"policies/{q(vhost)}/{q(item.get('name'))}", "vhosts": f"vhosts/{q(item.get('name'))}",
             "parameters": f"parameters/{q(item.get('component'))}/{q(vhost)}/{q(item.get('name'))}",
             "permissions": f"permissions/{q(vhost)}/{q(item.get('user'))}",
             "topic_permissions": f"topic-permissions/{q(vhost)}/{q(item.get('user'))}",
             "global_parameters": f"global-parameters/{q(item.get('name'))}", "users": f"users/{q(item.get('name'))}"}
    management_admin.send(client, "DELETE", paths[kind])


def _document(objects: list[tuple[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    doc: dict[str, list[dict[str, Any]]] = {}
    for kind, item in objects:
        doc.setdefault(kind, []).append(item)
    return doc


def _verify(client: ManagementClient, touched: list[tuple], snapshot: dict) -> None:
    try:
        now = index(current_definitions(client))
    except DefinitionsImportError as exc:
        raise DefinitionsRollbackError(f"the rollback ran but its result cannot be read back ({exc})") from None
    wrong = [label(key) for key in touched if now.get(key) != snapshot.get(key)]
    if wrong:
        raise DefinitionsRollbackError(f"after the rollback {len(wrong)} objects still differ from the snapshot: {wrong[:10]}")
