"""The headers a broker adds on delivery are broker state: repeated backups and a resumed capture on RabbitMQ 4.x.

RabbitMQ 4.3 counts every return of a quorum message in a new header, ``x-acquired-count`` (a backup gives its
messages back with ``basic.nack``, which raises it by one and leaves ``x-delivery-count`` alone); 4.0 counts
every return toward ``x-delivery-count`` and sets a default delivery limit of 20, so a backup leaves quorum
queues out there. The table of such headers is ``airflow_rbak/codec/broker_headers.py``. These tests run in a
session of the series their marker names (``RBAK_RABBITMQ_VERSION``, tests/broker/versions.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from urllib.parse import quote

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.capture.errors import CaptureInterruptedError
from airflow_rbak.codec.broker_headers import BROKER_HEADERS
from airflow_rbak.codec.manifest import BackupManifest
from airflow_rbak.codec.records import encode_record
from airflow_rbak.codec.segment import iter_records
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from tests.reliability import faults
from tests.reliability.expect import backed_up, header_order_free, published
from tests.restore.helpers import declare, publish, read_queue

pytestmark = pytest.mark.broker

BACKUPS = 25
COUNT = 120
#: Two quorum queues: one under the broker's default delivery limit (20 on 4.0 to 4.3), one under a policy's limit of 3,
#: lower than the number of backups, so a backup whose returns counted would lose messages well before the last one.
QUEUES = ("default-limit", "policy-limit")


def seed(broker, vhost: str) -> None:
    declare(broker.connection, vhost, dict.fromkeys(QUEUES, "quorum"))
    broker.api("PUT", f"policies/{quote(vhost, safe='')}/limit-3",
               json={"pattern": "^policy-limit$", "apply-to": "quorum_queues", "definition": {"delivery-limit": 3}})
    for queue in QUEUES:
        publish(broker.connection, vhost, queue, 0, COUNT, persistent=True)
    # The management API shows a new policy on a queue once its statistics refresh (about 5 s; measured 6 s on 4.0.5),
    # and a backup decides from what it shows: back up as one would, after the policy is in force
    deadline = time.monotonic() + 60
    while broker.api("GET", f"queues/{quote(vhost, safe='')}/policy-limit").json().get("policy") != "limit-3":
        assert time.monotonic() < deadline, "the policy never showed on the queue"
        time.sleep(0.5)


def stored(storage: Storage, manifest: BackupManifest, vhost: str, queue: str) -> list[bytes]:
    """A queue's records in a backup, each as its bytes without the delivery state of that one read (delivery tag,
    redelivered flag, capture time): what must not change while the queue does not."""
    entry = manifest.queue(vhost, queue)
    assert entry is not None, f"{manifest.backup_id} has no {queue}"
    return [encode_record(replace(r, delivery_tag=0, redelivered=False, backed_up_at=0))
            for s in entry.segments for r in iter_records(storage.get(s.key), s.key)]


def delivery_order(count: int) -> list[str]:
    """The message ids of ``published(count)`` (priority ``i % 10``) as a RabbitMQ 4.3 quorum queue delivers them:
    higher priorities first (32 levels), publish order within one."""
    return [f"m-{i}" for i in sorted(range(count), key=lambda i: -(i % 10))]


def in_delivery_order(views: list[tuple], fields: int = 2) -> list[tuple]:
    """The first ``fields`` of published views (body, properties, headers), in :func:`delivery_order`."""
    return [views[int(m[2:])][:fields] for m in delivery_order(len(views))]


def counters(views: list[tuple]) -> list[dict[str, int]]:
    """The broker's own headers of each message read with ``broker_headers=True``."""
    names = {h.name for h in BROKER_HEADERS}
    return [{k: int(v.value) for k, v in headers if k in names} for _body, _props, headers in views]


