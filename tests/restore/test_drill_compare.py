"""A drill's comparison of restored messages with the backup's records (``airflow_rbak.drill.compare``), without a
broker: what each kind of difference is reported as; and what the expected side holds with ``strip_user_id``."""

from __future__ import annotations

from dataclasses import replace

from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.properties import PROPERTY_NAMES
from airflow_rbak.drill.compare import MAX_REPORTED, MessageView, compare_queue


def view(i: int) -> MessageView:
    """Message ``i``: a body, every property set, and typed headers."""
    props = tuple((name, None) for name in PROPERTY_NAMES)
    props = tuple((n, f"m-{i}" if n == "message_id" else 2 if n == "delivery_mode" else v) for n, v in props)
    return MessageView(f"body {i}".encode(), props, (("seq", H.long(i)), ("name", H.long_string(f"n{i}"))))


BACKUP = [view(i) for i in range(5)]


def test_equal_messages_in_the_same_order_pass():
    found = compare_queue("v", "q", BACKUP, list(BACKUP))

    assert found.passed and (found.expected, found.delivered, found.matched) == (5, 5, 5) and found.problems == []


def test_a_changed_header_is_named_with_both_values():
    # Given message 3 delivered with its seq header of another wire type (Short, not Long)
    delivered = list(BACKUP)
    delivered[2] = replace(BACKUP[2], headers=(("seq", H.short(2)), BACKUP[2].headers[1]))

    found = compare_queue("v", "q", BACKUP, delivered)

    assert not found.passed and (found.matched, found.mismatched, found.missing, found.unexpected) == (4, 1, 0, 0)
    (problem,) = found.problems
    assert problem.startswith("message 3: header 'seq' differs") and "Short" in problem and "Long" in problem


def test_a_missing_header_a_changed_property_and_a_changed_body_are_each_named():
    delivered = list(BACKUP)
    delivered[0] = replace(BACKUP[0], headers=BACKUP[0].headers[:1])
    delivered[1] = replace(BACKUP[1], properties=tuple((n, "other" if n == "message_id" else v)
                                                       for n, v in BACKUP[1].properties))
    delivered[4] = replace(BACKUP[4], body=b"body 5")

    found = compare_queue("v", "q", BACKUP, delivered)

    assert found.mismatched == 3 and found.matched == 2
    assert found.problems == [
        "message 1: header 'name' missing",
        "message 2: property message_id differs ('m-1' in the backup, 'other' delivered)",
        "message 5: body differs (6 bytes in the backup, 6 delivered, first apart at byte 5)",
    ]


def test_a_header_table_sorted_by_key_as_rabbitmq_4_delivers_it_is_equal_but_not_a_changed_nested_value():
    # Given message 2 delivered with its keys sorted (as 4.x delivers every table), and message 3 with a nested
    # table's value changed
    nested = H.table([("b", H.long(1)), ("a", H.array([H.long(2), H.long(3)]))])
    backup = [replace(m, headers=(*m.headers, ("nested", nested))) for m in BACKUP]
    delivered = list(backup)
    delivered[1] = replace(backup[1], headers=tuple(sorted(backup[1].headers, key=lambda h: h[0])))
    delivered[2] = replace(backup[2], headers=(*backup[2].headers[:2],
                                               ("nested", H.table([("a", H.array([H.long(3), H.long(2)])),
                                                                   ("b", H.long(1))]))))

    found = compare_queue("v", "q", backup, delivered)

    assert (found.matched, found.mismatched) == (4, 1)
    assert found.problems[0].startswith("message 3: header 'nested' differs")


def test_a_reordered_message_is_reported_as_out_of_order_not_as_changed():
    # Given messages 2 and 3 delivered the other way round
    delivered = [BACKUP[0], BACKUP[2], BACKUP[1], BACKUP[3], BACKUP[4]]

    found = compare_queue("v", "q", BACKUP, delivered)

    assert not found.passed and (found.reordered, found.mismatched, found.missing) == (1, 0, 0)
    assert found.problems == ["message 3: out of order (it is the backup's record 2, delivered after record 3)"]


def test_without_order_a_reordered_queue_passes_but_a_missing_message_still_fails():
    # (a target that delivers a quorum queue's priorities in another order than its source: the plan warns)
    reordered = [BACKUP[0], BACKUP[2], BACKUP[1], BACKUP[3], BACKUP[4]]

    assert compare_queue("v", "q", BACKUP, reordered, ordered=False).passed
    assert compare_queue("v", "q", BACKUP, reordered[:-1], ordered=False).missing == 1


def test_a_missing_message_is_named_and_the_rest_still_match():
    # Given record 2 never delivered (the others shift up by one)
    delivered = [BACKUP[0], *BACKUP[2:]]

    found = compare_queue("v", "q", BACKUP, delivered)

    assert not found.passed and (found.matched, found.missing, found.reordered, found.mismatched) == (4, 1, 0, 0)
    assert found.problems == ["record 2 of the backup: missing (not delivered)"]


def test_a_message_the_backup_does_not_hold_is_unexpected():
    found = compare_queue("v", "q", BACKUP, [*BACKUP, view(99)])

    assert not found.passed and (found.matched, found.unexpected) == (5, 1)
    assert found.problems == ["message 6: delivered, but the backup holds no such record"]


def test_duplicates_count_once_each():
    found = compare_queue("v", "q", [view(1), view(1)], [view(1)])

    assert (found.matched, found.missing) == (1, 1) and not found.passed


def test_problems_past_the_limit_are_counted_not_described():
    backup = [view(i) for i in range(MAX_REPORTED + 5)]

    found = compare_queue("v", "q", backup, [])

    assert found.missing == MAX_REPORTED + 5
    assert len(found.problems) == MAX_REPORTED and found.problems_not_shown == 5


def test_with_strip_user_id_a_record_of_another_user_is_expected_without_it_and_the_drills_own_user_kept():
    # Given a stored segment of two records: one published as user "app", one as "drill"
    from airflow_rbak.codec import BackupProperties, BackupRecord, encode_segment
    from airflow_rbak.drill.readback import expected_views
    from airflow_rbak.restore.plan import QueuePlan, SegmentPlan
    from airflow_rbak.storage import open_storage

    records = [BackupRecord(b"a", BackupProperties(user_id="app")), BackupRecord(b"b", BackupProperties(user_id="drill"))]
    segment = encode_segment(records)
    storage = open_storage("memory://drill-user-id")
    storage.put("b1/queues/v/q/segment-0001.zst", segment.data)
    queue = QueuePlan("v", "q", "scratch", "q", "classic", 2, 2,
                      (SegmentPlan("b1/queues/v/q/segment-0001.zst", 1, 2, 0, 2, segment.sha256),))

    # When the drill's expected views are read as the drill user "drill" publishing with strip_user_id, and without it
    stripped = [dict(v.properties)["user_id"] for v in expected_views(storage, queue, 1 << 20, "drill")]
    kept = [dict(v.properties)["user_id"] for v in expected_views(storage, queue, 1 << 20)]

    # Then only the other user's user_id is left out, as the restore publishes it
    assert stripped == [None, "drill"] and kept == ["app", "drill"]
