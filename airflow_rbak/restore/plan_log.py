"""The plan as the restore's log shows it: the backup, the clusters, one line per queue, then every section's lines.

Names in these lines come from the backup's manifest and the target; the plan logs them as the sections word them.
No secrets: the storage URL is already credential-free.
"""

from __future__ import annotations

from airflow_rbak.restore import sections
from airflow_rbak.restore.restore_plan import QueuePlan, RestorePlan


def summary_lines(plan: RestorePlan) -> list[str]:
    """The plan as log lines: what it restores from where into where, each queue, then each section's lines."""
    lines = [
        f"restore plan for backup {plan.backup_id} from {plan.storage_url}, window "
        f"{plan.window_start}..{plan.window_end}: {len(plan.queues)} queues, {plan.records_in_window} records, "
        f"drawn from backups {', '.join(plan.drawn_from) or '-'}",
        f"  source cluster {plan.source_cluster or '(unknown)'} -> target cluster {plan.target_cluster or '(not inspected)'}"
        + (" (THE SAME CLUSTER)" if plan.source_cluster and plan.source_cluster == plan.target_cluster else ""),
    ]
    for q in plan.queues:
        lines += [_queue_line(q), *sections.queue_log_lines(q)]
    return lines + sections.log_lines(plan)


def _queue_line(q: QueuePlan) -> str:
    now = ("its vhost's queues" if q.journal_archive else "no such queue") if q.target_depth is None \
        else f"holds {q.target_depth}"
    kind = q.queue_type + (f" -> {q.target_queue_type}" if q.target_queue_type else "")
    where = f"{q.target_vhost}/{q.target_queue}" + (" (replayed where each record died)" if q.replay else
                                                    " (the journal: routed by the target's bindings)"
                                                    if q.journal_archive else "")
    return (f"  {q.source_vhost}/{q.source_queue} ({kind}) -> {where}: "
            f"{q.records_in_window} of {q.records_total} records in {len(q.segments)} segments "
            f"from {', '.join(q.drawn_from) or '-'}; target {now}, "
            f"adds {q.to_add}" + (f" (resuming: {q.published_before} confirmed before)" if q.resumes else ""))
