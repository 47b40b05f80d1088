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

Both files lie in the backup's location, where anyone who can write could
plant them, so neither is taken as it is. The import record must open under
the deployment's seal (:mod:`airflow_rbak.storage.sealed`), name this
snapshot, and pin it by SHA-256 and size, which the snapshot must match; and
it may list only the kinds a restore imports (:data:`ROLLBACK_KINDS`): a
record naming anything else (users, permissions, parameters) is refused
whole. The record also names the cluster its import changed and the restore
run that made it (:mod:`.import_record`): a rollback acts only on the cluster
it reaches, so a record written for another cluster, or one naming none (an
older version's), is refused, never passed over for an older one; a person
may name the run to undo instead of taking the newest import. Any refusal
changes nothing on the target.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from airflow_rbak.broker import management_admin
from airflow_rbak.broker.errors import BrokerError, ManagementWriteError
from airflow_rbak.broker.management import ManagementClient, addressable
from airflow_rbak.codec import CodecError
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS, JsonLimits, loads_bounded
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.display import package_logger
from airflow_rbak.restore.definitions import current_definitions
from airflow_rbak.restore.definitions_diff import IDENTITY, identity, index, label
from airflow_rbak.restore.errors import DefinitionsImportError, DefinitionsRollbackError
from airflow_rbak.restore.import_record import IMPORT_RECORD, MAX_NAME_CHARS, cluster_refusal, import_record_key, shown
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError
from airflow_rbak.storage.sealed import StateSeal, UntrustedStateError, default_seal

log = package_logger(__name__)
_SNAPSHOT_PREFIX = "definitions/rollback-before-import-"
_RECORD_PREFIX = "definitions/import-record-"
#: The kinds a definitions restore imports (``restore.definitions``), and so the only kinds a rollback changes: never
#: users, permissions, topic permissions, parameters or global parameters.
ROLLBACK_KINDS = ("bindings", "queues", "exchanges", "policies", "vhosts")
#: The caps of an import record (it lists objects, as a definitions export does).
RECORD_LIMITS = JsonLimits(max_bytes=DEFINITIONS_LIMITS.max_bytes, max_values=DEFINITIONS_LIMITS.max_values,
                           what="an import record")
_NAME_FIELDS = {"vhosts": ("name",), "queues": ("vhost", "name"), "exchanges": ("vhost", "name"),
                "policies": ("vhost", "name"), "bindings": ("vhost", "source", "destination")}


@dataclass
class RollbackResult:
    """What a rollback deleted and put back (object labels, every one), from which snapshot and record, and the
    import it undid: the cluster (identity and name) and the restore run its record names."""

    snapshot_key: str
    deleted: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    dry_run: bool = False
    record_key: str = ""
    snapshot_sha256: str = ""
    cluster: str | None = None
    cluster_name: str | None = None
    restore_run: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def latest_snapshot(storage: Storage, backup_id: str) -> str:
    """The newest rollback snapshot in the backup's folder (their timestamps sort)."""
    keys = sorted(i.key for i in storage.list(f"{backup_id}/{_SNAPSHOT_PREFIX}"))
    if not keys:
        raise DefinitionsRollbackError(f"backup {backup_id!r} holds no rollback snapshot: no definitions import was made from it")
    return keys[-1]


def rollback_definitions(client: ManagementClient, storage: Storage, backup_id: str, snapshot_key: str | None = None,
                         dry_run: bool = False, seal: StateSeal | None = None,
                         restore_run: str | None = None) -> RollbackResult:
    """Return the target's definitions to the snapshot taken before the import; checks the result object by object.

    Which import: ``snapshot_key``'s, else the first of restore run ``restore_run`` (:func:`run_snapshot`), else the
    newest (:func:`latest_snapshot`). Only a sealed import record (``seal``, default
    :func:`~airflow_rbak.storage.sealed.default_seal`) written for the cluster the client reaches, beside a snapshot
    matching its pin, is acted on; anything else raises :class:`DefinitionsRollbackError` before the target is touched.
    """
    seal = seal or default_seal()
    key, record = _chosen_import(storage, backup_id, snapshot_key, restore_run, seal)  # the location first: no broker
    here, here_name = _reached_cluster(client)
    refused = cluster_refusal(record, import_record_key(key), here, here_name)
    if refused:
        raise DefinitionsRollbackError(refused)
    snapshot = index(pinned_snapshot(storage, key, record))
    try:
        current = index(current_definitions(client))
    except DefinitionsImportError as exc:
        raise DefinitionsRollbackError(str(exc).replace("nothing was imported", "nothing was changed")) from None
    deletes = _deletes(record, snapshot, current)
    restores = [(k, snapshot[identity(k, i)]) for k, i in _items(record, "replaced")
                if identity(k, i) in snapshot and current.get(identity(k, i)) != snapshot[identity(k, i)]]
    unaddressable = [label(identity(k, i)) for k, i in deletes if not all(addressable(str(v)) for v in _path_names(k, i))]
    if unaddressable:
        raise DefinitionsRollbackError(f"the management API cannot address {unaddressable} in a URL; nothing was changed")
    result = RollbackResult(key, [label(identity(k, i)) for k, i in deletes], [label(identity(k, i)) for k, i in restores],
                            dry_run, import_record_key(key), record["snapshot_sha256"], record["cluster"],
                            record.get("cluster_name"), record.get("run"))
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


def _reached_cluster(client: ManagementClient) -> tuple[str, str | None]:
    """The identity and name of the cluster the connection reaches now: the one a rollback would change."""
    try:
        return client.cluster_identity(), client.cluster_name()
    except BrokerError as exc:
        raise DefinitionsRollbackError(f"cannot read which cluster the connection reaches ({exc}); nothing was changed") from None


def _chosen_import(storage: Storage, backup_id: str, snapshot_key: str | None, restore_run: str | None,
                   seal: StateSeal) -> tuple[str, dict[str, Any]]:
    """The snapshot key and checked record of the import to undo (see :func:`rollback_definitions`)."""
    if snapshot_key is not None and restore_run is not None:
        raise DefinitionsRollbackError("name the import by its snapshot or by its restore run, not both; nothing was changed")
    key = snapshot_key or (run_snapshot(storage, backup_id, restore_run, seal) if restore_run is not None
                           else latest_snapshot(storage, backup_id))
    if not key.startswith(f"{backup_id}/{_SNAPSHOT_PREFIX}"):
        raise DefinitionsRollbackError(f"{key} is not a rollback snapshot of backup {backup_id!r}")
    return key, load_record(storage, key, seal)


def run_snapshot(storage: Storage, backup_id: str, restore_run: str, seal: StateSeal) -> str:
    """The snapshot before restore run ``restore_run``'s first import from the backup (a retried definitions step
    imports again: undoing the run returns to before the first), found among the backup's sealed import records;
    records that fail their seal are passed over, and counted in the refusal when none names the run."""
    found, untrusted = [], 0
    for key in sorted(i.key for i in storage.list(f"{backup_id}/{_RECORD_PREFIX}")):
        try:
            record = seal.read(storage, IMPORT_RECORD, key, RECORD_LIMITS)
        except (UntrustedStateError, StorageError):
            untrusted += 1
            continue
        if not isinstance(record, dict) or record.get("run") != restore_run:
            continue
        snapshot = record.get("snapshot")
        if isinstance(snapshot, str) and import_record_key(snapshot) == key:  # load_record checks the rest
            found.append(snapshot)
    if not found:
        passed = f"; {untrusted} records that fail their seal were passed over" if untrusted else ""
        raise DefinitionsRollbackError(f"no import record of backup {backup_id!r} names restore run {shown(restore_run)}"
                                       f"{passed}; nothing was changed")
    return found[0]


def load_record(storage: Storage, snapshot_key: str, seal: StateSeal) -> dict[str, Any]:
    """The import record beside ``snapshot_key``, opened under ``seal`` and checked entry by entry."""
    key = import_record_key(snapshot_key)
    try:
        record = seal.read(storage, IMPORT_RECORD, key, RECORD_LIMITS)
    except UntrustedStateError as exc:
        raise DefinitionsRollbackError(f"{exc}; a rollback acts only on an import record this deployment's restore "
                                       "wrote and sealed: nothing was changed") from None
    except StorageError as exc:
        raise DefinitionsRollbackError(f"{key} cannot be read ({type(exc).__name__}); nothing was changed") from None
    if record is None:
        raise DefinitionsRollbackError(
            f"{key} is missing: without the record of what the import created, a rollback cannot tell it from what "
            "others created since; nothing was changed")
    if not isinstance(record, dict) or record.get("snapshot") != snapshot_key:
        raise DefinitionsRollbackError(f"{key} is not the import record of {snapshot_key}; nothing was changed")
    if not isinstance(record.get("snapshot_sha256"), str) or not isinstance(record.get("snapshot_size"), int):
        raise DefinitionsRollbackError(f"{key} pins no snapshot (written by an older version?); nothing was changed")
    names = [n for n in ("cluster", "cluster_name", "run") if record.get(n) is not None
             and (not isinstance(record[n], str) or len(record[n]) > MAX_NAME_CHARS)]
    if names:
        raise DefinitionsRollbackError(f"{key}: its {', '.join(names)} is not text of at most {MAX_NAME_CHARS} "
                                       "characters; nothing was changed")
    refused = [f"{part}[{n}]: {_describe(entry)}" for part in ("created", "replaced")
               for n, entry in enumerate(_entries(record, part)) if not _acceptable(entry)]
    if not isinstance(record.get("created"), list) or not isinstance(record.get("replaced", []), list):
        refused.append("created/replaced: not lists")
    if refused:
        raise DefinitionsRollbackError(
            f"{key} lists what a restore never imports (a rollback changes only {', '.join(ROLLBACK_KINDS)}): "
            f"{'; '.join(refused)}; nothing was changed")
    return record


def _entries(record: dict[str, Any], part: str) -> list[Any]:
    entries = record.get(part) or []
    return entries if isinstance(entries, list) else []


def _acceptable(entry: Any) -> bool:
    """An entry of a kind a restore imports, whose naming fields are strings (a binding's destination type too)."""
    if not isinstance(entry, dict) or entry.get("kind") not in ROLLBACK_KINDS or not isinstance(entry.get("item"), dict):
        return False
    item = entry["item"]
    if not all(isinstance(item.get(name), str) for name in _NAME_FIELDS[entry["kind"]]):
        return False
    return entry["kind"] != "bindings" or item.get("destination_type") in ("queue", "exchange")


def _describe(entry: Any) -> str:
    """An entry as the refusal names it: its kind and item (sorted JSON, at most 200 characters)."""
    if not isinstance(entry, dict):
        return f"not an object ({type(entry).__name__})"
    item = orjson.dumps(entry.get("item"), option=orjson.OPT_SORT_KEYS).decode()
    return f"{str(entry.get('kind'))[:40]} {item[:200]}"


def pinned_snapshot(storage: Storage, key: str, record: dict[str, Any]) -> dict[str, Any]:
    """The snapshot's definitions, read only when its size and SHA-256 are the ones the record pins."""
    size, digest = record["snapshot_size"], record["snapshot_sha256"]
    try:
        found = storage.stat(key).size
        if found != size:
            raise DefinitionsRollbackError(f"{key} holds {found} bytes, not the {size} its import record pins; "
                                           "nothing was changed")
        data = storage.get_range(key, 0, size + 1) if size else b""
    except ObjectNotFoundError:
        raise DefinitionsRollbackError(f"{key} is missing; nothing was changed") from None
    except StorageError as exc:
        raise DefinitionsRollbackError(f"{key} cannot be read ({type(exc).__name__}); nothing was changed") from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
        raise DefinitionsRollbackError(f"{key} is not the snapshot its import record pins (SHA-256 differs); "
                                       "nothing was changed")
    try:  # parsed as ``restore.definitions.load_definitions`` does, from the bytes just checked
        text = decompress(data, compression_from_key(key), DEFINITIONS_LIMITS.max_bytes, key)
        doc = loads_bounded(text, key, DEFINITIONS_LIMITS, unique_keys=True)
    except CodecError as exc:
        raise DefinitionsRollbackError(f"{key} cannot be read ({type(exc).__name__}); nothing was changed") from None
    if not isinstance(doc, dict):
        raise DefinitionsRollbackError(f"{key} is not a definitions document; nothing was changed")
    return doc


def _items(record: dict[str, Any], part: str) -> list[tuple[str, dict[str, Any]]]:
    """The record's entries of ``part`` (every one checked by :func:`load_record`)."""
    return [(e["kind"], e["item"]) for e in _entries(record, part)]


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
             "policies": f"policies/{q(vhost)}/{q(item.get('name'))}", "vhosts": f"vhosts/{q(item.get('name'))}"}
    management_admin.send(client, "DELETE", paths[kind])  # only ROLLBACK_KINDS reach here (load_record)


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
