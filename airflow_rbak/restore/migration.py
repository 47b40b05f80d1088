"""A restore that migrates: the backup's definitions transformed for the target before import, and the plan told.

The restore selects the backup's definitions per target vhost (renamed by
the maps), then applies the transformations the settings name
(:mod:`~airflow_rbak.restore.transformations`) for the target's version, so
``queue_types`` rules and ``accept_losses`` match the names in the target.
What they did travels in the plan as :class:`Migration` JSON (each change,
the refused queues, the diff against the backup's definitions), which the
plan's log lines and the approval request show. A refused queue is left out
of the import and of publishing; the report then fails, naming it. The
transformed document is stored beside the rollback snapshots as
``definitions/transformed-<timestamp>.json``, dry runs included: a file the
user can import by hand (``POST /api/definitions``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from airflow_rbak.codec.layout import transformed_definitions_key
from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.errors import DefinitionsImportError, MigrationRefusedError
from airflow_rbak.restore.quorum_support import target_version, version_text
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection
from airflow_rbak.restore.transformations import (
    CHANGED,
    KINDS,
    REFUSED,
    TransformOptions,
    diff,
    queue_type,
    transform,
)
from airflow_rbak.storage.base import Storage, StorageError

#: Diff lines kept in the plan (it travels as XCom); the transformed file holds everything.
MAX_DIFF_LINES = 400
SELECTED_KINDS = ("queues", "exchanges", "bindings", "policies")


def as_document(selected: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per-vhost selected definitions as one definitions document, each item naming its vhost again."""
    doc: dict[str, Any] = {"vhosts": [{"name": vhost} for vhost in selected]}
    for kind in SELECTED_KINDS:
        doc[kind] = [{**item, "vhost": vhost} for vhost, part in selected.items() for item in part.get(kind, [])]
    return doc


def from_document(doc: dict[str, Any], vhosts: list[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The reverse of :func:`as_document` for the given vhosts (in their order)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {v: {k: [] for k in SELECTED_KINDS} for v in vhosts}
    for kind in SELECTED_KINDS:
        for item in doc.get(kind) or []:
            out[item["vhost"]][kind].append({k: v for k, v in item.items() if k != "vhost"})
    return out


def options(request: RestoreRequest, version: str) -> TransformOptions:
    """The transformations' options from the settings and the target's version text."""
    rules = request.queue_types or (("*", "quorum"),)
    return TransformOptions(target_version(version), tuple(rules), request.accept_losses)


def transform_selection(selected: dict[str, dict[str, list[dict[str, Any]]]], request: RestoreRequest,
                        version: str) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, Any], dict[str, Any]]:
    """The selection transformed, the :class:`Migration` summary for the plan, and the transformed document."""
    opts = options(request, version)
    before = as_document(selected)
    result = transform(before, request.transformations, opts)
    lines = diff(before, result.document)
    converted = [[q["vhost"], q["name"]] for q in result.document["queues"]
                 if queue_type(q) == "quorum" and any(c.kind == "queue" and c.action == CHANGED and c.vhost == q["vhost"]
                                                      and c.name == q["name"] and c.transformation == "convert_to_quorum"
                                                      for c in result.changes)]
    summary = {
        "transformations": list(request.transformations), "target_version": version_text(opts.target_version),
        "changes": [c.to_json() for c in result.changes], "converted": converted,
        "refused": [{"vhost": c.vhost, "queue": c.name, "reason": c.detail} for c in result.changes
                    if c.action == REFUSED],
        "diff": lines[:MAX_DIFF_LINES], "diff_lines": len(lines),
    }
    return from_document(result.document, list(selected)), summary, result.document


def apply_to_plan(plan: RestorePlan) -> RestorePlan:
    """The plan with converted queues' target type set and refused queues taken out (nothing is published to them)."""
    migration = plan.migration
    if not migration:
        return plan
    converted = {tuple(pair) for pair in migration["converted"]}
    refused = {(r["vhost"], r["queue"]) for r in migration["refused"]}
    queues = tuple(replace(q, target_queue_type="quorum" if (q.target_vhost, q.target_queue) in converted else None)
                   for q in plan.queues if (q.target_vhost, q.target_queue) not in refused)
    return replace(plan, queues=queues)


