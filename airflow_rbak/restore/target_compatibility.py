"""Definitions of an older RabbitMQ imported into a newer one: each object applied, changed with a reason, or refused.

A 3.x export holds objects that RabbitMQ 4.x treats differently, and one object the target refuses fails the
import of its vhost, possibly half done (measured on 4.3.6; ``tests/restore/test_definitions_into_4x.py`` holds the broker to
it). So before the plan is approved the selection (after any named transformations) is read against the target's
version, and every such object gets one of three outcomes, listed in the plan and the approval request:

* ``applied``: the target takes it as it is; the finding says what it means there (``x-queue-mode`` and a policy's
  ``queue-mode``: accepted, no effect, classic queues have no lazy mode from 3.12 on; a transient non-exclusive
  queue: imported, a deprecated feature whose messages a node restart loses).
* ``changed``: ``x-queue-version`` 1 is removed where the target refuses it (4.3.6 does; the version is the queue's
  index format on disk, nothing a client sees). 4.0 has only version 2 too but takes the argument and ignores it
  (measured on 4.0.5): ``applied`` there. 4.1 and 4.2 were not measured and are treated as refusing it, which costs
  nothing where the argument is ignored.
* ``refused``: mirroring keys (a policy's ``ha-*``, a queue's ``x-ha-*``): 4.x rejects them, so the restore is
  refused before anything is imported, naming each object and the transformation that removes them
  (``strip_mirroring``, with ``convert_to_quorum`` to keep the queues replicated).

Global parameters are not part of what a restore imports (it imports per vhost), so they never reach the target.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_rbak.broker.versions import CLASSIC_MIRRORING, QUEUE_VERSION_1
from airflow_rbak.restore.quorum_support import Version, version_text
from airflow_rbak.restore.transformations import MIRRORING_ARGUMENT_PREFIX, MIRRORING_POLICY_PREFIX

APPLIED, CHANGED, REFUSED = "applied", "changed", "refused"
#: The first version these rules are for: mirroring went in 4.0 (the version table's ``CLASSIC_MIRRORING``).
FROM: Version = CLASSIC_MIRRORING.since(True)
#: The first version taken to refuse ``x-queue-version`` 1 (the version table's ``QUEUE_VERSION_1``: 4.0.5 ignores
#: it, 4.3.6 refuses it; 4.1, 4.2 unmeasured).
QUEUE_VERSION_1_REFUSED_FROM: Version = QUEUE_VERSION_1.since("refused")


@dataclass(frozen=True)
class Finding:
    """One object of the selection and what the target's version does with it."""

    kind: str
    vhost: str
    name: str
    outcome: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def adapt(selected: dict[str, dict[str, list[dict[str, Any]]]], version: Version
          ) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], list[dict[str, str]]]:
    """The selection as the target will be sent it, and the findings (JSON) for the plan; unchanged before 4.0."""
    if version < FROM:
        return selected, []
    where = f"RabbitMQ {version_text(version)}"
    findings: list[Finding] = []
    out = {}
    for vhost, part in selected.items():
        queues = [_queue(vhost, q, version, findings) for q in part.get("queues", [])]
        for policy in part.get("policies", []):
            _policy(vhost, policy, where, findings)
        out[vhost] = {**part, "queues": queues}
    return out, [f.to_json() for f in findings]


def _queue(vhost: str, queue: dict[str, Any], version: Version, findings: list[Finding]) -> dict[str, Any]:
    where = f"RabbitMQ {version_text(version)}"
    name, arguments = str(queue.get("name")), dict(queue.get("arguments") or {})
    if queue.get("durable") is False and not queue.get("exclusive"):
        findings.append(Finding("queue", vhost, name, APPLIED, f"transient and not exclusive: {where} still imports "
                                "it, as a deprecated feature; its messages are lost when a node restarts"))
    if "x-queue-mode" in arguments:
        findings.append(Finding("queue", vhost, name, APPLIED, f"x-queue-mode {arguments['x-queue-mode']!r} is kept "
                                f"as an argument and has no effect on {where} (classic queues have no lazy mode)"))
    mirroring = sorted(k for k in arguments if k.startswith(MIRRORING_ARGUMENT_PREFIX))
    if mirroring:
        findings.append(Finding("queue", vhost, name, REFUSED, f"mirroring arguments {mirroring}: {where} has no "
                                "classic queue mirroring and refuses them"))
    if "x-queue-version" in arguments and arguments["x-queue-version"] != 2 and version < QUEUE_VERSION_1_REFUSED_FROM:
        findings.append(Finding("queue", vhost, name, APPLIED, f"x-queue-version {arguments['x-queue-version']!r} is "
                                f"kept as an argument and ignored by {where} (its classic queues are all version 2: "
                                "the index format on disk, nothing a client sees)"))
    elif "x-queue-version" in arguments and arguments["x-queue-version"] != 2:
        findings.append(Finding("queue", vhost, name, CHANGED, f"x-queue-version {arguments['x-queue-version']!r} "
                                f"removed: {where} has only version 2 and refuses the import of any other (the "
                                "version is the index format on disk, nothing a client sees)"))
        arguments.pop("x-queue-version")
        return {**queue, "arguments": arguments}
    return queue


def _policy(vhost: str, policy: dict[str, Any], where: str, findings: list[Finding]) -> None:
    name, definition = str(policy.get("name")), policy.get("definition") or {}
    mirroring = sorted(k for k in definition if str(k).startswith(MIRRORING_POLICY_PREFIX))
    if mirroring:
        findings.append(Finding("policy", vhost, name, REFUSED, f"mirroring keys {mirroring}: {where} rejects them "
                                "and with them the import of the vhost"))
    if "queue-mode" in definition:
        findings.append(Finding("policy", vhost, name, APPLIED, f"queue-mode {definition['queue-mode']!r} is accepted "
                                f"and has no effect on {where}"))


def refusal(findings: list[dict[str, str]] | None) -> str | None:
    """Why the import cannot run as planned (None: nothing the target refuses)."""
    refused = [f for f in findings or [] if f["outcome"] == REFUSED]
    if not refused:
        return None
    named = "; ".join(f"{f['kind']} {f['vhost']}/{f['name']}: {f['detail']}" for f in refused)
    return (f"refusing to import definitions the target rejects ({named}). Nothing was imported or published. Name "
            "the transformation strip_mirroring (with convert_to_quorum to keep the queues replicated), or restore "
            "without definitions (restore_definitions: false)")


def summary_lines(findings: list[dict[str, str]] | None) -> list[str]:
    """The findings as plan lines."""
    return [f"  for the target's version: {f['kind']} {f['vhost']}/{f['name']}: {f['outcome']}: {f['detail']}"
            for f in findings or []]
