"""What the view learns beyond a manifest: damage found by readers, and why a restore ended (ui/damage.py)."""

from __future__ import annotations

from airflow_rbak.ui.damage import DamageLedger, Finding, damage_of, failure_reason, restore_outcome


def _run(kind: str, run_id: str, **extra) -> dict:
    return {"kind": kind, "run_id": run_id, "verify_state": None, "verify_at": None, **extra}


def test_a_plan_refused_as_damaged_a_failed_verify_and_a_browser_finding_each_mark_damage_newest_first():
    runs = [_run("restore", "r1", damaged=True, failed_task="plan", ended_at=2000, reason="2 segments failed verification"),
            _run("verify", "v1", verify_state="failed", verify_at=3000)]
    found = [Finding(1000, "the message browser", "segment q/0002.seg: SHA-256 differs")]

    assert damage_of(runs, found) == [
        "the verify of run v1 failed",
        "restore run r1 refused it in plan: 2 segments failed verification",
        "the message browser found segment q/0002.seg: SHA-256 differs"]


def test_a_verify_that_succeeds_afterwards_clears_what_was_found_before_it():
    runs = [_run("verify", "v1", verify_state="failed", verify_at=1000),
            _run("verify", "v2", verify_state="success", verify_at=2000)]

    assert damage_of(runs, [Finding(1500, "the message browser", "x")]) == []
    assert damage_of(runs, [Finding(2500, "the message browser", "x")]) == ["the message browser found x"]


def test_a_restore_that_failed_for_another_reason_or_was_rejected_is_no_damage():
    runs = [_run("restore", "r1", failed_task="approve", reason="rejected by bob", ended_at=1),
            _run("restore", "r2", failed_task="publish", reason="connection lost", ended_at=2)]

    assert damage_of(runs, []) == []


def test_a_rejection_reads_differently_from_a_failure_in_plan():
    assert restore_outcome("failed", "approve", "rbak approval: rejected by bob") == \
        "not approved: rbak approval: rejected by bob"
    assert restore_outcome("failed", "plan", "rbak plan failed: 1 segments failed verification") == \
        "failed in plan: rbak plan failed: 1 segments failed verification"
    assert restore_outcome("failed", "plan", None) == "failed in plan (the reason is in the task's log)"
    assert restore_outcome("success", None, None) is None


def test_the_reason_is_the_failing_exception_of_the_task_log_and_its_cause_names_damage():
    events = [{"event": "starting", "level": "info"},
              {"event": "Task failed with exception", "level": "error", "error_detail": [
                  {"exc_type": "AirflowException", "exc_value": "rbak plan failed: backup 'b': 1 segments failed "
                   "verification (q/2.seg: SHA-256 differs)", "is_cause": False},
                  {"exc_type": "DamagedSegmentsError", "exc_value": "...", "is_cause": True}]}]

    reason, damaged = failure_reason(events)

    assert reason.startswith("rbak plan failed: backup 'b'") and damaged
    assert failure_reason([{"level": "error", "event": "rbak approval: rejected\x1b[31m"}]) == \
        ("rbak approval: rejected\\x1b[31m", False)


def test_the_ledger_keeps_one_finding_per_segment():
    ledger = DamageLedger(clock=lambda: 5.0)
    ledger.record("file:///b", "b1", "q/2.seg", "SHA-256 differs")
    ledger.record("file:///b", "b1", "q/2.seg", "SHA-256 differs")

    assert ledger.found("file:///b", "b1") == [Finding(5000, "the message browser", "segment q/2.seg: SHA-256 differs")]
    assert ledger.found("file:///b", "other") == []
