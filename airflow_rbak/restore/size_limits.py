"""The plan against the target's ``max_message_size``: the records over it, the refusal, the plan's lines (a section).

The records come from the plan (:mod:`.message_sizes` lists those over 1 MiB while segments are verified), the limit
from the target when it is inspected (:mod:`~airflow_rbak.broker.message_size_limit`).
"""

from __future__ import annotations

from airflow_rbak.display import md_code, printable
from airflow_rbak.restore.message_sizes import LARGE_MESSAGE_BYTES, LargeMessage
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.restore.restore_plan import RestorePlan
from airflow_rbak.restore.section import Placement, PlanSection

#: Records a refusal names at most (the plan's lines list them all).
NAMED_IN_REFUSAL = 10


def oversized(plan: RestorePlan) -> list[tuple[str, LargeMessage]]:
    """(``vhost/queue`` target, record) for every listed record over the plan's ``target_max_message_size``."""
    limit = plan.target_max_message_size
    if not limit:
        return []
    return [(f"{q.target_vhost}/{q.target_queue}", m) for q in plan.queues
            if q.to_add for m in q.large_messages if m[2] > limit]


def size_refusal(plan: RestorePlan) -> str | None:
    """Why the plan's target cannot take some of its records (None: every listed record fits)."""
    over = oversized(plan)
    if not over:
        return None
    named = "; ".join(f"{where} segment {key} record {index}: {size} bytes" for where, (key, index, size)
                      in over[:NAMED_IN_REFUSAL])
    more = f" and {len(over) - NAMED_IN_REFUSAL} more (the plan lists them all)" if len(over) > NAMED_IN_REFUSAL else ""
    limit = plan.target_max_message_size
    source = plan.target_message_size_source or "max_message_size"
    return (f"refusing to restore backup {plan.backup_id!r}: {len(over)} records are larger than the "
            f"target's max_message_size of {limit} bytes ({source}), which would close the channel mid-restore "
            f"({named}{more}). Nothing was imported or published. Raise max_message_size on the target "
            "(rabbitmq.conf; at most 512 MiB), or leave those records out (time window, queue selection)")


def summary_lines(plan: RestorePlan) -> list[str]:
    """The plan's lines about message sizes: the target's limit, and every record over it."""
    limit = plan.target_max_message_size
    if limit is None:
        return []
    lines = [f"  target max_message_size: {limit} bytes ({plan.target_message_size_source})"]
    if limit < LARGE_MESSAGE_BYTES:
        lines.append(f"  WARNING: records are measured against {LARGE_MESSAGE_BYTES} bytes only; a smaller limit is "
                     "met at publish time, where the broker closes the channel")
    lines += [f"  TOO LARGE for the target: {where} segment {key} record {index}: {size} bytes"
              for where, (key, index, size) in oversized(plan)]
    return lines


class MessageSizes(PlanSection):
    """The target's message size limit and every record over it; one such record refuses the restore."""

    name = "message sizes"
    placement = Placement(log=60, summary=40, refusal=20)

    def log_lines(self, plan: RestorePlan) -> list[str]:
        """The limit and every record over it."""
        return summary_lines(plan)

    def approval_summary(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """How many records are too large: the refusal the approver must see first."""
        over = oversized(plan)
        if not over:
            return []
        return [f"- **{len(over)} records are larger than the target's max_message_size "
                f"({plan.target_max_message_size} bytes): the restore is refused** (listed below)"]

    def approval_lines(self, plan: RestorePlan, request: RestoreRequest) -> list[str]:
        """The target's message size limit, and every record over it (each refuses the restore)."""
        if plan.target_max_message_size is None:
            return []
        lines = ["", "### Message size", "", f"The target takes messages of at most {plan.target_max_message_size} bytes "
                 f"({printable(plan.target_message_size_source or 'max_message_size')})."]
        over = oversized(plan)
        if over:
            lines += ["", f"**{len(over)} records are larger, so the restore is refused:**", ""]
            lines += [f"- {md_code(where)} segment {md_code(key)} record {index}: {size} bytes"
                      for where, (key, index, size) in over]
        return lines

    def refusal(self, plan: RestorePlan, request: RestoreRequest) -> str | None:
        """Records the target cannot take would close the channel mid-restore."""
        return size_refusal(plan)


SECTION = MessageSizes()
