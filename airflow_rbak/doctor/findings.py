"""What the preflight found: one :class:`Finding` per item, ok / warning / failure, each with its fix in one line."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Status(enum.Enum):
    """How a finding stands; ordered, so the worst of a report is its maximum."""

    OK = "ok"
    WARNING = "warning"
    FAILURE = "failure"

    @property
    def rank(self) -> int:
        return list(Status).index(self)


@dataclass(frozen=True)
class Finding:
    """One item checked: what was found (``detail``) and, unless it is ok, what to do (``fix``, one line).

    ``unreachable``: the check could not reach the broker or the location (a fault a retry may clear), not a setting
    that is wrong; the backup DAG's first task leaves those to the step, which retries them.
    """

    item: str
    status: Status
    detail: str
    fix: str = ""
    unreachable: bool = False

    def line(self) -> str:
        """``[status] item: detail``, then ``fix: ...`` when there is one."""
        text = f"[{self.status.value}] {self.item}: {self.detail}"
        return text + (f"\n    fix: {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, Any]:
        return {"item": self.item, "status": self.status.value, "detail": self.detail, "fix": self.fix or None}


def ok(item: str, detail: str) -> Finding:
    return Finding(item, Status.OK, detail)


def warning(item: str, detail: str, fix: str) -> Finding:
    return Finding(item, Status.WARNING, detail, fix)


def failure(item: str, detail: str, fix: str, unreachable: bool = False) -> Finding:
    return Finding(item, Status.FAILURE, detail, fix, unreachable)


@dataclass(frozen=True)
class Report:
    """Every finding, in the order checked."""

    findings: tuple[Finding, ...]

    @property
    def worst(self) -> Status:
        return max((f.status for f in self.findings), key=lambda s: s.rank, default=Status.OK)

    def of(self, status: Status) -> list[Finding]:
        return [f for f in self.findings if f.status is status]

    def summary(self) -> str:
        """``N ok, N warning(s), N failure(s)``."""
        return (f"{len(self.of(Status.OK))} ok, {len(self.of(Status.WARNING))} warning(s), "
                f"{len(self.of(Status.FAILURE))} failure(s)")

    def to_json(self) -> dict[str, Any]:
        return {"status": self.worst.value, "findings": [f.to_json() for f in self.findings]}
