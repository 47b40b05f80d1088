"""A capture that stopped at a quorum queue's delivery limit, remembered in the location until the risk is gone.

Before RabbitMQ 4.3 every return counts toward a quorum queue's delivery limit *L* (:mod:`.returns`). An allowed
capture stops at the first message that another capture's return would bring to *L* and gives everything back, so
its messages end at (up to) *L - 1*. The next capture cannot see a count before the message is delivered, and its
return would bring each message it received to *L* (where the application has no retry left; one more return, and
the broker drops or dead-letters them: measured on 4.0.5, all 12 of a test queue). So the capture that stops records
it in the location, not under its backup id (later backups have other ids):
:func:`~airflow_rbak.codec.layout.delivery_limit_stop_key`. Every later capture of that queue whose returns count
leaves it out before receiving anything (:func:`stop_reason`), until the risk is gone:

* the queue is seen empty (no message is left near the limit): the record is deleted;
* its limit was raised above the recorded one (every message is then at most one below the old limit, and a return
  takes it at most to the old limit, below the new one): deleted;
* or the operator deletes the key the reason names.

The record is untrusted input: read bounded, and one that cannot be read or parsed counts as a stop (the safe
direction: the queue is left out, saying so). It is not sealed: a planted one can only leave a queue out, visibly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.codec.bounded_json import JsonLimits
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.codec.layout import delivery_limit_stop_key
from airflow_rbak.display import package_logger
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError
from airflow_rbak.storage.json_objects import load_json

log = package_logger(__name__)

#: A stop record is a few hundred bytes.
STOP_LIMITS = JsonLimits(max_bytes=16 * 1024, max_values=64, what="a delivery-limit stop record")


def record_stop(storage: Storage, info: QueueInfo, limit: int, backup_id: str) -> str:
    """Record that ``backup_id`` stopped at ``info``'s delivery limit ``limit``; return the record's key.

    Raises ``StorageError`` when it cannot be written (the caller says so: the next capture would not know).
    """
    key = delivery_limit_stop_key(info.vhost, info.name)
    stopped_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document = {"vhost": info.vhost, "queue": info.name, "limit": limit, "backup_id": backup_id, "stopped_at": stopped_at}
    storage.put(key, json.dumps(document, sort_keys=True).encode())
    return key


def stop_reason(storage: Storage, info: QueueInfo, limit: int, exact_depth: Callable[[], int]) -> str | None:
    """Why ``info`` must be left out because an earlier capture stopped at its delivery limit, or None.

    ``info`` is the queue as the management API describes it now and ``limit`` its limit now; a record the risk has
    passed is deleted here: the queue is empty when the management API counts no message (ready or unacknowledged)
    and ``exact_depth`` (asked only then: the management figure is sampled, and absent for a new queue) none ready.
    """
    key = delivery_limit_stop_key(info.vhost, info.name)
    try:
        document = load_json(storage, key, STOP_LIMITS)
    except ObjectNotFoundError:
        return None
    except (StorageError, CodecError) as exc:
        document = f"{type(exc).__name__}: {str(exc)[:300]}"
    if info.messages == 0 and exact_depth() == 0:
        _clear(storage, key, "the queue is empty")
        return None
    recorded = document.get("limit") if isinstance(document, dict) else None
    if not isinstance(recorded, int) or isinstance(recorded, bool):
        problem = document if isinstance(document, str) else "not a stop record: no integer limit"
        return (f"the delivery-limit stop record {key} in the backup location is unreadable ({problem}); it counts "
                f"as a stop: the messages may be near the delivery limit of {limit}, and another capture would "
                f"bring them to it. It is deleted once a backup sees the queue empty; or delete it yourself once the "
                "messages are safe")
    if limit > recorded:
        _clear(storage, key, f"its delivery limit was raised from {recorded} to {limit}")
        return None
    return (f"backup {str(document.get('backup_id'))[:200]!r} stopped at this queue's delivery limit of {recorded} "
            f"(at {str(document.get('stopped_at'))[:40]}): its messages may be one below the limit and another "
            f"capture would bring them to it. {key} in the backup location records it and is deleted once a backup sees "
            "the queue empty or its limit raised; or delete it yourself once the messages are safe")


def _clear(storage: Storage, key: str, why: str) -> None:
    """Delete a record whose risk has passed (a delete that fails is warned of: the risk has passed either way)."""
    try:
        storage.delete(key)
    except StorageError as exc:
        log.warning("could not delete the delivery-limit stop record %s (%s): %s", key, why, exc)
        return
    log.info("deleted the delivery-limit stop record %s: %s", key, why)
