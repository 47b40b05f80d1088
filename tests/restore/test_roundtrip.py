"""Must show 1: back up vhost A (classic, quorum, stream), restore into a fresh vhost B via vhost_map.

Every queue in B must hold exactly what the queue in A holds: byte-exact
bodies, every property, every header with its wire type, in order.
"""

from __future__ import annotations

import pytest

from airflow_rbak.restore import RestoreRequest, RestoreRun
from tests.restore.helpers import backup, declare, expected_views, publish, read_queue

pytestmark = pytest.mark.broker

QUEUES = {"orders": ("classic", 300), "payments": ("quorum", 200), "events": ("stream", 150), "eu/returns": ("classic", 25)}


def sorted_headers(view: tuple) -> tuple:
    return view[0], view[1], tuple(sorted(view[2], key=lambda h: h[0]))


@pytest.fixture
def source(broker, vhost, tmp_path):
    declare(broker.connection, vhost, {n: t for n, (t, _) in QUEUES.items()})
    for name, (queue_type, count) in QUEUES.items():
        publish(broker.connection, vhost, name, 0, count, decimal=queue_type != "stream")
    location = (tmp_path / "backups").as_uri()
    manifest = backup(broker.connection, location, "rt-1", vhost, segment_max_bytes=32 * 1024)
    assert {q.name: q.message_count for q in manifest.queues} == {n: c for n, (_, c) in QUEUES.items()}
    return location


def test_a_restore_into_a_fresh_vhost_holds_exactly_the_source_messages(broker, behaviour, vhost, target_vhost, source,
                                                                         tmp_path):
    settings = RestoreRequest(source, backup_id="rt-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                               restore_definitions=True, checkpoint_state=str(tmp_path / "restore.db"))

    report = RestoreRun(broker.connection, settings).run()

    assert report.planned == report.published == sum(c for _, c in QUEUES.values())
    assert report.unroutable == 0 and not report.skipped_segments
    assert report.definitions["imported"] and report.definitions["created_vhosts"] == [target_vhost]
    types = {q["name"]: q["type"] for q in broker.api("GET", f"queues/{target_vhost}").json()}
    assert types == {n: t for n, (t, _) in QUEUES.items()}
    for name, (queue_type, count) in QUEUES.items():
        restored = read_queue(broker.connection, target_vhost, name, queue_type, count)
        original = read_queue(broker.connection, vhost, name, queue_type, count)
        assert len(restored) == count, name
        # A quorum queue re-sorts a message's header table once it adds x-delivery-count (the backup's capture
        # returned them), so the source is compared as sorted tables; against what was published, exact order.
        assert [sorted_headers(m) for m in restored] == [sorted_headers(m) for m in original], name
        # (in the source's delivery order, with the header table as this version delivers it: tests/broker/behaviour.py)
        assert restored == expected_views(count, queue_type, behaviour), name
