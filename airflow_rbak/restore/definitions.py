"""Definitions restore: select, rename, save the target's current definitions, then import.

The import is per target vhost (``POST /api/definitions/{vhost}``), which
is what makes ``vhost_map`` possible. Selecting queues pulls in the
exchanges that route to them (through exchange-to-exchange bindings too)
and the bindings between what is selected. Policies of selected vhosts come
along; users, permissions and runtime parameters (shovels, federation) do
not: they change the whole cluster, or start moving messages on their own.

Each selected object is compared with the target's (``definitions_diff``):
``definitions_mode: missing`` (the default) imports only what the target
lacks, ``replace`` also overwrites what differs. Before anything is
imported, the target's complete definitions are stored at
``definitions/rollback-before-import-<timestamp>.<ext>`` and what the import
will create and replace at ``definitions/import-record-<timestamp>.json``
(what ``rollback`` undoes, with the target cluster and the restore run: :mod:`.import_record`); any failure
raises :class:`DefinitionsImportError`,
and the run stops before publishing. Before any of that, the step recomputes
the import and checks it against the approved plan's pin (:mod:`.contract`):
a replaced export or a changed target refuses with nothing written. The import
record is sealed (:mod:`airflow_rbak.storage.sealed`) and pins the snapshot by
SHA-256 and size, so a rollback acts only on a record this deployment wrote,
beside the snapshot it wrote.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import orjson

from airflow_rbak.broker import management_admin
from airflow_rbak.broker.definitions import without_credentials
from airflow_rbak.broker.errors import BrokerError, ManagementWriteError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec import CodecError
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS, loads_bounded
from airflow_rbak.codec.compression import compress, decompress
from airflow_rbak.codec.layout import compression_from_key, rollback_definitions_key
from airflow_rbak.display import package_logger, printable
from airflow_rbak.restore import migration, target_compatibility
from airflow_rbak.restore.contract import DefinitionsPin, check_definitions, pin_definitions
from airflow_rbak.restore.definitions_diff import ImportChanges, compare, per_vhost
from airflow_rbak.restore.errors import DefinitionsImportError, RestoreRefusedError
from airflow_rbak.restore.import_record import IMPORT_RECORD, import_record_key, local_run_ref, record_body
from airflow_rbak.restore.import_view import import_view
from airflow_rbak.restore.quorum_support import target_version
from airflow_rbak.restore.request import DefinitionsSelection, RestoreRequest, matches
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.storage.base import Storage, StorageError, read_bounded
from airflow_rbak.storage.sealed import StateSeal, default_seal

log = package_logger(__name__)


@dataclass
class DefinitionsResult:
    """What the definitions step did (or, in a dry run, would do); counts per target vhost."""

    rollback_key: str | None = None
    imported: bool = False
    dry_run: bool = False
    vhosts: dict[str, dict[str, int]] = field(default_factory=dict)
    created_vhosts: list[str] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)
    #: The transformed definitions as stored for import by hand (``restore.migration``), when transformations ran.
    transformed_key: str | None = None
    #: What the import record names (:mod:`.import_record`): the restore run, and the cluster imported into.
    restore_run: str | None = None
    cluster: str | None = None
    cluster_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_definitions(storage: Storage, key: str) -> dict[str, Any]:
    """The saved definitions document; any defect is a DefinitionsImportError naming the key."""
    return read_export(storage, key)[1]


def read_export(storage: Storage, key: str) -> tuple[bytes, dict[str, Any]]:
    """The export's bytes as stored (what the plan pins) and the document they hold."""
    try:
        stored = read_bounded(storage, key, DEFINITIONS_LIMITS.max_bytes, DEFINITIONS_LIMITS.what)
        text = decompress(stored, compression_from_key(key), DEFINITIONS_LIMITS.max_bytes, key)
        doc = loads_bounded(text, key, DEFINITIONS_LIMITS, unique_keys=True)
    except (StorageError, CodecError, orjson.JSONDecodeError) as exc:
        raise DefinitionsImportError(f"definitions {key} cannot be read ({type(exc).__name__}: {printable(str(exc))[:300]}); "
                                     "nothing was imported") from None
    if not isinstance(doc, dict):
        raise DefinitionsImportError(f"definitions {key} is not a JSON object; nothing was imported")
    return stored, doc


