"""The identity of a message across reads: one definition for a resumed capture and for the next stream backup.

A message read twice must be recognised as the same message although its
delivery state differs between the reads: a capture resumed after an
interruption checks that the message it skips to is the one the interrupted
run staged last, and the next backup of a stream re-reads the offset the
previous one ended at to tell the stream was not re-created. A message's
identity is its record as the capture stores it (broker-owned headers already
dropped) without the delivery state: delivery tag, redelivered flag, capture
time, source queue and vhost. :func:`identity` builds it from a delivery, for
both; the record without its delivery state and its checkpoint digest (:func:`fingerprint`) are
defined in :mod:`airflow_rbak.codec.record_identity`, which the search across backups shares.

Two digests of it are stored, and they stay byte for byte what they have always
been (``tests/capture/test_message_identity.py`` pins both): a checkpoint's
``last_fingerprint`` (:func:`fingerprint`) and a stream's ``last_fingerprint``
in the manifest (:func:`stream_fingerprint`). A change to either would make
every stored value stop matching: a resumed capture would refuse its
checkpoint, and the next backup of every stream would read it again from
offset 0.
"""

from __future__ import annotations

import hashlib

import pika

from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec.record_identity import fingerprint, without_delivery_state
from airflow_rbak.codec.records import BackupRecord, decode_record, encode_record
from airflow_rbak.codec.staged_records import DROPPED_HEADERS, STREAM_BROKER_HEADERS, read_staged

__all__ = ["fingerprint", "identity", "stream_delivery_fingerprint", "stream_fingerprint", "without_delivery_state"]


def identity(
    method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes, drop_headers: frozenset[str]
) -> BackupRecord:
    """A delivery's record as the capture stores it, without its delivery state; ``drop_headers`` are the
    broker-owned headers the capture drops (one of ``DROPPED_HEADERS``). Built once per staged chunk or stream
    mark, not per message: staged and read as encode reads it, so it is the record a segment holds."""
    stored, _ = read_staged(stage_delivery(method, props, body, 0, DROPPED_HEADERS.index(drop_headers)), "", "")
    return without_delivery_state(decode_record(stored))


def stream_fingerprint(record: BackupRecord) -> str:
    """A stream mark's fingerprint of a message: the SHA-256 of its :func:`identity` record's JSON (64 hex digits).

    A stream hands out its messages as they were published, so headers count in their order.
    """
    return hashlib.sha256(encode_record(without_delivery_state(record))).hexdigest()


def stream_delivery_fingerprint(method: pika.spec.Basic.Deliver, props: pika.spec.BasicProperties, body: bytes) -> str:
    """:func:`stream_fingerprint` of a delivery from a stream (its offset header is the broker's)."""
    return stream_fingerprint(identity(method, props, body, STREAM_BROKER_HEADERS))
