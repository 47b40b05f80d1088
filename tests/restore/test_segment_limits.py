"""The largest segment the settings let a backup write is validated and restored at the readers' default cap.

``segment_max_bytes`` has a maximum so that a writer can never produce a
segment its own readers refuse: a larger setting is refused before the run
starts.
"""

from __future__ import annotations

import pytest

from airflow_rbak.backup.run import BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES, MAX_SEGMENT_MAX_BYTES
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.reliability.expect import header_order_free
from tests.restore.helpers import backup, body_of, declare, message_view, props_of, publish, read_queue

MiB = 1024 * 1024
#: 4 MiB bodies of every byte value take about 12.3 MiB each as record JSON: eleven of them pass 128 MiB.
BODY = 4 * MiB
COUNT = 12


def test_a_segment_max_bytes_above_the_maximum_is_refused_when_the_run_starts(tmp_path):
    with pytest.raises(ConfigurationError, match=f"segment_max_bytes must be an integer from 1 to {MAX_SEGMENT_MAX_BYTES}"):
        BackupSettings("big-1", tmp_path.as_uri(), selector=QueueSelector(), segment_max_bytes=MAX_SEGMENT_MAX_BYTES + 1)


@pytest.mark.broker
def test_the_largest_segment_validates_and_restores_at_the_default_cap(broker, behaviour, vhost, target_vhost, tmp_path):
    # Given a queue of twelve 4 MiB messages, backed up at the largest segment_max_bytes the settings accept
    declare(broker.connection, vhost, {"big": "classic"})
    publish(broker.connection, vhost, "big", 0, COUNT, size=BODY)
    location = (tmp_path / "b").as_uri()
    manifest = backup(broker.connection, location, "big-1", vhost, segment_max_bytes=MAX_SEGMENT_MAX_BYTES)
    first = manifest.queues[0].segments[0]
    assert MAX_SEGMENT_MAX_BYTES <= first.uncompressed_bytes <= DEFAULT_MAX_DECOMPRESSED_BYTES
    assert [s.record_count for s in manifest.queues[0].segments] == [11, 1]

    # When it is validated deeply and restored into another vhost, both with the default cap
    report = validate_backup(open_storage(location), "big-1", deep=True)
    settings = RestoreRequest(location, backup_id="big-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                               restore_definitions=True, checkpoint_state=str(tmp_path / "restore.db"))
    restored = RestoreRun(broker.connection, settings).run()

    # Then validation finds nothing, and every message arrives once, in order, byte for byte
    assert (report.valid, report.records_checked) == (True, COUNT), report.defects
    assert restored.published == COUNT
    views = read_queue(broker.connection, target_vhost, "big", "classic", COUNT)
    expected = [message_view(props_of(i), body_of(i, BODY)) for i in range(COUNT)]
    assert views == (header_order_free(expected) if behaviour.sorts_headers("classic") else expected)
