"""Codec throughput: encode and decode MB/s beside the floor measured in the same run.

The floor does only what no encoder can skip: for encode, compress + CRC-32 +
SHA-256 of the very payload bytes the encoder produced; for decode,
decompress + CRC-32 + SHA-256 of the same segments. Figures are medians of
``--repeat`` rounds, each timing the codec and its floor back to back (the
ratio is the median of the per-round ratios, robust to a noisy neighbour);
MB/s counts message body bytes (what users back up) and, in brackets, framed
payload bytes (what the compressor sees).

    .venv/bin/python bench/codec.py [--mib 32] [--repeat 5] [--compare-body-only]

``--compare-body-only`` also times, in the same rounds, the codec with only the C body-array reader and writer
(the record-level C reader and writer turned off: orjson reads and writes the rest of each record) and prints
each variant's ratio to the floor and how much faster the record-level C is (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import statistics
import time
import zlib

from airflow_rbak.codec import BackupProperties, BackupRecord, Compression, HeaderValue, SegmentWriter, decode_segment
from airflow_rbak.codec.compression import compress, decompress
from airflow_rbak.codec.constants import FOOTER_SIZE, HEADER_SIZE

_WORDS = "order customer invoice amount currency status created shipped sku quantity price region warehouse".split()


def realistic_messages(total_bytes: int, seed: int = 7) -> list[BackupRecord]:
    """JSON bodies of 200 B to 8 KiB, one in ten binary, with typical properties and headers."""
    rng = random.Random(seed)
    records, size, tag = [], 0, 0
    now = 1_712_756_400_000
    while size < total_bytes:
        target = int(rng.lognormvariate(7.0, 0.8))
        target = max(200, min(8192, target))
        if rng.random() < 0.1:
            body = rng.randbytes(target)
            ctype = "application/octet-stream"
        else:
            parts, length = [], 0
            while length < target:
                item = f'{{"{rng.choice(_WORDS)}": "{rng.choice(_WORDS)}-{rng.randrange(10**6)}", "n": {rng.random():.6f}}}'
                parts.append(item)
                length += len(item) + 1
            body = ("[" + ",".join(parts) + "]").encode()[:target]
            ctype = "application/json"
        tag += 1
        records.append(
            BackupRecord(
                body=body,
                properties=BackupProperties(content_type=ctype, delivery_mode=2, message_id=f"msg-{tag}", app_id="bench"),
                headers=(("x-retry-count", HeaderValue.long(rng.randrange(5))), ("x-source", HeaderValue.long_string("api"))),
                exchange="orders.exchange",
                routing_key="order.created",
                delivery_tag=tag,
                backed_up_at=now + tag,
                source_queue="orders",
                source_vhost="/",
            )
        )
        size += len(body)
    return records


def encode_all(records, compression):
    writer = SegmentWriter(compression, segment_max_bytes=16 * 1024**2)
    segments = []
    for record in records:
        segments += writer.add(record)
    last = writer.flush()
    return segments + ([last] if last else [])


def paired(fn, floor, repeat):
    """Median time of ``fn``, of ``floor``, and the median of their per-round ratios.

    Each round times the two back to back, so a burst of load from a neighbour
    shifts both and the ratio stays honest on a shared machine.
    """
    times, floors, ratios = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        middle = time.perf_counter()
        floor()
        end = time.perf_counter()
        times.append(middle - start)
        floors.append(end - middle)
        ratios.append((middle - start) / (end - middle))
    return statistics.median(times), statistics.median(floors), statistics.median(ratios)


def payloads_of(segments, compression):
    return [decompress(s.data[HEADER_SIZE:-FOOTER_SIZE], compression, 1 << 31, "bench") for s in segments]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="message body MiB to encode")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare-body-only", action="store_true", help="also time the body-array-only accelerator")
    args = parser.parse_args(argv)
    if args.compare_body_only:
        return compare_body_only(args)
    records = realistic_messages(args.mib * 1024**2)
    body_bytes = sum(len(r.body) for r in records)
    print(f"{len(records)} messages, {body_bytes / 1e6:.1f} MB of bodies; medians of {args.repeat} runs; codec: {_build()}")
    print(f"{'codec':8} {'encode MB/s':>22} {'floor':>8} {'ratio':>6} | {'decode MB/s':>22} {'floor':>8} {'ratio':>6}")
    for compression in (Compression.ZSTD, Compression.LZ4, Compression.NONE):
        segments = encode_all(records, compression)
        payloads = payloads_of(segments, compression)
        payload_bytes = sum(len(p) for p in payloads)
        enc, enc_floor, enc_ratio = paired(
            lambda: encode_all(records, compression), lambda: [_seal_floor(p, compression, 3) for p in payloads], args.repeat
        )
        dec, dec_floor, dec_ratio = paired(
            lambda: [decode_segment(s.data) for s in segments], lambda: [_open_floor(s.data, compression) for s in segments],
            args.repeat,
        )
        name = {Compression.ZSTD: "zstd-3", Compression.LZ4: "lz4", Compression.NONE: "none"}[compression]
        print(
            f"{name:8} {body_bytes / enc / 1e6:9.0f} ({payload_bytes / enc / 1e6:5.0f} payload) {body_bytes / enc_floor / 1e6:8.0f} "
            f"{enc_ratio:5.2f}x | {body_bytes / dec / 1e6:9.0f} ({payload_bytes / dec / 1e6:5.0f} payload) "
            f"{body_bytes / dec_floor / 1e6:8.0f} {dec_ratio:5.2f}x"
        )


@contextlib.contextmanager
def body_only():
    """The codec with only the C body-array reader and writer: the record-level C reader and writer turned off."""
    from airflow_rbak.codec import records

    saved = {name: getattr(records, name) for name in _RECORD_LEVEL}
    for name in saved:
        setattr(records, name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(records, name, value)


_RECORD_LEVEL = ("accelerated_encode", "accelerated_decode", "accelerated_append", "accelerated_read")


def compare_body_only(args) -> None:
    """Per codec and direction: full accelerator / floor, body-only / floor, and body-only time / full time."""
    records_ = realistic_messages(args.mib * 1024**2)
    print(f"{len(records_)} messages; medians of {args.repeat} rounds (full, body-only and floor timed back to back); "
          f"codec: {_build()}")
    print(f"{'codec':8} {'dir':6} {'full/floor':>10} {'body/floor':>10} {'body/full':>9}")
    for compression in (Compression.ZSTD, Compression.LZ4, Compression.NONE):
        segments = encode_all(records_, compression)
        with body_only():
            assert [s.data for s in encode_all(records_, compression)] == [s.data for s in segments], "segments differ"
        payloads = payloads_of(segments, compression)
        steps = {
            "encode": (lambda: encode_all(records_, compression), lambda: [_seal_floor(p, compression, 3) for p in payloads]),
            "decode": (lambda: [decode_segment(s.data) for s in segments],
                       lambda: [_open_floor(s.data, compression) for s in segments]),
        }
        for direction, (fn, floor) in steps.items():
            full, body, ratio = [], [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                with body_only():
                    fn()
                t2 = time.perf_counter()
                floor()
                t3 = time.perf_counter()
                full.append((t1 - t0) / (t3 - t2))
                body.append((t2 - t1) / (t3 - t2))
                ratio.append((t2 - t1) / (t1 - t0))
            name = {Compression.ZSTD: "zstd-3", Compression.LZ4: "lz4", Compression.NONE: "none"}[compression]
            print(f"{name:8} {direction:6} {statistics.median(full):9.2f}x {statistics.median(body):9.2f}x "
                  f"{statistics.median(ratio):8.2f}x")


def _build() -> str:
    """Which codec build runs: the C accelerator (and its SSSE3 body reader) or the pure-Python path."""
    from airflow_rbak.codec import records

    if records.accelerated_decode is None:
        return "pure Python (C accelerator not built)"
    return "C accelerator" + (", SSSE3 body reader" if records._speedups.vectors(None) else "")


def _seal_floor(payload, compression, level):
    data = compress(payload, compression, level)
    zlib.crc32(data)
    hashlib.sha256(data).digest()


def _open_floor(data, compression):
    zlib.crc32(data)
    hashlib.sha256(data).digest()
    decompress(memoryview(data)[HEADER_SIZE:-FOOTER_SIZE], compression, 1 << 31, "bench")


if __name__ == "__main__":
    main()
