"""The capture client's memory does not grow with message size or message count.

The capture runs in a process of its own (``capture_worker``), which reports
its resident set just before the capture and the high-water mark of its
resident set (``VmHWM``); the bound is on the difference. Measured here: about
46 MiB for 1 MiB messages (a staging chunk holds up to 8 MiB of record JSON,
about 3.6 bytes per body byte, plus its compressed copy) and about 19 MiB for
a million 32-byte messages (one consumer window read ahead), the same as for
200,000. See docs/reliability.md.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pika
import pytest

from airflow_rbak.codec.records import decode_record
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.broker.helpers import depth, wait_for_depth
from tests.capture.helpers import staged_json

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
LARGE_COUNT, LARGE_GROWTH_BOUND = 128, 96 * MiB
SMALL_COUNT, SMALL_SIZE, SMALL_GROWTH_BOUND = 1_000_000, 32, 48 * MiB
_PATTERN = bytes(range(256)) * (MiB // 256 + 1)


def large_body(i: int) -> bytes:
    """1 MiB: the message number, then a run of every byte value starting at a place that depends on it."""
    start = (i * 7) % 256
    return struct.pack(">Q", i) + _PATTERN[start : start + MiB - 8]


def small_body(i: int) -> bytes:
    return struct.pack(">Q", i) + b"rbak-small-message-body!"


def flood(connection, vhost: str, queue: str, count: int, body, delivery_mode: int, batch: int = 2000) -> float:
    """Publish ``count`` messages as fast as one client can (no confirms: the depth shows when they are all in);
    returns the seconds it took."""
    started = time.monotonic()
    props = pika.BasicProperties(delivery_mode=delivery_mode)
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        impl = channel._impl  # noqa: SLF001 - the blocking channel flushes the socket after every publish
        for i in range(count):
            impl.basic_publish("", queue, body(i), props)
            if i % batch == batch - 1:
                conn.process_data_events(time_limit=0)
        wait_for_depth(channel, queue, count, settle=300)
    return time.monotonic() - started


def flood_small(connection, vhost: str, queue: str, count: int, batch: int = 5000) -> float:
    """:func:`flood` for ``small_body`` (transient), four times faster: every message's frames are the same but for
    the body's number, so they are written as bytes (pika's frame encoding is what bounds :func:`flood`). Returns
    the seconds it took."""
    started = time.monotonic()
    with pika.BlockingConnection(connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        number, size = channel.channel_number, len(small_body(0))
        head = (pika.frame.Method(number, pika.spec.Basic.Publish(exchange="", routing_key=queue)).marshal()
                + pika.frame.Header(number, size, pika.BasicProperties(delivery_mode=1)).marshal()
                + struct.pack(">BHI", pika.spec.FRAME_BODY, number, size))
        impl = conn._impl  # noqa: SLF001 - pika has no public way to write frames it did not build
        for start in range(0, count, batch):
            impl._output_marshaled_frames(  # noqa: SLF001
                [b"".join(head + small_body(i) + b"\xce" for i in range(start, min(start + batch, count)))])
            conn.process_data_events(time_limit=0)
        wait_for_depth(channel, queue, count, settle=300)
    return time.monotonic() - started


def capture_in_child(broker, vhost: str, queue: str, tmp_path: Path) -> dict:  # noqa: F811
    c = broker.connection
    args = {
        "amqp_url": f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/?management_port={c.management_port}",
        "vhost": vhost, "queue": queue, "storage_url": (tmp_path / "store").as_uri(), "backup_id": "bound",
    }
    done = subprocess.run([sys.executable, "-m", "tests.reliability.capture_worker", orjson.dumps(args).decode()], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return orjson.loads(done.stdout.splitlines()[-1])


def test_capture_of_1_mib_messages_holds_one_chunk_not_the_queue(broker, vhost, tmp_path):  # noqa: F811
    # Given 128 messages of 1 MiB (128 MiB of bodies, about 460 MB of record JSON)
    flood(broker.connection, vhost, "large", LARGE_COUNT, large_body, delivery_mode=2, batch=1)

    # When a separate process captures the queue
    result = capture_in_child(broker, vhost, "large", tmp_path)

    # Then its resident set grew by less than the bound, a fraction of what it captured
    growth = result["peak_rss"] - result["rss_before"]
    print(f"\n128 x 1 MiB: peak RSS {result['peak_rss'] / MiB:.0f} MiB, {growth / MiB:.0f} MiB over the "
          f"{result['rss_before'] / MiB:.0f} MiB before the capture")
    assert growth < LARGE_GROWTH_BOUND, f"peak RSS grew {growth / MiB:.1f} MiB"
    # and every message is staged once, in order, byte-exact, and is still in the queue
    assert (result["messages"], result["depth_after"], result["bytes"]) == (LARGE_COUNT, LARGE_COUNT, LARGE_COUNT * MiB)
    storage = open_storage((tmp_path / "store").as_uri())
    bodies = (decode_record(raw).body for raw in staged_json(storage, "bound", vhost, "large"))
    assert all(body == large_body(i) for i, body in enumerate(bodies))


def test_capture_of_a_million_small_messages_stays_flat(broker, vhost, tmp_path):  # noqa: F811
    # Given a classic queue of a million 32-byte messages (transient: the broker keeps them in memory)
    publish_s = flood_small(broker.connection, vhost, "small", SMALL_COUNT)

    # When a separate process captures the queue (consumers of up to 65,535 unacknowledged messages, one after another)
    started = time.monotonic()
    result = capture_in_child(broker, vhost, "small", tmp_path)
    capture_s = time.monotonic() - started
    growth = result["peak_rss"] - result["rss_before"]
    print(f"\n1,000,000 small messages: publish {publish_s:.1f} s, capture process {capture_s:.1f} s "
          f"(capture itself {result['duration_s']:.1f} s), peak RSS {result['peak_rss'] / MiB:.0f} MiB, "
          f"{growth / MiB:.0f} MiB over the {result['rss_before'] / MiB:.0f} MiB before the capture")

    # Then its resident set grew by less than the bound
    assert growth < SMALL_GROWTH_BOUND, f"peak RSS grew {growth / MiB:.1f} MiB"
    # and every message is staged once, in queue order, and is still in the queue (a classic queue may take
    # longer than the capture's own 10 s wait to take back a million returned messages, so wait here)
    assert result["messages"] == SMALL_COUNT
    assert depth(broker.connection, vhost, "small", SMALL_COUNT, wait=120) == SMALL_COUNT
    storage = open_storage((tmp_path / "store").as_uri())
    expected = (orjson.dumps({"body": list(small_body(i))})[:-2] for i in range(SMALL_COUNT))
    staged = staged_json(storage, "bound", vhost, "small")
    mismatch = next((i for i, (want, raw) in enumerate(zip(expected, staged)) if not raw.startswith(want)), None)
    assert mismatch is None, f"staged record {mismatch} is not message {mismatch}"
    assert next(staged, None) is None
