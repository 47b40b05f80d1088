"""What makes two stored records the same message: the record without its delivery state.

A message read twice (a resumed capture, the next backup of the same queue, two backups a search finds it in) is
recognised as the same message although its delivery state differs between the reads: delivery tag, redelivered
flag, capture time, source queue and vhost. The capture's checkpoints and the search across backups
(:mod:`airflow_rbak.repository.message_search`) use this one definition; ``tests/capture/test_message_identity.py``
pins the digest byte for byte, since stored checkpoints hold it.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import orjson

from airflow_rbak.codec.records import BackupRecord


def without_delivery_state(record: BackupRecord) -> BackupRecord:
    """``record`` with what changes from one read of the same message to the next cleared."""
    return replace(record, delivery_tag=0, redelivered=False, backed_up_at=0, source_queue="", source_vhost="")


def fingerprint(record: BackupRecord) -> str:
    """A message's fingerprint: 32 hex digits over body, properties, headers, exchange, routing key.

    Headers count in key order: a quorum queue (3.10) re-encodes a returned message's header table sorted by
    key when it adds ``x-delivery-count``, so the message a resumed capture receives again has the same headers
    in another order. Delivery state does not count.
    """
    h = hashlib.sha256(record.body)
    headers = sorted(record.headers, key=lambda pair: pair[0])
    h.update(orjson.dumps([record.properties.to_json(), [[k, v.to_json()] for k, v in headers]]))
    h.update(f"{record.exchange}\0{record.routing_key}".encode())
    return h.hexdigest()[:32]
