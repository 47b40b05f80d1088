"""Storage that fails: backups complete after retries or stop with ``completed_at: null``; restores never
publish from a segment that failed its checksum.

Real broker queues, BackupRun and RestoreRun; the storage is a real folder or loopback S3 bucket behind
:class:`FaultyStorage` (seeded faults) and ``RetryingStorage`` (no back-off sleeps, to stay fast).
"""

from __future__ import annotations

import hashlib
from collections import Counter

import pika
import pytest

from airflow_rbak.backup.run import BackupAlreadyCompleteError, BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestNotFoundError, ManifestStore
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.errors import DamagedSegmentsError
from airflow_rbak.storage import RetryingStorage, Storage, open_storage
from tests.codec.independent_reader import read_segment
from tests.reliability.faulty_storage import FaultyStorage
from tests.restore.helpers import body_of, declare, publish

pytestmark = pytest.mark.broker
COUNT = 300
SEGMENT_BYTES = 24 * 1024  # 24 segments of the 300 messages


def retrying(inner: Storage, retries: int) -> RetryingStorage:
    return RetryingStorage(inner, retries=retries, base_delay=0.0, sleep=lambda _s: None)


def settings(location: str, vhost: str, tmp_path, backup_id: str = "faults-1", **kwargs) -> BackupSettings:
    return BackupSettings(backup_id, location, selector=QueueSelector(vhosts=(vhost,)), segment_max_bytes=SEGMENT_BYTES, lock_owner="fault drill", **kwargs)


@pytest.fixture
def orders(broker, vhost):
    """A classic queue of 300 messages."""
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, COUNT)
    return vhost


def depth(broker, vhost: str) -> int:
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        return conn.channel().queue_declare("orders", passive=True).method.message_count


def stored_bodies(storage: Storage, backup_id: str) -> list[bytes]:
    (queue,) = ManifestStore(storage).load(backup_id).queues
    return [bytes(r["body"] or []) for s in queue.segments for r in read_segment(storage.get(s.key))[1]]


def assert_lists_only_whole_segments(storage: Storage, backup_id: str) -> None:
    """Whatever state the backup is in (no manifest, incomplete, complete), each segment its manifest lists
    is stored whole."""
    try:
        manifest = ManifestStore(storage).load(backup_id)
    except ManifestNotFoundError:
        return
    for queue in manifest.queues:
        for segment in queue.segments:
            assert hashlib.sha256(storage.get(segment.key)).hexdigest() == segment.checksum, segment.key


def test_faults_that_retries_absorb_leave_a_complete_byte_exact_backup(broker, orders, location, tmp_path):
    # Given storage that fails 30% of calls (errors, lost replies, timeouts, broken-off reads), retried up to 12 times
    faulty = FaultyStorage(open_storage(location, retries=0), rate=0.3, seed=11)

    # When the queue is backed up through it
    manifest = BackupRun(broker.connection, settings(location, orders, tmp_path), retrying(faulty, 12)).run()

    # Then the backup is complete, validates deeply and holds every message once, in order; the queue is untouched
    clean = open_storage(location)
    assert sum(faulty.injected.values()) >= 15, faulty.injected
    assert manifest.completed_at is not None and manifest.total_messages == COUNT
    assert validate_backup(clean, "faults-1", deep=True).valid
    assert stored_bodies(clean, "faults-1") == [body_of(i, 300) for i in range(COUNT)]
    assert depth(broker, orders) == COUNT


def test_faults_beyond_retries_stop_the_run_clearly_and_a_rerun_completes_it(broker, orders, tmp_path):
    # Given storage that fails 25% of calls with one retry (so a run fails at a random point), and in every
    # other run also cuts 4% of reads short without any error
    location = (tmp_path / "b").as_uri()
    clean = open_storage(location)
    failures = []
    for seed in range(5):
        backup_id = f"beyond-{seed}"
        faulty = FaultyStorage(open_storage(location, retries=0), rate=0.25, truncate_rate=0.04 * (seed % 2), seed=seed)

        # When a backup runs through it
        try:
            BackupRun(broker.connection, settings(location, orders, tmp_path, backup_id), retrying(faulty, 1)).run()
        except RbakError as exc:  # a typed error, one line, naming what failed
            assert "\n" not in str(exc)
            failures.append(f"{type(exc).__name__}: {exc}")

        # Then its manifest lists only whole segments, no message has left the queue, and the same backup run
        # again without faults completes it: every message once, in order
        assert_lists_only_whole_segments(clean, backup_id)
        assert depth(broker, orders) == COUNT
        BackupRun(broker.connection, settings(location, orders, tmp_path, backup_id), clean).run()
        assert validate_backup(clean, backup_id, deep=True).valid
        assert stored_bodies(clean, backup_id) == [body_of(i, 300) for i in range(COUNT)], backup_id
    assert len(failures) >= 3, failures  # the faults did stop most runs part-way


