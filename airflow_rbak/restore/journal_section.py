"""Recovery to a point in time as a plan section: what comes from the snapshot and from the journal, the gaps, the
duplicates it may cause, and the refusals (a gap in the window, a moment past what the archives cover).

The facts are the plan's (:func:`.journal_recovery.plan_journal`); nothing here reads a location or a broker.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection

AT_LEAST_ONCE = ("consumers may see again what they had consumed after the snapshot was taken, and a message "
                 "published while the snapshot ran may come twice (at least once)")


def _stamp(ms: int | None) -> str:
    if ms is None:
        return "open"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _gap(gap: dict[str, Any]) -> str:
    return f"{_stamp(gap['from'])} .. {_stamp(gap['to'])}: {gap['reason']}"


def _archives(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for v in facts["vhosts"] for a in v["archives"]]


def _gaps(facts: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for v in facts["vhosts"] for g in v["gaps"]]


def counts(plan: RestorePlan) -> dict[str, Any]:
    """Messages from the snapshot and from the journal (per archive), and the duplicates the recovery may cause."""
    facts = plan.journal or {}
    journal = [q for q in plan.queues if q.journal_archive is not None]
    archives = _archives(facts)
    during = sum(a.get("during_snapshot", 0) for a in archives)
    redelivered = sum(a.get("redelivered", 0) for a in archives)
    return {"from_snapshot": sum(q.records_in_window for q in plan.queues if q.journal_archive is None),
            "from_journal": sum(q.records_in_window for q in journal),
            "per_archive": {a["backup_id"]: a["records"] for a in archives},
            "duplicates_possible": during + redelivered, "published_during_snapshot": during,
            "redelivered_by_journal": redelivered}


class JournalSection(PlanSection):
    """A recovery to a point in time's lines, report fields and refusals."""

    name = "journal_recovery"
    placement = Placement(log=5, summary=5, refusal=5, report=5)

    def queue_log_lines(self, queue: QueuePlan) -> list[str]:
        if queue.journal_archive is None:
            return []
        return [f"    journal archive {queue.journal_archive}: each record to its own exchange and routing key, CC and "
                "BCC kept (the target's bindings route it); at least once on resume"]

    def log_lines(self, plan: RestorePlan) -> list[str]:
        facts = plan.journal
        if facts is None:
            return []
        c = counts(plan)
        lines = [f"recovery to {_stamp(facts['until'])}: {c['from_snapshot']} messages from snapshot {facts['snapshot']} "
                 f"(created {_stamp(facts['snapshot_created_at'])}), {c['from_journal']} from the journal; up to "
                 f"{c['duplicates_possible']} may be duplicates ({AT_LEAST_ONCE})"]
        for vhost in facts["vhosts"]:
            cover = vhost["coverage"]
            lines.append(f"  journal of {vhost['vhost']}: covers "
                         + (f"{_stamp(cover[0])} .. {_stamp(cover[1])}" if cover else "nothing (no archive)")
                         + f", {len(vhost['archives'])} archives replayed, {len(vhost['gaps'])} gaps in the window")
            lines += [f"    gap {_gap(g)}" for g in vhost["gaps"]]
            lines += [f"    archive refused {r['backup_id']}: {r['reason']}" for r in vhost["refused_archives"]]
        lines += [f"  left out of the snapshot, so only its journal's records come back: {printable(q['vhost'])}/"
                  f"{printable(q['queue'])} ({printable(q['reason'])})" for q in facts.get("left_out", [])]
        return lines

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        facts = plan.journal
        if facts is None:
            return []
        c = counts(plan)
        per = ", ".join(f"{md_code(b)}: {n}" for b, n in c["per_archive"].items()) or "none"
        lines = [f"- **Recovery to {_stamp(facts['until'])}**: {c['from_snapshot']} messages from the snapshot "
                 f"{md_code(facts['snapshot'])}, {c['from_journal']} from the journal ({per})",
                 f"- **At least once**: {AT_LEAST_ONCE}; up to {c['duplicates_possible']} journal records may be "
                 f"duplicates ({c['published_during_snapshot']} published while the snapshot ran, "
                 f"{c['redelivered_by_journal']} redelivered by the journal)"]
        left_out = facts.get("left_out", [])
        if left_out:
            named = ", ".join(md_code(f"{q['vhost']}/{q['queue']}") for q in left_out[:10])
            lines.append(f"- **{len(left_out)} queues the snapshot left out** ({named}{', …' if len(left_out) > 10 else ''}):"
                         " only what the journal holds of them comes back, not what they held when the snapshot ran")
        gaps = _gaps(facts)
        if gaps:
            how = "accepted (`journal_accept_gaps`)" if facts["accept_gaps"] else "**refused** unless accepted"
            lines.append(f"- **{len(gaps)} gaps in the journal** between the snapshot and the moment, {how}: "
                         "messages published in them may be missing")
        return lines

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        facts = plan.journal
        if facts is None:
            return []
        lines = ["", "### Recovery to a point in time", "",
                 f"Snapshot {md_code(facts['snapshot'])} created {_stamp(facts['snapshot_created_at'])}, completed "
                 f"{_stamp(facts['snapshot_completed_at'])}; then the journal's records from the last clock mark at or "
                 f"before its creation ({', '.join(_stamp(v['from']) for v in facts['vhosts'])}) until "
                 f"{_stamp(facts['until'])} (excluded), in archive order then stored order, each to its own "
                 "exchange and routing key with all its headers (CC and BCC included): the target's bindings route "
                 f"them. {AT_LEAST_ONCE[0].upper()}{AT_LEAST_ONCE[1:]}. A journal entry resumed after a stop may "
                 "publish again what was unconfirmed when it stopped.", "",
                 "| vhost | archive | from | to | records | redelivered | published while the snapshot ran |",
                 "|---|---|---|---|---|---|---|"]
        for vhost in facts["vhosts"]:
            lines += [f"| {md_code(vhost['vhost'], in_table=True)} | {md_code(a['backup_id'], in_table=True)} | "
                      f"{_stamp(a['from'])} | {_stamp(a['to'])} | {a['records']} | {a['redelivered']} | "
                      f"{a.get('during_snapshot', 0)} |" for a in vhost["archives"]]
        gaps = _gaps(facts)
        if gaps:
            lines += ["", f"Gaps ({len(gaps)}): messages published in them may be missing.", ""]
            lines += [f"- {md_code(_gap(g))}" for g in gaps]
        return lines

    def report_fields(self, plan: RestorePlan) -> dict[str, Any]:
        facts = plan.journal
        if facts is None:
            return {}
        return {"journal_recovery": {"until": facts["until"], "snapshot": facts["snapshot"], **counts(plan),
                                     "gaps": _gaps(facts), "gaps_accepted": facts["accept_gaps"],
                                     "snapshot_left_out": facts.get("left_out", []),
                                     "coverage": {v["vhost"]: v["coverage"] for v in facts["vhosts"]}}}

    def refusal(self, plan: RestorePlan, request: RestoreRequest) -> str | None:
        facts = plan.journal
        if facts is None:
            return None
        reasons = []
        for vhost in facts["vhosts"]:
            cover = vhost["coverage"]
            if cover is None:
                reasons.append(f"vhost {vhost['vhost']!r} has no journal archive in {plan.storage_url}: nothing "
                               "covers the time after the snapshot")
            elif facts["until"] > cover[1]:
                reasons.append(f"journal_until {_stamp(facts['until'])} is past the journal of vhost "
                               f"{vhost['vhost']!r}, whose coverage ends at {_stamp(cover[1])} ({cover[1]}); recover to "
                               "that moment or earlier, or wait for the next archive")
        gaps = _gaps(facts)
        if gaps and not facts["accept_gaps"]:
            reasons.append(f"the journal has {len(gaps)} gap(s) between the snapshot and journal_until, where "
                           f"messages may be missing: {'; '.join(_gap(g) for g in gaps[:5])}; set "
                           "journal_accept_gaps to recover through them")
        if not reasons:
            return None
        return "recovery to a point in time refused, nothing was imported or published: " + " | ".join(reasons)


SECTION = JournalSection()
