"""What a restore task checks before it acts: the plan it runs is the one sealed at ``plan`` and approved at ``approve``.

Airflow lets whoever may edit a DAG's runs mark a task as succeeded, clear a task so it runs again, or edit an XCom.
None of those is an approval: they are requests, and a task that acts on a person's decision verifies that decision
itself. So, as Terraform applies only the saved plan it was given:

* ``plan`` seals what it computed (:func:`seal_plan`): the plan, the request it was made from, the mapped groups of
  queues it handed to ``publish``, its own try number, bound to the DAG run, under the deployment's state key
  (:mod:`airflow_rbak.storage.sealed`), which no Airflow user holds.
* ``approve``, after checking who answered, seals an approval (:func:`seal_approval`) naming the run, its own try,
  the plan's digest and try, who approved and when; a dry run and a ``skip_approval`` the administrator allows are
  sealed the same way, as such.
* ``definitions``, ``publish`` and ``report`` open both (:func:`authorize`) before anything else and refuse, naming
  what is missing or changed, when there is no approval, when it covers another run or another plan, when the plan
  was made again after it, or when the request is not the one the plan was made from.

So marking ``approve`` succeeded leaves no approval; clearing ``plan`` after an approval makes a plan of another try
that no approval covers; an edited plan XCom fails its seal; and an approval copied from another run is bound to that
run. No Airflow and no I/O here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_rbak.restore.errors import RestoreRefusedError
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.storage.sealed import StateSeal, UntrustedStateError

#: The seal purposes (an object sealed as one is never taken as the other).
PLAN, APPROVAL = "restore-plan", "restore-approval"
#: How an approval was given: by a person, or not needed (a dry run; ``skip_approval`` where the administrator allows).
APPROVED, DRY_RUN, SKIPPED = "approved", "dry_run", "skip_approval"
MODES = (APPROVED, DRY_RUN, SKIPPED)


class NotApprovedError(RestoreRefusedError):
    """A step found no approval of the plan it was given, or one that covers another run, plan or request."""


@dataclass(frozen=True)
class RunRef:
    """The Airflow run (or another run of the engine) a sealed plan and approval belong to."""

    dag_id: str
    run_id: str

    @property
    def binding(self) -> str:
        """The name sealed objects of this run are bound to (the seal's ``key``)."""
        return f"airflow-run:{self.dag_id}/{self.run_id}"

    def __str__(self) -> str:
        return f"{self.dag_id} run {self.run_id!r}"


@dataclass(frozen=True)
class SealedPlan:
    """A plan as ``plan`` sealed it: what it computed, from which request, handed out in which groups, at which try."""

    plan: RestorePlan
    request: dict[str, Any]
    groups: tuple[tuple[tuple[str, str], ...], ...]
    plan_try: int
    digest: str


@dataclass(frozen=True)
class Approval:
    """An approval as ``approve`` sealed it."""

    mode: str
    plan_digest: str
    plan_try: int
    approved_by: str | None
    approved_at: str
    approve_try: int

    def describe(self) -> str:
        if self.mode == APPROVED:
            return f"approved by {self.approved_by} at {self.approved_at}"
        return f"not asked ({'a dry run' if self.mode == DRY_RUN else 'skip_approval, allowed by [rbak] allow_skip_approval'})"


def canonical(value: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, ASCII only, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def plan_digest(plan_json: Mapping[str, Any]) -> str:
    """The SHA-256 of a plan's canonical JSON (what an approval names)."""
    return hashlib.sha256(canonical(plan_json)).hexdigest()


def group_keys(groups: Sequence[Sequence[Mapping[str, Any]]]) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The mapped groups handed to ``publish`` as ``(source vhost, source queue)`` pairs."""
    return tuple(tuple((str(q["source_vhost"]), str(q["source_queue"])) for q in group) for group in groups)


def seal_plan(seal: StateSeal, run: RunRef, plan: RestorePlan, request: Mapping[str, Any],
              groups: Sequence[Sequence[Mapping[str, Any]]], plan_try: int) -> dict[str, Any]:
    """The sealed plan (a JSON object for XCom), bound to ``run``."""
    plan_json = json.loads(canonical(plan.to_json()))  # tuples as lists: what XCom gives back
    body = {"run": [run.dag_id, run.run_id], "plan_try": int(plan_try), "digest": plan_digest(plan_json),
            "request": json.loads(canonical(dict(request))), "groups": [[list(k) for k in g] for g in group_keys(groups)],
            "plan": plan_json}
    return seal.envelope(PLAN, run.binding, body)


def open_plan(seal: StateSeal, run: RunRef, sealed: Any) -> SealedPlan:
    """The plan sealed at ``plan`` of ``run``; :class:`NotApprovedError` when there is none or it is not one."""
    if not sealed:
        raise NotApprovedError(f"{run} holds no sealed plan (the plan task's 'plan' XCom is missing); nothing was "
                               "done. Trigger the restore again")
    body = _open(seal, PLAN, run, sealed, "the plan")
    try:
        plan_json = body["plan"]
        found = SealedPlan(RestorePlan.from_json(plan_json), dict(body["request"]),
                           tuple(tuple((str(v), str(q)) for v, q in g) for g in body["groups"]), int(body["plan_try"]),
                           str(body["digest"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise NotApprovedError(f"the sealed plan of {run} cannot be read ({type(exc).__name__}); nothing was done") from None
    if plan_digest(plan_json) != found.digest:
        raise NotApprovedError(f"the sealed plan of {run} does not match its own digest; nothing was done")
    return found


def seal_approval(seal: StateSeal, run: RunRef, plan: SealedPlan, mode: str, approved_by: str | None,
                  approve_try: int, at: dt.datetime | None = None) -> dict[str, Any]:
    """The sealed approval of ``plan`` (a JSON object for XCom), bound to ``run``."""
    if mode not in MODES:
        raise ValueError(f"unknown approval mode {mode!r}")
    when = (at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc).isoformat(timespec="seconds")
    body = {"run": [run.dag_id, run.run_id], "mode": mode, "plan_digest": plan.digest, "plan_try": plan.plan_try,
            "approved_by": approved_by, "approved_at": when, "approve_try": int(approve_try)}
    return seal.envelope(APPROVAL, run.binding, body)


def open_approval(seal: StateSeal, run: RunRef, sealed: Any) -> Approval:
    """The approval sealed at ``approve`` of ``run``; :class:`NotApprovedError` when there is none or it is not one."""
    if not sealed:
        raise NotApprovedError(
            f"{run} holds no approval: the approve task left none (marked succeeded by hand, or its result removed); "
            "nothing was done. Clear the approve task so that an approver answers it")
    body = _open(seal, APPROVAL, run, sealed, "the approval")
    try:
        return Approval(str(body["mode"]), str(body["plan_digest"]), int(body["plan_try"]),
                        None if body["approved_by"] is None else str(body["approved_by"]), str(body["approved_at"]),
                        int(body["approve_try"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise NotApprovedError(f"the approval of {run} cannot be read ({type(exc).__name__}); nothing was done") from None


def authorize(seal: StateSeal, run: RunRef, sealed_plan: Any, sealed_approval: Any,
              request: Mapping[str, Any]) -> tuple[SealedPlan, Approval]:
    """The plan a step may act on, and its approval; :class:`NotApprovedError` naming what is missing or changed.

    ``request`` is the request the step was given (the run's params as it rendered them): it must be the one the plan
    was made from, so that a step never acts on a plan made for other settings.
    """
    plan = open_plan(seal, run, sealed_plan)
    approval = open_approval(seal, run, sealed_approval)
    if approval.mode not in MODES:
        raise NotApprovedError(f"the approval of {run} has an unknown mode {approval.mode!r}; nothing was done")
    if (approval.plan_digest, approval.plan_try) != (plan.digest, plan.plan_try):
        raise NotApprovedError(
            f"the plan was made again after the approval: {approval.describe()} covers the plan of try "
            f"{approval.plan_try} (SHA-256 {approval.plan_digest[:16]}…), the plan now is of try {plan.plan_try} "
            f"(SHA-256 {plan.digest[:16]}…); nothing was done. Clear the approve task so that an approver sees this "
            "plan, or trigger the restore again")
    given = json.loads(canonical(dict(request)))
    if given != plan.request:
        changed = sorted(k for k in set(plan.request) | set(given) if plan.request.get(k) != given.get(k))
        raise NotApprovedError(f"this step was given other settings than the approved plan was made from "
                               f"({', '.join(changed[:20])}); nothing was done. Trigger the restore again")
    if approval.mode == DRY_RUN and plan.request.get("dry_run") not in (True, "True", "true"):
        raise NotApprovedError(f"the approval of {run} was for a dry run, and this restore is not one; nothing was done")
    return plan, approval


def check_group(plan: SealedPlan, map_index: int, given: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a publish task whose group of queues is not the one the sealed plan handed to its map index."""
    wanted = plan.groups[map_index] if 0 <= map_index < len(plan.groups) else None
    found = group_keys([given])[0]
    if wanted != found:
        names = ", ".join(f"{v}/{q}" for v, q in found[:10])
        raise NotApprovedError(
            f"publish task {map_index} was given the queues {names or 'none'}, which are not the ones the approved plan "
            f"handed to it ({', '.join(f'{v}/{q}' for v, q in wanted or ()) or 'none'}); nothing was published")


def _open(seal: StateSeal, purpose: str, run: RunRef, sealed: Any, what: str) -> dict[str, Any]:
    try:
        body = seal.open_envelope(purpose, run.binding, sealed)
    except UntrustedStateError as exc:
        raise NotApprovedError(f"{what} of {run} is not one this deployment sealed for it ({exc.reason}): it was "
                               "edited, copied from another run, or written by someone else; nothing was done. "
                               "Trigger the restore again") from None
    if not isinstance(body, dict) or body.get("run") != [run.dag_id, run.run_id]:
        raise NotApprovedError(f"{what} of {run} names another run; nothing was done")
    return body
