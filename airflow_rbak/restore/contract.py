"""What an approved restore plan pins, and the checks that refuse a step when what it would do has drifted.

A person approves the plan, then the run waits; meanwhile the location or the
target may change. As Terraform's saved plan does, the plan pins what it was
computed from and each step recomputes and compares before it touches anything:

* the definitions export: its key, size and SHA-256 as read at plan time (the
  manifest holds no checksum of it, so this pin is the only one), and a SHA-256
  of exactly what the import would do (each object to create or replace, per
  target vhost, and each vhost to create, in a canonical form). The
  definitions step refuses when either differs, naming the checksums or the
  objects that came or went, before the rollback snapshot is written.
* the resume points: per queue, what the restore's checkpoint said at plan
  time. At publish the checkpoint must be that state or a later one of the
  same restore: progress only moves forward. Anything else refuses that queue.

An object that left the import because the target now holds it exactly as the
plan would import it (a retried step after a partial import) changes nothing
the approver saw, so it is not drift. No Airflow and no I/O here.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from airflow_rbak.restore.checkpoints import QueueCheckpoint
from airflow_rbak.restore.definitions_diff import identity, index, label
from airflow_rbak.restore.errors import PlanChangedError

#: Objects named in a refusal, at most (the rest are counted): a refusal is one log line, the plan task's log has all.
NAMED_IN_REFUSAL = 20


@dataclass(frozen=True)
class DefinitionsPin:
    """The definitions export as the plan read it, and what importing it would do, as checksums."""

    key: str
    size: int
    sha256: str
    import_sha256: str
    #: ``[label, sha256 of the object's canonical form]`` of every object imported, sorted: names what drifted.
    objects: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "objects": [list(o) for o in self.objects]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DefinitionsPin:
        return cls(str(obj["key"]), int(obj["size"]), str(obj["sha256"]), str(obj["import_sha256"]),
                   tuple((str(a), str(b)) for a, b in obj.get("objects") or ()))


def canonical(kind: str, item: dict[str, Any]) -> bytes:
    """One object to import as canonical JSON: its kind, and the object with its vhost, keys sorted."""
    return orjson.dumps([kind, item], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def import_objects(to_apply: list[tuple[str, dict[str, Any]]]) -> tuple[tuple[str, str], ...]:
    """``(label, digest)`` of every object an import applies (``ImportChanges.to_apply``), sorted."""
    return tuple(sorted((label(identity(kind, item)), hashlib.sha256(canonical(kind, item)).hexdigest())
                        for kind, item in to_apply))


def import_digest(objects: tuple[tuple[str, str], ...]) -> str:
    """The SHA-256 of the whole import: of its objects' digests in sorted order."""
    return hashlib.sha256("\n".join(d for _, d in sorted(objects, key=lambda o: o[1])).encode()).hexdigest()


def pin_definitions(key: str, raw: bytes, to_apply: list[tuple[str, dict[str, Any]]]) -> DefinitionsPin:
    """The pin of an export read as ``raw`` (the bytes in storage) whose import would apply ``to_apply``."""
    objects = import_objects(to_apply)
    return DefinitionsPin(key, len(raw), hashlib.sha256(raw).hexdigest(), import_digest(objects), objects)