@pytest.mark.rabbitmq("4.3")
def test_quorum_queues_backed_up_25_times_keep_every_message_in_order_and_identical_records(broker, vhost, tmp_path):
    # Given two quorum queues, one under the default delivery limit and one under a policy limit of 3
    seed(broker, vhost)
    location = (tmp_path / "b").as_uri()
    storage = open_storage(location)

    # When each is backed up 25 times in a row
    records: dict[str, list[list[bytes]]] = {q: [] for q in QUEUES}
    for n in range(BACKUPS):
        manifest = BackupRun(broker.connection, BackupSettings(f"b-{n}", location, selector=QueueSelector(vhosts=(vhost,)))).run()
        assert manifest.completed_at is not None and manifest.extensions["left_out"] == [], manifest.extensions["left_out"]
        for queue in QUEUES:
            records[queue].append(stored(storage, manifest, vhost, queue))

    for queue in QUEUES:
        # Then every backup holds every message, and consecutive backups hold byte-identical records: the broker's
        # counters are not stored (x-acquired-count was 24 in the 25th)
        first = records[queue][0]
        assert len(first) == COUNT
        assert all(r == first for r in records[queue][1:]), queue
        assert not [h for r in first for h in json.loads(r)["headers"] if h[0] in {b.name for b in BROKER_HEADERS}]
        # in the queue's delivery order: RabbitMQ 4.3 delivers a quorum queue's higher priorities first (32 levels),
        # in publish order within one
        assert [json.loads(r)["properties"]["message_id"] for r in first] == delivery_order(COUNT)
        # and the queue still holds every message, in that order, its x-delivery-count never raised
        source = read_queue(broker.connection, vhost, queue, "quorum", COUNT, broker_headers=True)
        assert [(body, props) for body, props, _ in source] == in_delivery_order(published(COUNT, persistent=True))
        assert [c.get("x-delivery-count", 0) for c in counters(source)] == [0] * COUNT
        assert {c.get("x-acquired-count") for c in counters(source)} == {BACKUPS}  # the broker did count every return


@pytest.mark.rabbitmq("4.0")
def test_on_4_0_the_same_quorum_queues_are_left_out_with_the_reason_and_untouched(broker, vhost, tmp_path):
    # Given the same two quorum queues on RabbitMQ 4.0, which counts every return toward a default limit of 20
    seed(broker, vhost)

    # When they are backed up
    manifest = BackupRun(broker.connection, BackupSettings("b-40", (tmp_path / "b").as_uri(),
                                                           selector=QueueSelector(vhosts=(vhost,)))).run()

    # Then both are left out, each with its limit and what to do, and not a message was touched
    reasons = {q["queue"]: q["reason"] for q in manifest.extensions["left_out"]}
    assert set(reasons) == set(QUEUES) and not manifest.queues
    assert "delivery limit of 20" in reasons["default-limit"] and "delivery limit of 3" in reasons["policy-limit"]
    assert all("allow_delivery_count_increase" in r for r in reasons.values())
    for queue in QUEUES:
        # (4.0 delivers its two priority levels interleaved, two high for one normal: the set is what is compared)
        source = read_queue(broker.connection, vhost, queue, "quorum", COUNT, broker_headers=True)
        assert sorted((body, props) for body, props, _ in source) == sorted(v[:2] for v in published(COUNT, persistent=True))
        assert counters(source) == [{}] * COUNT  # never delivered before: no counter at all


RESUME_COUNT, RESUME_SIZE = 3_000, 6_144  # three staging chunks (5,000 deliveries or 8 MiB each: ~6.2 KiB here)


@pytest.mark.rabbitmq("4.3")
def test_a_quorum_capture_interrupted_after_its_first_chunk_resumes_and_completes_byte_exact(broker, vhost, tmp_path):
    # Given a quorum queue whose backup is interrupted once its first chunk is staged: the broker closes the
    # connection, so every message comes back with both counters raised (x-delivery-count by the close)
    declare(broker.connection, vhost, {"orders": "quorum"})
    publish(broker.connection, vhost, "orders", 0, RESUME_COUNT, RESUME_SIZE, persistent=True)
    storage = faults.TriggerStorage(open_storage((tmp_path / "b").as_uri()))
    settings = BackupSettings("resume-1", storage.url, selector=QueueSelector(vhosts=(vhost,)))
    storage.arm(lambda op, key: op == "put" and key.endswith("chunk-00000001.zst"), lambda: faults.close_all_connections(vhost))
    with pytest.raises(CaptureInterruptedError):
        BackupRun(broker.connection, settings, storage).run()
    assert ManifestStore(storage).load("resume-1").completed_at is None

    # When the same backup runs again
    manifest = BackupRun(broker.connection, settings, storage).run()

    # Then it resumed after the staged chunk (the counters are no part of a message's identity) and holds every
    # message once, in the queue's order, byte-exact as published: body, properties, typed headers (RabbitMQ 4.3
    # delivers a quorum message's header table sorted by key, from its first delivery on)
    assert manifest.completed_at is not None and manifest.queue(vhost, "orders").message_count == RESUME_COUNT
    sent = published(RESUME_COUNT, RESUME_SIZE, persistent=True)
    records = backed_up(storage, "resume-1", vhost, "orders")
    assert records == header_order_free(in_delivery_order(sent, 3))
    source = read_queue(broker.connection, vhost, "orders", "quorum", RESUME_COUNT, broker_headers=True)
    assert [(body, props) for body, props, _ in source] == in_delivery_order(sent)
    # the close counted once; the re-run's nack return did not
    assert {c.get("x-delivery-count") for c in counters(source)} == {1}
