"""A capture that stopped at a quorum queue's delivery limit is remembered, sealed, in the location and in the
deployment's ledger, and later captures leave the queue out until the risk is gone
(airflow_rbak/capture/limit_stops.py; no broker needed)."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueInfo, QueueSelector
from airflow_rbak.capture.errors import DeliveryLimitRiskError
from airflow_rbak.capture.limit_stops import PURPOSE, LimitStops, ledger_key, open_ledger
from airflow_rbak.codec.layout import delivery_limit_stop_key
from airflow_rbak.repository.catalog import left_out_queues, list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.sealed import StateSeal
from tests.broker.helpers import declare, depth, publish
from tests.broker.messages import body_of

from .source_state import state_without_waiting

KEY = delivery_limit_stop_key("/", "orders/eu")
SEAL = StateSeal(b"this deployment's state key, 32+")


def queue(messages: int = 12, name: str = "orders/eu", vhost: str = "/") -> QueueInfo:
    return QueueInfo(vhost, name, "quorum", messages=messages)


def never_asked() -> int:
    raise AssertionError("the exact depth is read only when the management API counts no message")


def stops_of(where: Storage, ledger: Storage | None = None) -> LimitStops:
    return LimitStops(where, ledger or open_storage("memory://"), SEAL)


def location(name: str = "here") -> Storage:
    """A named location of its own (named memory stores are shared by every opener in the process)."""
    return open_storage(f"memory://{name}-{uuid.uuid4().hex[:8]}")


def stopped(limit: int = 3) -> LimitStops:
    """A location and its ledger after ``nightly-2`` stopped at ``orders/eu``'s limit ``limit``."""
    stops = stops_of(location())
    assert stops.record(queue(), limit, "nightly-2") == []
    return stops


def ledger_entry(stops: LimitStops) -> str:
    return ledger_key(stops.location.url, "/", "orders/eu")


def test_a_stop_is_recorded_sealed_outside_every_backup_and_in_the_ledger_and_leaves_later_captures_out():
    stops = stopped()

    assert KEY == "_state/delivery-limit-stops/_default/orders%2Feu.json"  # escaped as every storage key
    assert SEAL.read(stops.location, PURPOSE, KEY)["limit"] == 3
    assert SEAL.read(stops.ledger, PURPOSE, ledger_entry(stops))["limit"] == 3
    reason = stops.reason(queue(), 3, never_asked)
    assert reason is not None
    assert "backup 'nightly-2' stopped at this queue's delivery limit of 3" in reason
    assert "its messages may be one below the limit and another capture would bring them to it" in reason
    assert KEY in reason and ledger_entry(stops) in reason and f"rbak limit-stops --clear --path {stops.location.url} --vhost / --queue orders/eu" in reason
    assert stops.reason(queue(), 3, never_asked) == reason  # it stays until the risk is gone
    # another queue, or the same name in another vhost, is not concerned
    assert stops.reason(queue(vhost="other"), 3, never_asked) is None
    assert stops.reason(queue(name="orders/us"), 3, never_asked) is None
    # and the catalog shows no backup for it
    assert list_backups(stops.location) == [] and ManifestStore(stops.location).backup_ids() == []


def test_a_queue_seen_empty_clears_both_places_but_a_management_zero_alone_does_not():
    stops = stopped()

    # the management API's count is sampled (absent for a new queue): an exact depth of messages keeps the stop
    assert stops.reason(queue(messages=0), 3, lambda: 12) is not None
    assert stops.location.exists(KEY) and stops.ledger.exists(ledger_entry(stops))

    assert stops.reason(queue(messages=0), 3, lambda: 0) is None
    assert not stops.location.exists(KEY) and not stops.ledger.exists(ledger_entry(stops))
    assert stops.reason(queue(), 3, never_asked) is None  # gone: the next capture proceeds


def test_a_queue_seen_empty_clears_a_forged_record_too():
    stops = stopped()
    stops.location.put(KEY, b'{"limit": 0}')

    assert stops.reason(queue(messages=0), 3, lambda: 0) is None  # the broker's fact, not the record's claim
    assert not stops.location.exists(KEY) and not stops.ledger.exists(ledger_entry(stops))


def test_a_limit_raised_above_the_sealed_one_clears_both_and_a_lowered_one_keeps_them():
    stops = stopped()

    assert "delivery limit of 3" in stops.reason(queue(), 2, never_asked)
    assert stops.reason(queue(), 3, never_asked) is not None
    # every message is at most at 2 (one below the old limit), and a return takes it at most to 3: below the new one
    assert stops.reason(queue(), 4, never_asked) is None
    assert not stops.location.exists(KEY) and not stops.ledger.exists(ledger_entry(stops))


def sealed_looking_edit(stops: LimitStops) -> bytes:
    """The location's sealed record with its limit changed to 0, its format, purpose, key and MAC kept."""
    envelope = json.loads(stops.location.get(KEY))
    envelope["body"]["limit"] = 0
    return json.dumps(envelope).encode()