def test_a_run_whose_last_reply_was_lost_is_complete_and_running_it_again_changes_nothing(broker, orders, tmp_path):
    # Given a run whose final manifest write is stored but its reply lost (the third manifest put: begin,
    # definitions, finish)
    location = (tmp_path / "b").as_uri()
    manifest_puts = Counter()

    def final_manifest_put(op: str, key: str) -> bool:
        manifest_puts[op] += op == "put" and key.endswith("/manifest.json")
        return op == "put" and key.endswith("/manifest.json") and manifest_puts["put"] >= 3

    faulty = FaultyStorage(open_storage(location, retries=0), rate=1.0, kinds=("lost_reply",), applies=final_manifest_put)
    with pytest.raises(RbakError, match="injected lost_reply on put 'faults-1/manifest.json'"):
        BackupRun(broker.connection, settings(location, orders, tmp_path), faulty).run()
    clean = open_storage(location)
    stored = clean.get("faults-1/manifest.json")

    # When the backup is run again
    again = BackupRun(broker.connection, settings(location, orders, tmp_path), clean).run()

    # Then it was complete all along, and the second run left it exactly as it was
    assert again.completed_at is not None and again.total_messages == COUNT
    assert clean.get("faults-1/manifest.json") == stored
    assert stored_bodies(clean, "faults-1") == [body_of(i, 300) for i in range(COUNT)]
    with ManagementClient(broker.connection) as client, pytest.raises(BackupAlreadyCompleteError, match="never written again"):
        BackupRun(broker.connection, settings(location, orders, tmp_path), clean).begin(client)


@pytest.fixture
def backed_up(broker, orders, tmp_path):
    """A complete backup of the 300 messages in 24 segments; its location and queue entry."""
    location = (tmp_path / "b").as_uri()
    manifest = BackupRun(broker.connection, settings(location, orders, tmp_path)).run()
    (queue,) = manifest.queues
    assert len(queue.segments) >= 6
    return location, queue


def flip_a_byte(storage: Storage, key: str) -> None:
    data = bytearray(storage.get(key))
    data[len(data) // 2] ^= 0x40
    storage.put(key, bytes(data))


def restore(broker, location: str, vhost: str, tmp_path, storage: Storage | None = None, **kwargs):
    settings = RestoreRequest(location, backup_id="faults-1", queue_map={"orders": "restored"},
                               checkpoint_state=str(tmp_path / "restore.db"), **kwargs)
    return RestoreRun(broker.connection, settings, storage)


def restored_bodies(broker, vhost: str) -> list[bytes]:
    bodies = []
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        while (message := channel.basic_get("restored", auto_ack=True))[0] is not None:
            bodies.append(message[2])
    return bodies


def segment_range(queue, index: int) -> range:
    first = sum(s.record_count for s in queue.segments[:index])
    return range(first, first + queue.segments[index].record_count)


def test_a_segment_that_fails_its_checksum_is_never_published(broker, orders, backed_up, tmp_path):
    # Given a backup whose third segment has one byte changed
    location, queue = backed_up
    storage = open_storage(location)
    flip_a_byte(storage, queue.segments[2].key)

    # When it is restored, first as it is, then allowing damaged segments to be skipped
    with pytest.raises(DamagedSegmentsError) as refused:
        restore(broker, location, orders, tmp_path).run()
    nothing = restored_bodies_or_none(broker, orders)
    report = restore(broker, location, orders, tmp_path, skip_damaged_segments=True).run()

    # Then the first refuses before publishing, naming the segment; the second publishes all the others, in order
    assert queue.segments[2].key in str(refused.value) and nothing is None
    assert [s["key"] for s in report.skipped_segments] == [queue.segments[2].key]
    damaged = set(segment_range(queue, 2))
    assert restored_bodies(broker, orders) == [body_of(i, 300) for i in range(COUNT) if i not in damaged]


def restored_bodies_or_none(broker, vhost: str) -> list[bytes] | None:
    """The restored queue's bodies, or None when it was never created."""
    try:
        return restored_bodies(broker, vhost)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return None


def test_a_segment_damaged_after_planning_stops_the_publish_at_its_boundary(broker, orders, backed_up, tmp_path):
    # Given a verified restore plan, after which the second segment is damaged in storage
    location, queue = backed_up
    run = restore(broker, location, orders, tmp_path)
    plan = run.plan()
    flip_a_byte(open_storage(location), queue.segments[1].key)

    # When the queue is published
    with pytest.raises(DamagedSegmentsError, match="changed since the plan verified it"):
        run.publish(plan, plan.queues[0])

    # Then exactly the first segment's records were published, nothing of the damaged one
    assert restored_bodies(broker, orders) == [body_of(i, 300) for i in segment_range(queue, 0)]


def test_reads_cut_short_while_planning_do_not_make_a_good_segment_look_damaged(broker, orders, backed_up, tmp_path):
    # Given storage that cuts every other read of a segment short without an error
    location, queue = backed_up
    reads: Counter[str] = Counter()

    def every_other_read(op: str, key: str) -> bool:
        reads[key] += op == "get"
        return "/segment-" in key and reads[key] % 2 == 1

    faulty = FaultyStorage(open_storage(location), truncate_rate=1.0, applies=every_other_read)

    # When the backup is restored through it, damaged segments allowed to be skipped
    report = restore(broker, location, orders, tmp_path, storage=retrying(faulty, 4), skip_damaged_segments=True).run()

    # Then no segment was skipped: each was read again before being called damaged, and every message is back
    assert faulty.injected["get:truncated"] == 2 * len(queue.segments), faulty.injected  # once planning, once publishing
    assert report.skipped_segments == [] and report.published == COUNT
    assert restored_bodies(broker, orders) == [body_of(i, 300) for i in range(COUNT)]
