"""Deep validation throughput: ``rbak validate --deep`` beside its floor, measured in the same run.

Builds, in a temp folder (file storage), one backup per codec of ``--queues`` queues of ``--messages``
messages each (1 KiB random bodies, typical properties, three headers; with ``--headers rich`` also a
dead-lettered message's ``x-death``, a table whose strings hold colons, a float and bytes: the header values the
C reader hands to Python; segments as a backup writes them), then times, in each of ``--repeat`` rounds and back
to back per codec:

* the deep validation as the CLI runs it (``validate_backup(..., deep=True)`` at the CLI's default cap);
* its floor: read the same segment files, CRC-32 and SHA-256 them, and decompress their payloads
  (zstandard or lz4.frame directly, a chunk at a time into one buffer; nothing for an uncompressed one),
  parsing no record.

Prints MB/s of message bodies, the medians of wall and core-seconds (this process's CPU), and the ratio
validate / floor per codec (median of the per-round ratios, and their range). The real ``rbak validate --deep --format json`` runs once per codec first: its report
must equal the in-process one, and its wall time (with interpreter start-up) is printed beside it.

    .venv/bin/python bench/validate.py [--queues 10] [--messages 20000] [--repeat 5] [--codecs zstd,lz4,none]
                                       [--headers plain|rich]

The command runs this checkout's ``airflow_rbak`` (its folder first on ``PYTHONPATH``), as the in-process rounds do.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import lz4.frame
import orjson
import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_rbak.codec import BackupManifest, BackupProperties, BackupRecord, HeaderValue, QueueBackup, SegmentWriter
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES, FOOTER_SIZE, HEADER_SIZE, Compression
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.repository.writer import QueueSegmentSink
from airflow_rbak.storage import open_storage

BODY = 1024
CHUNK = 1024 * 1024
LZ4_INPUT = 256 * 1024
NAMES = {Compression.ZSTD: "zstd-3", Compression.LZ4: "lz4", Compression.NONE: "none"}


def queue_records(queue: str, count: int, seed: int, rich: bool = False):
    """``count`` messages of one queue: random 1 KiB bodies, typical properties, three headers (more if ``rich``)."""
    rng = random.Random(seed)
    now = 1_712_756_400_000
    for tag in range(1, count + 1):
        headers = (("x-retry-count", HeaderValue.long(rng.randrange(5))), ("x-source", HeaderValue.long_string("api")),
                   ("x-tenant", HeaderValue.long_string(f"tenant-{rng.randrange(100)}")))
        yield BackupRecord(
            body=rng.randbytes(BODY),
            properties=BackupProperties(content_type="application/octet-stream", delivery_mode=2,
                                        message_id=f"{queue}-{tag}", timestamp=now // 1000 + tag, app_id="bench"),
            headers=headers + rich_headers(queue, tag, now, rng) if rich else headers,
            exchange="orders.exchange", routing_key="order.created", delivery_tag=tag, backed_up_at=now + tag,
            source_queue=queue, source_vhost="/",
        )


def rich_headers(queue: str, tag: int, now: int, rng: random.Random) -> tuple[tuple[str, HeaderValue], ...]:
    """What a dead-lettered, traced message carries: tables, arrays, a float and bytes, strings with colons."""
    death = HeaderValue.table((
        ("count", HeaderValue.long(1 + rng.randrange(3))), ("reason", HeaderValue.long_string("rejected")),
        ("queue", HeaderValue.long_string(f"{queue}.work")), ("time", HeaderValue.timestamp(now // 1000 + tag)),
        ("exchange", HeaderValue.long_string("orders.retry")),
        ("routing-keys", HeaderValue.array((HeaderValue.long_string("order.created"),))),
    ))
    origin = HeaderValue.table((
        ("url", HeaderValue.long_string(f"https://api.example.com/v1/orders/{tag}")),
        ("received", HeaderValue.long_string(f"2026-04-10T12:{tag % 60:02d}:00Z")),
    ))
    return (("x-death", HeaderValue.array((death,))), ("x-origin", origin), ("x-score", HeaderValue.double(rng.random())),
            ("x-signature", HeaderValue.bytes_(rng.randbytes(16))))


def build_backup(url: str, backup_id: str, compression: Compression, queues: int, messages: int,
                 rich: bool = False) -> BackupManifest:
    """One backup of ``queues`` queues, written as the encode step writes segments, and its manifest."""
    storage = open_storage(url)
    manifest = BackupManifest(backup_id=backup_id, created_at=0, backup_tool_version="bench")
    for index in range(queues):
        name = f"orders-{index:02d}"
        sink = QueueSegmentSink(storage, backup_id, QueueBackup(vhost="/", name=name, queue_type="classic"),
                                SegmentWriter(compression))
        for record in queue_records(name, messages, seed=index, rich=rich):
            sink.add(record)
        manifest.queues.append(sink.close())
    manifest.refresh_totals()
    manifest.completed_at = 1
    ManifestStore(storage).save(manifest)
    return manifest


def deep_validate(url: str, backup_id: str) -> None:
    """What ``rbak validate --deep`` runs: the location checked, then ``validate_backup`` at the default cap."""
    storage = open_storage(url)
    storage.check_location()
    report = validate_backup(storage, backup_id, deep=True, max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES)
    assert report.valid, report.defects[:3]


def floor(url: str, manifest: BackupManifest, compression: Compression) -> None:
    """Read every segment, CRC-32 and SHA-256 it and decompress its payload: what no deep check can skip.

    The payload is decompressed a chunk at a time into one reused buffer, the cheapest way: decompressing it
    in one call costs more (the fresh payload-sized buffer's page faults).
    """
    storage = open_storage(url)
    chunk = bytearray(CHUNK)
    for queue in manifest.queues:
        for segment in queue.segments:
            data = storage.get(segment.key)
            zlib.crc32(memoryview(data)[:-FOOTER_SIZE])
            hashlib.sha256(data).digest()
            payload = memoryview(data)[HEADER_SIZE:-FOOTER_SIZE]
            if compression is Compression.ZSTD:
                reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
                while reader.readinto(chunk):
                    pass
            elif compression is Compression.LZ4:
                decompressor, fed = lz4.frame.LZ4FrameDecompressor(), 0
                while not decompressor.eof:
                    feed = payload[fed : fed + LZ4_INPUT] if decompressor.needs_input else payload[:0]
                    fed += len(feed)
                    decompressor.decompress(feed, max_length=CHUNK)


def cli_once(url: str, backup_id: str) -> tuple[float, dict]:
    """Wall seconds and the JSON report of the real command."""
    rbak = Path(sys.executable).with_name("rbak")
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([str(rbak), "validate", "--deep", "--path", url, "--backup-id", backup_id, "--format", "json"],
                          capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rbak validate --deep failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, orjson.loads(done.stdout)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per queue")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--codecs", default="zstd,lz4,none", help="comma-separated: zstd (level 3), lz4, none")
    parser.add_argument("--headers", choices=("plain", "rich"), default="plain",
                        help="three string and integer headers, or also tables, arrays, a float and bytes")
    args = parser.parse_args(argv)
    codecs = [Compression.parse(name) for name in args.codecs.split(",")]
    body_mb = args.queues * args.messages * BODY / 1e6
    with tempfile.TemporaryDirectory(prefix="rbak-bench-validate-") as folder:
        url = Path(folder).as_uri()
        manifests = {}
        for compression in codecs:
            started = time.perf_counter()
            manifests[compression] = build_backup(url, NAMES[compression], compression, args.queues, args.messages,
                                                  rich=args.headers == "rich")
            m = manifests[compression]
            print(f"{NAMES[compression]}: {m.total_segments} segments, {m.total_bytes / 1e6:.0f} MB of segments for "
                  f"{body_mb:.0f} MB of bodies, written in {time.perf_counter() - started:.0f} s")
        for compression in codecs:
            backup_id = NAMES[compression]
            wall, cli_report = cli_once(url, backup_id)
            storage = open_storage(url)
            started = time.perf_counter()
            report = validate_backup(storage, backup_id, deep=True)
            seconds = time.perf_counter() - started
            if cli_report != report.to_json():
                raise SystemExit(f"{backup_id}: the command's report differs from the in-process one:\n{cli_report}")
            print(f"{backup_id}: `rbak validate --deep` {wall:.2f} s wall (start-up included), in-process {seconds:.2f} s; "
                  f"the same report ({report.records_checked} records, valid={report.valid})")
        times: dict[Compression, dict[str, list[float]]] = {c: {} for c in codecs}
        for _ in range(args.repeat):
            for compression in codecs:
                validate = timed(lambda: deep_validate(url, NAMES[compression]))
                bare = timed(lambda: floor(url, manifests[compression], compression))
                for name, value in (("validate", validate[0]), ("validate_cpu", validate[1]), ("floor", bare[0]),
                                    ("floor_cpu", bare[1]), ("ratio", validate[0] / bare[0])):
                    times[compression].setdefault(name, []).append(value)
    print(f"\nmedians of {args.repeat} rounds; MB/s of message bodies ({body_mb:.0f} MB per backup); "
          "seconds wall / core-seconds")
    print(f"{'codec':8} {'validate MB/s':>13} {'floor MB/s':>10} {'validate s':>11} {'floor s':>11} {'ratio':>6} "
          f"{'range':>13}")
    for compression, series in times.items():
        med = {name: statistics.median(values) for name, values in series.items()}
        print(f"{NAMES[compression]:8} {body_mb / med['validate']:13.0f} {body_mb / med['floor']:10.0f} "
              f"{med['validate']:5.2f}/{med['validate_cpu']:5.2f} {med['floor']:5.2f}/{med['floor_cpu']:5.2f} "
              f"{med['ratio']:5.2f}x {min(series['ratio']):5.2f}-{max(series['ratio']):.2f}x")


def timed(work) -> tuple[float, float]:
    """Wall and core-seconds (this process's CPU, every thread) of ``work()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu

if __name__ == "__main__":
    main()