@pytest.mark.parametrize("forged", ["unsealed", "sealed-looking edit"])
def test_a_record_forged_lower_is_a_stop_never_a_raised_limit_and_is_not_deleted(forged):
    stops = stopped()
    planted = b'{"limit": 0}' if forged == "unsealed" else sealed_looking_edit(stops)
    stops.location.put(KEY, planted)

    for limit in (3, 4, 20):  # not even a limit truly raised clears a stop one of whose records is untrusted
        reason = stops.reason(queue(), limit, never_asked)
        assert reason is not None and "the location's record fails its seal" in reason, limit
        assert "it counts as a stop, whatever it says" in reason
    assert stops.location.get(KEY) == planted and stops.ledger.exists(ledger_entry(stops))


@pytest.mark.parametrize("forged", ["unsealed", "sealed-looking edit"])
def test_a_record_forged_lower_with_the_ledger_deleted_too_is_still_a_stop(forged):
    # (the ledger is out of the location writer's reach; a lost ledger must not make a forgery a permission either)
    stops = stopped()
    planted = b'{"limit": 0}' if forged == "unsealed" else sealed_looking_edit(stops)
    stops.location.put(KEY, planted)
    stops.ledger.delete(ledger_entry(stops))

    reason = stops.reason(queue(), 20, never_asked)

    assert reason is not None and "fails its seal" in reason and "ledger holds no record" in reason
    assert stops.location.get(KEY) == planted


def test_an_unsealed_record_of_an_older_version_counts_as_a_stop_and_says_so():
    stops = stops_of(open_storage("memory://"))
    older = {"vhost": "/", "queue": "orders/eu", "limit": 3, "backup_id": "nightly-1", "stopped_at": "2026-11-01T02:00:00Z"}
    stops.location.put(KEY, json.dumps(older).encode())

    reason = stops.reason(queue(), 4, never_asked)

    assert reason is not None and "fails its seal (no seal" in reason and "delivery limit (now 4)" in reason
    assert "nightly-1" not in reason  # an unsealed record's claims are not repeated as facts
    assert stops.location.exists(KEY)


def test_a_record_deleted_from_the_location_is_still_a_stop_while_the_ledger_holds_it():
    stops = stopped()
    stops.location.delete(KEY)

    reason = stops.reason(queue(), 3, never_asked)

    assert reason is not None and "backup 'nightly-2' stopped at this queue's delivery limit of 3" in reason
    assert "the backup location's record is missing" in reason and "the ledger's still counts" in reason
    # the ledger's sealed limit still lets a raised limit clear it
    assert stops.reason(queue(), 4, never_asked) is None and not stops.ledger.exists(ledger_entry(stops))


def test_a_sealed_location_record_without_the_ledger_is_a_stop_that_a_raised_limit_does_not_clear():
    # An older stop's sealed record, replayed by the location's writer, could carry a lower limit than the real one.
    stops = stopped()
    stops.ledger.delete(ledger_entry(stops))

    reason = stops.reason(queue(), 4, never_asked)

    assert reason is not None and "ledger holds no record" in reason and stops.location.exists(KEY)


def test_a_ledger_entry_of_another_location_or_queue_does_not_apply():
    ledger = open_storage("memory://")
    here, elsewhere = stops_of(location(), ledger), stops_of(location("elsewhere"), ledger)
    here.record(queue(), 3, "nightly-2")
    here.location.delete(KEY)

    assert here.reason(queue(), 3, never_asked) is not None
    assert elsewhere.reason(queue(), 3, never_asked) is None
    assert here.reason(queue(name="orders/us"), 3, never_asked) is None
    assert here.reason(queue(vhost="other"), 3, never_asked) is None


def test_a_record_copied_to_another_queue_or_location_is_a_stop_for_that_queue_only():
    stops = stopped()
    other = delivery_limit_stop_key("/", "orders/us")
    stops.location.put(other, stops.location.get(KEY))  # copied to another queue's key: fails its seal there
    copied = stops_of(location("copy"), stops.ledger)
    copied.location.put(KEY, stops.location.get(KEY))  # copied to another location: sealed for the first one

    assert "sealed for another key" in stops.reason(queue(name="orders/us"), 3, never_asked)
    assert "sealed for another location" in copied.reason(queue(), 3, never_asked)
    assert "delivery limit of 3" in stops.reason(queue(), 3, never_asked)  # the original still reads as sealed


def test_an_unreadable_ledger_entry_is_a_stop_for_its_queue_only_and_hides_no_other():
    stops = stopped()
    stops.record(queue(name="billing"), 5, "nightly-2")
    stops.ledger.put(ledger_entry(stops), b"\x00 not json")
    stops.location.delete(KEY)

    reason = stops.reason(queue(), 20, never_asked)
    assert reason is not None and "the ledger's record fails its seal (not JSON" in reason
    assert "delivery limit of 5" in stops.reason(queue(name="billing"), 5, never_asked)
    assert stops.reason(queue(name="orders/us"), 5, never_asked) is None
    listed = sorted((r.where, r.queue(), r.limit, r.problem is None) for r in stops.all())
    assert listed == [("ledger", ("/", "billing"), 5, True), ("ledger", ("/", "orders/eu"), None, False),
                      ("location", ("/", "billing"), 5, True)]