#: Per kind a restore reads, the fields each entry must hold as text, and those that are text or objects when given.
_ENTRY_FIELDS: dict[str, tuple[tuple[str, ...], dict[str, type]]] = {
    "vhosts": (("name",), {}),
    "queues": (("vhost", "name"), {"type": str, "arguments": dict}),
    "exchanges": (("vhost", "name"), {"type": str, "arguments": dict}),
    "bindings": (("vhost", "source", "destination", "destination_type"), {"routing_key": str, "arguments": dict}),
    "policies": (("vhost", "name", "pattern"), {"apply-to": str, "definition": dict, "priority": int}),
}


def check_entries(doc: dict[str, Any], key: str) -> None:
    """Refuse an export whose kinds a restore reads hold anything but objects of the expected shape, naming the
    first such entry (read from a location, so untrusted: a string where a queue should be is not skipped)."""
    for kind, (names, optional) in _ENTRY_FIELDS.items():
        items = doc.get(kind)
        if items is None:
            continue
        if not isinstance(items, list):
            _bad(key, kind, f"is {_kind_of(items)}, not a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                _bad(key, f"{kind}[{i}]", f"is {_kind_of(item)}, not an object ({printable(repr(item))[:80]})")
            wrong = [n for n in names if not isinstance(item.get(n), str)]
            wrong += [n for n, t in optional.items() if n in item and (not isinstance(item[n], t) or isinstance(item[n], bool))]
            if kind == "policies" and not isinstance(item.get("definition"), dict):
                wrong.append("definition")
            if wrong:
                _bad(key, f"{kind}[{i}]", f"({printable(repr(item))[:80]}) has no proper {', '.join(sorted(set(wrong)))}")


def _kind_of(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _bad(key: str, where: str, what: str) -> None:
    raise DefinitionsImportError(f"definitions {key}: {where} {what}; nothing was imported. The export is damaged or "
                                 "was not written by RabbitMQ: restore from another backup, or without restore_definitions")


def select_definitions(
    doc: dict[str, Any], selection: DefinitionsSelection, request: RestoreRequest, key: str = "export"
) -> dict[str, dict[str, Any]]:
    """Per target vhost, the queues, exchanges, bindings and policies to import, renamed by the maps; an entry of
    the wrong shape is a DefinitionsImportError naming it (:func:`check_entries`)."""
    check_entries(doc, key)
    vhosts = [v.get("name") for v in doc.get("vhosts", []) if matches(str(v.get("name")), selection.vhosts)]
    vhosts += sorted({q.get("vhost") for q in doc.get("queues", [])} - set(vhosts) - {None})
    out: dict[str, dict[str, Any]] = {}
    for vhost in vhosts:
        if not matches(str(vhost), selection.vhosts):
            continue
        part = _select_vhost(doc, vhost, selection, request)
        if any(part.values()):
            target = request.target_vhost(vhost)
            out.setdefault(target, {"queues": [], "exchanges": [], "bindings": [], "policies": []})
            for name, items in part.items():
                out[target][name] += items
    return out


def _in(vhost: str, items: Any) -> list[dict[str, Any]]:
    return [i for i in (items or []) if isinstance(i, dict) and i.get("vhost") == vhost]


def _select_vhost(doc: dict[str, Any], vhost: str, selection: DefinitionsSelection, request: RestoreRequest) -> dict[str, list]:
    queues = [q for q in _in(vhost, doc.get("queues")) if matches(q.get("name", ""), selection.queues)]
    queue_names = {q["name"] for q in queues}
    bindings = _in(vhost, doc.get("bindings"))
    exchanges = {e["name"] for e in _in(vhost, doc.get("exchanges"))
                 if selection.exchanges and matches(e.get("name", ""), selection.exchanges)}
    routed: set[str] = set(queue_names)
    frontier = {("queue", n) for n in queue_names} | {("exchange", n) for n in exchanges}
    while frontier:  # exchanges that reach a selected queue or exchange, transitively
        found = {
            b["source"] for b in bindings if (b.get("destination_type"), b.get("destination")) in frontier and b.get("source")
        }
        frontier = {("exchange", n) for n in found - exchanges}
        exchanges |= found
    routed |= exchanges
    keep_bindings = [b for b in bindings if b.get("source") in exchanges and (
        (b.get("destination_type") == "queue" and b.get("destination") in queue_names)
        or (b.get("destination_type") == "exchange" and b.get("destination") in exchanges))]
    return {
        "queues": [_strip({**q, "name": request.target_queue(q["name"])}) for q in queues],
        "exchanges": [
            _strip(e) for e in _in(vhost, doc.get("exchanges")) if e["name"] in exchanges and not e["name"].startswith("amq.")
        ],
        "bindings": [_strip(_rename_binding(b, request)) for b in keep_bindings],
        "policies": [_strip(p) for p in _in(vhost, doc.get("policies"))] if routed else [],
    }


def _rename_binding(binding: dict[str, Any], request: RestoreRequest) -> dict[str, Any]:
    if binding.get("destination_type") == "queue":
        return {**binding, "destination": request.target_queue(binding["destination"])}
    return binding


def _strip(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "vhost"}


def counts(selected: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    return {vhost: {name: len(items) for name, items in part.items()} for vhost, part in selected.items()}


def rollback_timestamp(now: datetime | None = None) -> str:
    """``20261122T041500123Z``: sortable, and only characters every storage key allows."""
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"


def save_rollback(client: ManagementClient, storage: Storage, backup_id: str, definitions_key: str) -> tuple[str, dict[str, Any]]:
    """Store the target's current definitions, credentials left out, (compressed like the backup's); return the key
    and its pin (``sha256`` and ``size`` of the stored bytes) for the import record."""
    compression = compression_from_key(definitions_key)
    key = rollback_definitions_key(backup_id, rollback_timestamp(), compression)
    try:
        raw = without_credentials(client.definitions_raw())  # a restore never changes users or parameters
        data = compress(raw, compression, 3)
        storage.put(key, data)
    except (BrokerError, StorageError) as exc:
        raise DefinitionsImportError(f"could not save the rollback snapshot {key} ({exc}); nothing was imported") from None
    return key, {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def current_definitions(client: ManagementClient) -> dict[str, Any]:
    """The target's definitions now, parsed (``GET /api/definitions``)."""
    try:
        doc = orjson.loads(client.definitions_raw())
    except (BrokerError, orjson.JSONDecodeError) as exc:
        raise DefinitionsImportError(f"cannot read the target's definitions ({exc}); nothing was imported") from None
    return doc if isinstance(doc, dict) else {}


def _saved_definitions(backup_id: str, definitions_key: str | None) -> str:
    """The key of the backup's definitions export; a backup without one cannot restore definitions."""
    if definitions_key is None:
        raise DefinitionsImportError(f"backup {backup_id!r} holds no definitions; run without restore_definitions")
    return definitions_key


@dataclass
class DefinitionsProposal:
    """What a definitions import would bring: the selection (transformed, if asked), the changes to the target,
    the pin of the export and the import (:mod:`.contract`), the target's definitions it was compared with, and,
    with transformations, what they did and the transformed document."""

    selected: dict[str, dict[str, Any]]
    changes: ImportChanges
    pin: DefinitionsPin
    current: dict[str, Any]
    migration: dict[str, Any] | None = None
    transformed: dict[str, Any] | None = None
    #: What the target's version does with each object it treats differently (:mod:`.target_compatibility`).
    compatibility: list[dict[str, str]] | None = None
    #: The runtime parameters of the imported vhosts that a restore does not import (:func:`not_imported`).
    not_imported: list[dict[str, str]] | None = None

    def view(self) -> list[dict[str, Any]]:
        """Every object the import applies, with what acts beyond it (:mod:`.import_view`)."""
        return import_view(self.changes, self.current, self.selected)


#: Runtime parameters a plan names as not imported, at most (the plan travels as XCom); the rest are counted.
MAX_NOT_IMPORTED = 100


@dataclass(frozen=True)
class ImportSelection:
    """What a restore imports from an export (per target vhost), what the transformations and the target's version
    did to it, and the runtime parameters of the same vhosts that it does not import."""

    selected: dict[str, dict[str, Any]]
    migration: dict[str, Any] | None
    transformed: dict[str, Any] | None
    compatibility: list[dict[str, str]]
    not_imported: list[dict[str, str]]


def import_selection(saved: dict[str, Any], selection: DefinitionsSelection | None, request: RestoreRequest,
                     version: str, key: str = "export") -> ImportSelection:
    """What a restore imports from an export into a target of ``version``: the selection renamed by the maps,
    transformed (if the settings name transformations) and adapted to the version. Pure, so that what the plan
    imports can be compared with what other tools make of the same export (tests/restore/test_rabbitmqadmin_ng.py)."""
    selected = select_definitions(saved, selection, request, key) if selection is not None else {}
    left_out = not_imported(saved, selection, selected, request) if selection is not None else []
    summary = transformed = None
    if request.transformations:
        selected, summary, transformed = migration.transform_selection(selected, request, version)
    selected, compatibility = target_compatibility.adapt(selected, target_version(version))
    return ImportSelection(selected, summary, transformed, compatibility, left_out)


def not_imported(saved: dict[str, Any], selection: DefinitionsSelection, selected: dict[str, dict[str, Any]],
                 request: RestoreRequest) -> list[dict[str, str]]:
    """The runtime parameters (operator policies, shovels, federation upstreams, ...) of the vhosts whose definitions
    are imported, by component and name, under the target vhost's name: a restore never imports them, and an
    operator policy (a ``max-length``, a ``delivery-limit``) changes what the queues do, so the plan names each one
    rather than leave it out unsaid. Values are never copied (a URI may hold credentials)."""
    found = []
    for p in saved.get("parameters") or []:
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("vhost", "component", "name")):
            continue
        target = request.target_vhost(p["vhost"])
        if matches(p["vhost"], selection.vhosts) and target in selected:
            found.append({"kind": printable(p["component"])[:64], "vhost": printable(target)[:255],
                          "name": printable(p["name"])[:255]})
    found.sort(key=lambda f: (f["vhost"], f["kind"], f["name"]))
    if len(found) > MAX_NOT_IMPORTED:
        found = found[:MAX_NOT_IMPORTED] + [{"kind": "more", "vhost": "", "name": f"{len(found) - MAX_NOT_IMPORTED} more"}]
    return found


def plan_definitions(client: ManagementClient, storage: Storage, request: RestoreRequest, backup_id: str,
                     definitions_key: str | None, backup_vhosts: tuple[str, ...] | None = None,
                     queue_vhosts: tuple[str, ...] = ()) -> DefinitionsProposal:
    """The selected definitions per target vhost, transformed for the target, what importing them would change,
    and its pin.

    ``backup_vhosts``: the vhosts the backup was asked for (its export holds every vhost); ``queue_vhosts``: the
    source vhosts of the queues the restore selects; see :meth:`RestoreRequest.definitions_of`."""
    key = _saved_definitions(backup_id, definitions_key)
    raw, saved = read_export(storage, key)
    selection = request.definitions_of(backup_vhosts, queue_vhosts)
    try:
        version = client.version()
    except BrokerError as exc:
        raise DefinitionsImportError(f"cannot read the target's RabbitMQ version ({exc}); nothing was imported") from None
    chosen = import_selection(saved, selection, request, version, key)
    current = current_definitions(client)
    changes = compare(chosen.selected, current, request.definitions_mode)
    return DefinitionsProposal(chosen.selected, changes, pin_definitions(key, raw, changes.to_apply()), current,
                               chosen.migration, chosen.transformed, chosen.compatibility, chosen.not_imported)


def restore_definitions(client: ManagementClient, storage: Storage, request: RestoreRequest,
                        plan: RestorePlan, seal: StateSeal | None = None, run_ref: str | None = None) -> DefinitionsResult:
    """Recompute the import and check it against the plan's pin; unless dry run, then save the rollback snapshot and
    the import record (sealed with ``seal``, default :func:`~airflow_rbak.storage.sealed.default_seal`), and import.
    A drift from the pin, or a connection that now reaches another cluster than the plan inspected, refuses before
    anything is written (:mod:`.contract`). The record names the cluster and ``run_ref``, the restore run
    (:mod:`.import_record`; None: a new ``cli:`` reference)."""
    seal = seal or default_seal()  # resolved first: a key that cannot be had stops the run before anything is written
    cluster, cluster_name = _target_cluster(client, plan)
    proposal = plan_definitions(client, storage, request, plan.backup_id, plan.definitions_key, plan.backup_vhosts,
                                plan.queue_vhosts)
    selected, changes = proposal.selected, proposal.changes
    pinned = DefinitionsPin.from_json(plan.definitions_pin) if plan.definitions_pin else None
    check_definitions(pinned, proposal.pin, proposal.current)
    key = proposal.pin.key
    result = DefinitionsResult(dry_run=request.dry_run, vhosts=counts(selected), changes=changes.to_json())
    if proposal.transformed is not None:
        result.transformed_key = migration.save_transformed(storage, plan.backup_id, proposal.transformed,
                                                            rollback_timestamp())
        log.info("transformed definitions stored at %s (importable by hand)", result.transformed_key)
    if request.dry_run:
        return result
    result.rollback_key, pin = save_rollback(client, storage, plan.backup_id, key)
    log.info("saved the target's definitions to %s before import", result.rollback_key)
    result.restore_run, result.cluster, result.cluster_name = run_ref or local_run_ref(), cluster, cluster_name
    record = record_body(result.rollback_key, pin, changes.mode, changes.create,
                         changes.replace if changes.mode == "replace" else [], cluster, cluster_name, result.restore_run)
    try:
        record_key = import_record_key(result.rollback_key)
        seal.write(storage, IMPORT_RECORD, record_key, record)
    except StorageError as exc:
        raise DefinitionsImportError(f"could not save the import record ({exc}); nothing was imported") from None
    for vhost in selected:
        try:
            if management_admin.ensure_vhost(client, vhost):
                result.created_vhosts.append(vhost)
        except ManagementWriteError as exc:
            raise DefinitionsImportError(str(exc)) from None
        except BrokerError as exc:
            raise DefinitionsImportError(f"cannot create vhost {vhost!r}: {exc}") from None
    try:
        for vhost, document in per_vhost(changes.to_apply()).items():
            management_admin.import_vhost_definitions(client, vhost, document)
    except ManagementWriteError as exc:
        raise DefinitionsImportError(str(exc)) from None
    result.imported = True
    return result


def _target_cluster(client: ManagementClient, plan: RestorePlan) -> tuple[str, str | None]:
    """The identity and name of the cluster the connection reaches, which must be the one the plan inspected."""
    try:
        cluster, name = client.cluster_identity(), client.cluster_name()
    except BrokerError as exc:
        raise DefinitionsImportError(f"cannot read the target's cluster identity ({exc}); nothing was imported") from None
    if plan.target_cluster_id is not None and cluster != plan.target_cluster_id:
        raise RestoreRefusedError(f"the connection now reaches cluster {cluster!r}, not {plan.target_cluster_id!r} that "
                                  "the plan inspected; nothing was imported. Plan the restore again")
    return cluster, name
