"""Messages larger than the target accepts: found while the plan verifies segments, refused before anything is published.

RabbitMQ closes the channel of a publish whose body exceeds its ``max_message_size`` (16 MiB by default from 4.0,
128 MiB before). A restore that met such a record half-way would leave the queue partly restored, and a re-run
would meet the same wall; so the plan lists every record whose body is over :data:`LARGE_MESSAGE_BYTES` (segment,
index, size), the target's limit is read when the target is inspected
(:mod:`~airflow_rbak.broker.message_size_limit`), and :func:`.size_limits.size_refusal` refuses the plan naming each
record that exceeds it. The listing is cheap: a segment whose whole payload is smaller than the threshold cannot hold such a
record and is not read again, nor is one whose verification noted no record frame longer than the threshold
(:class:`~airflow_rbak.codec.record_summary.FrameLengths`), and in the others only frames longer than the
threshold are decoded (a record's frame is never shorter than its body).
"""

from __future__ import annotations

from airflow_rbak.codec import SegmentMetadata
from airflow_rbak.codec.record_summary import FrameLengths
from airflow_rbak.codec.records import decode_record
from airflow_rbak.codec.segment import decode_payload, iter_payload
from airflow_rbak.restore.request import RestoreRequest

#: Bodies above this size are listed in the plan (a limit below it is not checked record by record: see the plan's lines).
LARGE_MESSAGE_BYTES = 1024 * 1024

#: One listed record: segment key, index in the segment, body size in bytes.
LargeMessage = tuple[str, int, int]


def large_messages(data: bytes, meta: SegmentMetadata, request: RestoreRequest,
                   frames: FrameLengths | None = None) -> list[LargeMessage]:
    """The records of a verified segment inside the window whose body is larger than :data:`LARGE_MESSAGE_BYTES`;
    ``frames``: what the segment's verification noted of its record frames, if it read them all."""
    if meta.uncompressed_bytes <= LARGE_MESSAGE_BYTES:
        return []
    if frames is not None and frames.finished and frames.longest <= LARGE_MESSAGE_BYTES:
        return []
    header, payload = decode_payload(data, meta.key, request.max_decompressed_bytes, expected_size=meta.uncompressed_bytes)
    found = []
    for index, frame in enumerate(iter_payload(payload, header.record_count, meta.key)):
        if len(frame) <= LARGE_MESSAGE_BYTES:
            continue
        record = decode_record(frame)
        if len(record.body) > LARGE_MESSAGE_BYTES and request.in_window(record.backed_up_at):
            found.append((meta.key, index, len(record.body)))
    return found