@pytest.mark.parametrize("planted", [b"not json", b'{"limit": "3"}', b"[3]", b'{"limit": true}', b" " * 20_000])
def test_an_unreadable_record_counts_as_a_stop_and_says_so(planted):
    stops = stops_of(open_storage("memory://"))
    stops.location.put(KEY, planted)

    reason = stops.reason(queue(), 20, never_asked)

    assert reason is not None and "fails its seal" in reason and KEY in reason and "delivery limit (now 20)" in reason
    assert stops.location.get(KEY) == planted  # left for the operator to see
    assert stops.reason(queue(messages=0), 20, lambda: 0) is None  # an empty queue has nothing at risk
    assert not stops.location.exists(KEY)


def test_a_deliberate_clear_deletes_both_places(tmp_path):
    stops = stops_of(location(), open_ledger(tmp_path / "state"))
    stops.record(queue(), 3, "nightly-2")

    assert stops.clear("/", "orders/eu") == [KEY, ledger_entry(stops)]
    assert stops.reason(queue(), 3, never_asked) is None and stops.clear("/", "orders/eu") == []
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700  # only the tasks' own account may undo a stop


def test_a_ledger_that_cannot_be_written_is_said_before_any_capture_and_a_stop_reports_it(tmp_path):
    (tmp_path / "not-a-folder").write_text("")
    stops = stops_of(location(), open_ledger(tmp_path / "not-a-folder"))

    assert "cannot be written" in stops.unwritable()
    failed = stops.record(queue(), 3, "nightly-2")
    assert len(failed) == 1 and failed[0].startswith("the ledger (") and stops.location.exists(KEY)
    assert stops_of(open_storage("memory://"), open_ledger(tmp_path / "state")).unwritable() is None
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700


COUNT, SIZE = 12, 64


@pytest.mark.rabbitmq("3.10", "4.0")
def test_on_the_broker_no_backup_after_a_deleted_or_forged_stop_raises_a_message_to_its_limit(broker, vhost, tmp_path):
    """The stop that a capture records survives its record deleted from the location, or forged lower: five later
    backups leave the queue out before receiving anything, and every message stays one below its limit.

    The messages' counts are never read by a delivery of the test's own before the end, which would count: the
    stopping capture reports the count it received (1, so its return leaves each message at 2); each later backup
    reports it received nothing; the depth is read by passive declare, which delivers nothing. At the end one reading
    (basic.get, then one requeueing nack) sees every message at 2; its own return takes them to 3, after the checks."""
    # Given a quorum queue under a delivery limit of 3 whose second allowed backup stopped at it
    declare(broker.connection, vhost, "orders", "quorum", **{"x-delivery-limit": 3})
    publish(broker.connection, vhost, "orders", COUNT, SIZE, rich=False)
    location, state_dir = (tmp_path / "backups").as_uri(), tmp_path / "state"

    def backup(backup_id: str):
        settings = BackupSettings(backup_id, location, selector=QueueSelector(vhosts=(vhost,)), include_definitions=False,
                                  allow_delivery_count_increase=True)
        return BackupRun(broker.connection, settings, seal=SEAL, state_dir=state_dir).run()

    assert backup("nightly-0").total_messages == COUNT
    with pytest.raises(DeliveryLimitRiskError, match="has x-delivery-count 1, .* delivery limit of 3") as stop:
        backup("nightly-1")
    storage, key = open_storage(location), delivery_limit_stop_key(vhost, "orders")
    assert key in str(stop.value) and str(state_dir) in str(stop.value)
    envelope = json.loads(storage.get(key))
    envelope["body"]["limit"] = 0
    tampering = [("deleted", None), ("forged", b'{"limit": 0}'), ("sealed-looking edit", json.dumps(envelope).encode()),
                 ("deleted again", None), ("forged again", b'{"limit": 0}')]

    # When the record is deleted or forged lower before each of five later backups
    for n, (how, planted) in enumerate(tampering):
        storage.delete(key) if planted is None else storage.put(key, planted)
        manifest = backup(f"later-{n}")

        # Then each leaves the queue out, receiving nothing, and leaves a planted record where it was
        assert [q["queue"] for q in left_out_queues(manifest)] == ["orders"], how
        reason = left_out_queues(manifest)[0]["reason"]
        assert "backup 'nightly-1' stopped at this queue's delivery limit of 3" in reason, how
        assert ("record is missing" if planted is None else "record fails its seal") in reason, how
        assert (manifest.total_messages, manifest.queue(vhost, "orders")) == (0, None), how
        assert depth(broker.connection, vhost, "orders", COUNT) == COUNT, how
        assert storage.get(key) == planted if planted is not None else not storage.exists(key), how

    # And every message is still there, in order, byte-exact, one below the limit: none was returned since the stop
    after = state_without_waiting(broker.connection, vhost, "orders")
    assert (after.order, [m.body for m in after.messages]) == (list(range(COUNT)), [body_of(i, SIZE) for i in range(COUNT)])
    assert [c.get("x-delivery-count") for c in after.counters()] == [2] * COUNT
