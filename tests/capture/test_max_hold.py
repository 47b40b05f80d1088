"""``max_hold_ms``: the longest a capture may withhold a queue's messages from its consumers (docs/production.md).

A capture holds every message it reads until the end of that queue's capture, so a deep queue is held for as long
as its capture takes. ``max_hold_ms`` bounds that the way the broker's consumer timeout does (the lower of the two
wins): a capture that reaches it, or whose rate says it would, stops, gives every message back in order and fails
saying so; nothing is marked complete.
"""

from __future__ import annotations

import time

import pytest

from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.errors import HoldLimitError
from airflow_rbak.capture.queue_capture import CaptureOptions
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import message_priorities
from tests.broker.helpers import declare, depth, publish
from tests.reliability.expect import assert_clear_failure
from tests.reliability.faulty_storage import FaultyStorage

from .helpers import capture_queue
from .test_queue_features_on_broker import read_back

pytestmark = pytest.mark.broker
COUNT = 3_000


def test_a_capture_held_longer_than_max_hold_ms_gives_everything_back_and_fails_clearly(broker, behaviour, vhost, tmp_path):
    # Given a queue of 3,000 messages
    declare(broker.connection, vhost, "deep", "classic")
    publish(broker.connection, vhost, "deep", COUNT, size=64)
    # And storage that stalls the first chunk's upload for 2.5 s, holding the capture's thread at the second chunk
    # (so the capture holds messages for longer than the 2 s max_hold_ms, whatever the machine's speed)
    storage = FaultyStorage(open_storage(f"file://{tmp_path / 'store'}"))
    storage.on_put = lambda key: time.sleep(2.5) if key.endswith("chunk-00000001.zst") else None

    # When it is captured with max_hold_ms 2,000 (below the broker's consumer timeout): a clear error naming it
    with pytest.raises(HoldLimitError) as failed:
        capture_queue(broker.connection, storage, "b1", vhost, "deep", chunk_max_records=1000, max_hold_ms=2000)
    assert_clear_failure(failed.value, HoldLimitError, "max_hold_ms", "gave every message back", "raise it")

    # Then every message is back in its order, and nothing is marked complete
    assert depth(broker.connection, vhost, "deep", COUNT, wait=30) == COUNT
    assert [n for n, _ in read_back(broker.connection, vhost, "deep")] == behaviour.delivery_order("classic", message_priorities(COUNT))
    progress = CaptureCheckpoints(storage, "b1").get("b1", vhost, "deep")
    assert progress is None or not progress.completed


def test_a_max_hold_ms_the_capture_fits_in_changes_nothing(broker, vhost, tmp_path):
    declare(broker.connection, vhost, "small", "classic")
    publish(broker.connection, vhost, "small", 200, size=64)
    result = capture_queue(broker.connection, open_storage(f"file://{tmp_path / 'store'}"), "b1", vhost, "small",
                           max_hold_ms=600_000)
    assert (result.messages, result.depth_at_start) == (200, 200)


@pytest.mark.parametrize("value", [0, 999])
def test_max_hold_ms_below_a_second_is_refused(value):
    with pytest.raises(ConfigurationError, match="max_hold_ms"):
        CaptureOptions("b1", max_hold_ms=value)
