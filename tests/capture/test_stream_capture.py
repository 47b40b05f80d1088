"""Stream capture against the real broker (must-show 3): full first run, then only what is new."""

from __future__ import annotations

import pytest

from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.discovery import describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.capture.checkpoints import CaptureCheckpoints
from airflow_rbak.capture.queue_capture import CaptureOptions, CaptureResult
from airflow_rbak.capture.stream_capture import StreamCapture
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.broker.helpers import declare, publish
from tests.broker.messages import expected_prefix, split_record

from .helpers import staged_json

pytestmark = pytest.mark.broker
SIZE = 512


def capture_stream(broker, storage, backup_id: str, vhost: str, stream: str, **kwargs: object) -> CaptureResult:
    with ManagementClient(broker.connection) as mg:
        info = describe_queue(mg, vhost, stream)
        checkpoints = CaptureCheckpoints(storage, backup_id)
        return StreamCapture(broker.connection, storage, checkpoints, CaptureOptions(backup_id)).capture(info, management=mg, **kwargs)


def assert_staged_messages_exact(storage, backup_id: str, vhost: str, stream: str, messages: range, offsets: range,
                                 behaviour: Behaviour) -> None:
    """Staged records are exactly ``messages`` in order, byte-exact, each tagged with its offset within ``offsets``.

    Offsets increase but need not be contiguous: a consumer's stored offset is a
    tracking entry in the stream's log and takes an offset of its own (measured on RabbitMQ 3.10).
    """
    n, previous = -1, offsets.start - 1
    for n, raw in enumerate(staged_json(storage, backup_id, vhost, stream)):
        prefix, state = split_record(raw)
        expected = expected_prefix(messages[n], SIZE, stream, stream=True, bytes_as_long_string=behaviour.stream_bytes_as_long_string())
        assert prefix == expected, f"record {n} is not message {messages[n]}"
        assert previous < state["delivery_tag"] < offsets.stop, (n, previous, state)
        assert (state["redelivered"], state["source_queue"]) == (False, stream), state
        previous = state["delivery_tag"]
    assert n + 1 == len(messages)


def test_stream_first_run_captures_all_then_a_second_run_only_the_new_messages(broker, behaviour, vhost):
    """Byte-exact as this broker delivers a stream's messages: from 4.0 a byte-array header comes back as a long
    string of the same bytes (tests/broker/behaviour.py)."""
    # Given a stream of 50,000 messages and a named consumer that stored its offset
    declare(broker.connection, vhost, "events", "stream")
    publish(broker.connection, vhost, "events", 50_000, SIZE, stream=True)
    stream_protocol.store_consumer_offset(broker.connection, vhost, "events", "billing", 12_345)
    storage = open_storage("memory://")

    # When it is captured from the start
    first = capture_stream(broker, storage, "s1", vhost, "events", consumer_names=["billing", "never-stored"])

    # Then every message is staged in order, byte-exact, delivery_tag = offset, and the consumer's offset is kept
    assert (first.messages, first.first_offset, first.last_offset) == (50_000, 0, 49_999)
    assert first.consumer_offsets == {"billing": 12_345}
    assert_staged_messages_exact(storage, "s1", vhost, "events", range(0, 50_000), offsets=range(0, 50_000), behaviour=behaviour)
    assert [split_record(raw)[1]["delivery_tag"] for raw in staged_json(storage, "s1", vhost, "events")] == list(range(50_000))

    # When 10,000 more are published and the next backup starts after the previous one's last offset
    publish(broker.connection, vhost, "events", 10_000, SIZE, start=50_000, stream=True)
    second = capture_stream(broker, storage, "s2", vhost, "events", start_offset=first.last_offset + 1)

    # Then it captures exactly the 10,000 new messages, and nothing from before
    assert (second.messages, second.first_offset) == (10_000, 50_000)
    assert_staged_messages_exact(storage, "s2", vhost, "events", range(50_000, 60_000), offsets=range(50_000, second.last_offset + 1),
                                 behaviour=behaviour)

    # And a run with nothing new after that captures nothing
    third = capture_stream(broker, storage, "s3", vhost, "events", start_offset=second.last_offset + 1)
    assert (third.messages, third.target, third.last_offset) == (0, 0, second.last_offset)
    assert list(staged_json(storage, "s3", vhost, "events")) == []


def test_an_empty_stream_is_captured_as_empty(broker, vhost):
    declare(broker.connection, vhost, "empty", "stream")
    storage = open_storage("memory://")

    result = capture_stream(broker, storage, "s1", vhost, "empty")

    assert (result.messages, result.target, result.last_offset) == (0, 0, -1)
