"""Reads a queue's staged chunks back as record JSON, in capture order: what the segment stages seal.

Every chunk is checked whole (framing, CRC-32, record count) before its records are read, so damaged staging
stops an encode with the chunk's key rather than sealing part of it.
"""

from __future__ import annotations

from collections.abc import Iterator

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.codec.segment import decode_payload, iter_payload
from airflow_rbak.codec.staged_records import StagedRecordError, read_staged
from airflow_rbak.storage.base import Storage


def iter_staged_json(
    storage: Storage, keys: list[str], vhost: str, queue: str, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Yield each staged record's JSON (``codec/staged_records.py``) and ``backed_up_at``, every chunk fully
    checked first."""
    for key in keys:
        header, payload = decode_payload(storage.get(key), key, cap)
        for index, staged in enumerate(iter_payload(payload, header.record_count, key)):
            try:
                made = read_staged(staged, queue, vhost)
            except StagedRecordError as exc:
                raise StagedRecordError(f"{key}: record {index}: {exc}") from None
            yield made
