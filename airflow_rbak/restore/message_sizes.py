"""Messages larger than the target accepts: found while the plan verifies segments, refused before anything is published.

RabbitMQ closes the channel of a publish whose body exceeds its ``max_message_size`` (16 MiB by default from 4.0,
128 MiB before). A restore that met such a record half-way would leave the queue partly restored, and a re-run
would meet the same wall; so the plan lists every record whose body is over :data:`LARGE_MESSAGE_BYTES` (segment,
index, size), the target's limit is read when the target is inspected
(:mod:`~airflow_rbak.broker.message_size_limit`), and :func:`size_refusal` refuses the plan naming each record that
exceeds it. The listing is cheap: a segment whose whole payload is smaller than the threshold cannot hold such a
record and is not read again, and in a larger one only frames longer than the threshold are decoded (a record's
frame is never shorter than its body).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_rbak.codec import SegmentMetadata
from airflow_rbak.codec.records import decode_record
from airflow_rbak.codec.segment import decode_payload, iter_payload
from airflow_rbak.restore.request import RestoreRequest

if TYPE_CHECKING:
    from airflow_rbak.restore.plan import RestorePlan

#: Bodies above this size are listed in the plan (a limit below it is not checked record by record: see the plan's lines).
LARGE_MESSAGE_BYTES = 1024 * 1024
#: Records a refusal names at most (the plan's lines list them all).
NAMED_IN_REFUSAL = 10

#: One listed record: segment key, index in the segment, body size in bytes.
LargeMessage = tuple[str, int, int]


def large_messages(data: bytes, meta: SegmentMetadata, settings: RestoreRequest) -> list[LargeMessage]:
    """The records of a verified segment inside the window whose body is larger than :data:`LARGE_MESSAGE_BYTES`."""
    if meta.uncompressed_bytes <= LARGE_MESSAGE_BYTES:
        return []
    header, payload = decode_payload(data, meta.key, settings.max_decompressed_bytes, expected_size=meta.uncompressed_bytes)
    found = []
    for index, frame in enumerate(iter_payload(payload, header.record_count, meta.key)):
        if len(frame) <= LARGE_MESSAGE_BYTES:
            continue
        record = decode_record(frame)
        if len(record.body) > LARGE_MESSAGE_BYTES and settings.in_window(record.backed_up_at):
            found.append((meta.key, index, len(record.body)))
    return found


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