def summary_lines(migration: dict[str, Any] | None) -> list[str]:
    """The migration as log lines: each change, then the diff against the backup's definitions."""
    if not migration:
        return []
    lines = [f"  transformations {', '.join(migration['transformations'])} for RabbitMQ {migration['target_version']}: "
             f"{len(migration['changes'])} changes, {len(migration['converted'])} queues become quorum, "
             f"{len(migration['refused'])} refused; diff against the backup's definitions: {migration['diff_lines']} lines"]
    lines += [f"    [{c['transformation']}] {c['kind']} {c['vhost']}/{c['name']}: {c['action']}: {c['detail']}"
              for c in migration["changes"]]
    lines += ["  diff (- the backup's, + what is imported instead):"] + [f"    {line}" for line in migration["diff"]]
    if migration["diff_lines"] > len(migration["diff"]):
        lines.append(f"    ... and {migration['diff_lines'] - len(migration['diff'])} more lines (in the transformed file)")
    return lines


def refused_error(plan: RestorePlan) -> MigrationRefusedError | None:
    """The error that ends a migration which left queues out (None: it left none out)."""
    refused = (plan.migration or {}).get("refused") or []
    if not refused:
        return None
    names = "; ".join(f"{r['vhost']}/{r['queue']}: {r['reason']}" for r in refused)
    return MigrationRefusedError(f"{len(refused)} queues were refused and left out, with their bindings and messages; "
                                 f"everything else was restored ({names})")


def save_transformed(storage: Storage, backup_id: str, document: dict[str, Any], timestamp: str) -> str:
    """Store the transformed definitions as a file the user could import by hand; return its key."""
    key = transformed_definitions_key(backup_id, timestamp)
    body = {kind: document[kind] for kind in KINDS if kind in document}
    try:
        storage.put(key, orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    except StorageError as exc:
        raise DefinitionsImportError(f"could not save the transformed definitions {key} ({exc}); nothing was imported") from None
    return key


class Transformations(PlanSection):
    """The transformations (a migration, a quorum conversion): each change, the queues refused, the diff."""

    name = "transformations"
    placement = Placement(log=70, summary=30, report=10)

    def with_definitions(self, plan: RestorePlan, request: RestoreRequest) -> RestorePlan:
        """Converted queues get their target type and refused queues leave the plan, before the target is inspected."""
        return apply_to_plan(plan)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """Each change, then the diff against the backup's definitions."""
        return summary_lines(plan.migration)

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """How many changes, how many queues refused."""
        if not plan.migration:
            return []
        return [f"- transformations: {len(plan.migration['changes'])} changes, "
                f"{len(plan.migration['refused'])} queues refused"]

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """Every change, the queues refused, and the diff against the backup's definitions."""
        m = plan.migration
        if not m:
            return []
        lines = ["", f"### Transformations {', '.join(md_code(t) for t in m['transformations'])} for the target's "
                     f"RabbitMQ {md_code(m['target_version'])}", "",
                 f"{len(m['changes'])} changes, {len(m['converted'])} queues become quorum.", ""]
        changes = sorted(m["changes"], key=lambda c: (c["kind"], c["vhost"], c["name"], c["transformation"]))
        lines += [f"- {md_code(c['transformation'])} {md_code(_object(c))} **{printable(c['action'])}**: "
                  f"{md_code(c['detail'])}" for c in changes]
        if m["refused"]:
            lines += ["", f"**{len(m['refused'])} queues are refused** and left out with their bindings and messages; "
                          "the report fails naming them: "
                          + "; ".join(md_code(f"{r['vhost']}/{r['queue']}") for r in m["refused"])]
        lines += ["", f"**Diff against the backup's definitions** ({m['diff_lines']} lines; `-` the backup's, `+` what "
                      "is imported instead; every object imported is listed above):", ""]
        lines += [f"    {printable(line)}" for line in m["diff"]]
        if m["diff_lines"] > len(m["diff"]):
            lines.append(f"    ({m['diff_lines'] - len(m['diff'])} more lines in the transformed definitions file)")
        return lines

    def report_fields(self, plan: RestorePlan) -> dict[str, Any]:
        """What the transformations did (the plan's ``migration``), when any were named."""
        return {"migration": plan.migration}

    def left_out(self, plan: RestorePlan) -> MigrationRefusedError | None:
        """The queues the transformations refused and left out."""
        return refused_error(plan)


def _object(change: dict[str, str]) -> str:
    return f"{change['kind']} {change['vhost']}/{change['name']}"


SECTION = Transformations()
