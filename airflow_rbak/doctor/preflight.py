"""The preflight: every check run, whatever the others found, into one :class:`Report`."""

from __future__ import annotations

from collections.abc import Callable

from airflow_rbak.doctor.broker_checks import broker_findings
from airflow_rbak.doctor.deployment import Deployment, PausedDags
from airflow_rbak.doctor.findings import Finding, Report, failure, ok, warning
from airflow_rbak.doctor.location_checks import location_findings
from airflow_rbak.doctor.spark_checks import spark_findings
from airflow_rbak.doctor.state_key import state_key_findings
from airflow_rbak.exceptions import RbakError

#: The DAGs that run on a schedule as shipped (rbak_drill is paused at creation by design).
SCHEDULED_DAGS = ("rbak_backup", "rbak_verify", "rbak_freshness")


def run_preflight(d: Deployment) -> Report:
    """Every check of ``d``; a check that raises is itself a failure, and the others still run."""
    checks: list[tuple[str, Callable[[], list[Finding]]]] = [
        ("broker", lambda: broker_findings(d)),
        ("storage", lambda: location_findings(d)),
        ("state key", lambda: state_key_findings(d.state_key)),
        ("DAGs", lambda: paused_findings(d.paused)),
        ("spark", lambda: spark_findings(d)),
    ]
    found: list[Finding] = []
    for item, check in checks:
        try:
            found += check()
        except RbakError as exc:
            found.append(failure(item, f"the check failed: {exc}", "see the message; rbak doctor --format json shows "
                                 "every finding"))
    return Report(tuple(found))


def paused_findings(paused: PausedDags | None) -> list[Finding]:
    """Which scheduled rbak DAGs are paused (no finding where the paused state is not read: a running task)."""
    if paused is None:
        return []
    if paused.unknown:
        return [warning("DAGs", f"cannot read which rbak DAGs are paused here ({paused.unknown})",
                        "airflow dags list -o table shows is_paused; airflow dags unpause rbak_backup")]
    stopped = [dag for dag in SCHEDULED_DAGS if paused.paused.get(dag) is not False]
    if not stopped:
        return [ok("DAGs", f"{', '.join(SCHEDULED_DAGS)} are unpaused")]
    unseen = [dag for dag in stopped if paused.paused.get(dag) is None]
    note = (f" ({', '.join(unseen)} not yet in the metadata database; [core] dags_are_paused_at_creation is "
            f"{paused.paused_at_creation}, so {'they start paused' if paused.paused_at_creation else 'they start unpaused'})"
            if unseen else "")
    if not paused.paused_at_creation and len(unseen) == len(stopped):
        return [ok("DAGs", f"scheduled once parsed{note}")]
    return [warning("DAGs", f"paused: {', '.join(stopped)}: their scheduled runs do not happen{note}",
                    f"airflow dags unpause {stopped[0]}" + (" (and each other one)" if len(stopped) > 1 else ""))]