def check_definitions(pinned: DefinitionsPin | None, now: DefinitionsPin, current: dict[str, Any]) -> None:
    """Raise :class:`PlanChangedError` unless the export and the import are still what the plan pinned.

    ``current`` is the target's definitions now: an object gone from the import because the target already
    holds it exactly as it would be imported is not a change (see the module docstring)."""
    if pinned is None:
        raise PlanChangedError("the approved plan pins no definitions (it was made by an older version, or without "
                               "restore_definitions); nothing was imported. Plan the restore again")
    if (pinned.key, pinned.size, pinned.sha256) != (now.key, now.size, now.sha256):
        raise PlanChangedError(
            f"the definitions export changed since the plan was approved: {pinned.key} was {pinned.size} bytes with "
            f"SHA-256 {pinned.sha256}, it is now {now.key}, {now.size} bytes with SHA-256 {now.sha256}; nothing was "
            "imported. Find out who replaced it, then plan the restore again")
    if pinned.import_sha256 == now.import_sha256:
        return
    added = list((Counter(now.objects) - Counter(pinned.objects)).elements())
    removed = list((Counter(pinned.objects) - Counter(now.objects)).elements())
    present = _already_present(current)
    removed = [o for o in removed if o[1] not in present]
    if not added and not removed:
        return  # what left the import is on the target exactly as approved (e.g. a retried, partial import)
    raise PlanChangedError(
        f"the target changed since the plan was approved, so the definitions import would differ from the approved "
        f"one (SHA-256 {pinned.import_sha256}, now {now.import_sha256}): {_named('added', added)}; "
        f"{_named('no longer imported', removed)}; nothing was imported. Plan the restore again")


def _already_present(current: dict[str, Any]) -> set[str]:
    """Digests of the target's objects in the canonical form an import would give them."""
    out = set()
    for key, item in index(current).items():
        kind = key[0]
        out.add(hashlib.sha256(canonical(kind, {"name": item.get("name")} if kind == "vhosts" else item)).hexdigest())
    return out


def _named(what: str, objects: list[tuple[str, str]]) -> str:
    if not objects:
        return f"{what}: none"
    names = sorted({name for name, _ in objects})
    more = f" and {len(names) - NAMED_IN_REFUSAL} more" if len(names) > NAMED_IN_REFUSAL else ""
    return f"{what}: {len(objects)} ({'; '.join(map(repr, names[:NAMED_IN_REFUSAL]))}{more})"


def check_resume(pinned: Any, found: QueueCheckpoint) -> None:
    """Raise :class:`PlanChangedError` unless ``found`` (the checkpoint loaded at publish) is the resume point the
    plan pinned for its queue (``pinned``: a :class:`~airflow_rbak.restore.plan.QueuePlan`) or a later state.

    Progress only moves forward: ``published`` and ``next_ordinal`` never lower, a pinned completion stays
    completed, a pinned resume keeps its checkpoint, and no state goes beyond what the plan holds (more
    published than the window holds, or a position past the queue's last planned record)."""
    where = f"{pinned.source_vhost}/{pinned.source_queue} -> {pinned.target_vhost}/{pinned.target_queue}"
    last = max((s.first_ordinal + s.record_count for s in pinned.segments), default=0)
    problems = []
    if pinned.resumes and not found.started:
        problems.append("the plan resumes a restore that had begun, but its checkpoint is gone (a fresh start would "
                        "publish again what it confirmed)")
    if found.published < pinned.published_before:
        problems.append(f"published went back from {pinned.published_before} to {found.published}")
    if found.next_ordinal < pinned.resume_ordinal:
        problems.append(f"the next record went back from {pinned.resume_ordinal} to {found.next_ordinal}")
    if pinned.completed_before and not found.completed:
        problems.append("the plan found it completed, the checkpoint no longer says so")
    if found.published > pinned.records_in_window:
        problems.append(f"published {found.published} is more than the {pinned.records_in_window} records the plan holds")
    if found.next_ordinal > last:
        problems.append(f"the next record {found.next_ordinal} lies past the plan's last ({last})")
    if found.completed and not pinned.completed_before and found.published != pinned.records_in_window:
        problems.append(f"it says completed with {found.published} of the plan's {pinned.records_in_window} records "
                        "confirmed")
    if problems:
        raise PlanChangedError(
            f"the restore checkpoint of {where} is not the resume point the plan pinned (resumes {pinned.resumes}, "
            f"published {pinned.published_before}, next record {pinned.resume_ordinal}, completed "
            f"{pinned.completed_before}) nor a later state of it: {'; '.join(problems)}. Nothing was published to this "
            "queue; plan the restore again")
