"""Hostile segments at the default limits: every reader path refuses them with bounded memory.

Each backup below holds one queue whose only segment was replaced by hostile
bytes, and whose manifest entry was rewritten to match them (SHA-256, size):
the attacker controls both, so the checksum alone stops nothing but the last
case. Each reader path runs in a process of its own (``hostile_reader``) at
its default limits (a 641 MiB cap: a 128 MiB segment plus one record of a
128 MiB message), and must refuse every case with a typed error or a
reported defect while its peak resident set stays under 400 MiB. The bombs
decompress to 1 GiB, past the cap, so a reader that held what it
decompressed would go well over the bound.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import subprocess
import sys
from pathlib import Path

import lz4.frame
import orjson
import pytest
import zstandard

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES, END_MAGIC, MAGIC
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter
from tests.repository.sample import sample_records

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
RSS_BOUND = 400 * MiB
BOMB_BYTES = 1024 * MiB
#: 64 KiB records of JSON-looking text: a bomb that frames well, so only the size limits stop it.
RECORD = b'{"body":[' + b"1," * (32 * 1024 - 8) + b'1]}'
FRAMED = struct.pack("<I", len(RECORD)) + RECORD
BLOCK = FRAMED * (16 * MiB // len(FRAMED))
MANY = 2**40  # a header record count that never stops a bomb by itself


def seal(compression: int, count: int, payload: bytes) -> bytes:
    """A segment around any payload bytes, with a valid CRC-32, so the bytes reach the decompressor."""
    import zlib

    head = struct.pack("<4sBB2sQqq", MAGIC, 1, compression, b"\0\0", count, 0, 0)
    return head + payload + struct.pack("<I4s", zlib.crc32(payload, zlib.crc32(head)), END_MAGIC)


def zstd_bomb(declare: bool) -> bytes:
    """BOMB_BYTES of framed records as one zstd frame that states its size, or as frames that state none."""
    if not declare:
        frame = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(BLOCK)
        return frame * (BOMB_BYTES // len(BLOCK))
    writer = zstandard.ZstdCompressor(level=1).compressobj(size=len(BLOCK) * (BOMB_BYTES // len(BLOCK)))
    return b"".join(writer.compress(BLOCK) for _ in range(BOMB_BYTES // len(BLOCK))) + writer.flush()


def lying_frame() -> bytes:
    """A zstd frame that declares 1 KiB but holds a bomb (its content-size field rewritten)."""
    frame = bytearray(zstd_bomb(declare=True))
    descriptor = frame[4]
    assert descriptor >> 6 == 2 and not descriptor & 0x20  # a 4-byte size after a window byte
    frame[6:10] = struct.pack("<I", 1024)
    return bytes(frame)


def cases() -> dict[str, tuple[bytes, dict]]:
    """Case name -> (segment bytes, manifest entry fields the attacker wrote)."""
    big = {"uncompressed_bytes": BOMB_BYTES}
    lz4_frames = lz4.frame.compress(BLOCK, store_size=False) * (BOMB_BYTES // len(BLOCK))
    huge_length = struct.pack("<I", 0xFFFF_FFF0) + RECORD
    return {
        "zstd-bomb-declared-size": (seal(1, MANY, zstd_bomb(declare=True)), big),
        "zstd-bomb-no-declared-size": (seal(1, MANY, zstd_bomb(declare=False)), {"uncompressed_bytes": 600 * MiB}),
        "zstd-frame-size-lies": (seal(1, MANY, lying_frame()), {"uncompressed_bytes": 1024}),
        "manifest-size-lies": (seal(1, MANY, zstd_bomb(declare=False)), {"uncompressed_bytes": 4096}),
        "manifest-declares-too-much": (seal(1, MANY, zstd_bomb(declare=False)), {"uncompressed_bytes": 2**62}),
        "lz4-bomb-no-declared-size": (seal(2, MANY, lz4_frames), {"uncompressed_bytes": 500 * MiB}),
        "zero-bomb": (seal(1, MANY, zstandard.ZstdCompressor(write_content_size=False).compress(bytes(64 * MiB)) * 16),
                      {"uncompressed_bytes": 600 * MiB}),
        "huge-length": (seal(1, 1, zstandard.ZstdCompressor().compress(huge_length)), {"uncompressed_bytes": len(huge_length)}),
        "huge-length-in-bomb": (seal(1, MANY, zstandard.ZstdCompressor(level=1, write_content_size=False).compress(
            struct.pack("<I", 600 * MiB) + bytes(16 * MiB)) * 40), {"uncompressed_bytes": 640 * MiB}),
        "huge-record-count": (seal(0, 2**64 - 1, FRAMED), {"uncompressed_bytes": len(FRAMED)}),
        "bomb-the-manifest-does-not-vouch-for": (seal(1, MANY, zstd_bomb(declare=False)), {"checksum": "0" * 64}),
    }


@pytest.fixture(scope="module")
def hostile_backups(tmp_path_factory) -> tuple[str, list[str]]:
    """One backup per case on a folder; returns the storage URL and the backup ids."""
    root = tmp_path_factory.mktemp("hostile")
    url = f"file://{root}"
    storage = open_storage(url)
    ids = []
    for name, (data, entry) in cases().items():
        writer = BackupWriter(storage, name, rabbitmq_version="3.10.8")
        sink = writer.queue("/", "orders", "classic")
        sink.add_all(sample_records("/", "orders", 3))
        sink.close()
        manifest = writer.finish()
        queue = manifest.queues[0]
        storage.put(queue.segments[0].key, data)
        fields = dict(size_bytes=len(data), checksum=hashlib.sha256(data).hexdigest(),
                      record_count=struct.unpack_from("<Q", data, 8)[0], first_timestamp=0, last_timestamp=0)
        queue.segments[0] = dataclasses.replace(queue.segments[0], **{**fields, **entry})
        manifest.refresh_totals()  # the attacker keeps the manifest consistent with itself
        storage.put(manifest_key(name), manifest.to_bytes())
        ids.append(name)
    return url, ids


@pytest.mark.parametrize("path", ["validate", "plan", "restore", "rebuild", "dump", "spark_verify"])
def test_every_reader_path_refuses_every_hostile_segment_under_400_mib(hostile_backups, path):
    # Given: hostile segments whose manifest entries the attacker rewrote to match
    url, ids = hostile_backups
    assert DEFAULT_MAX_DECOMPRESSED_BYTES == 641 * MiB  # the default limits are the ones under test
    # When: the reader path reads each of them in a fresh process at its default limits
    done = subprocess.run([sys.executable, "-m", "tests.reliability.hostile_reader", path, url, *ids],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = [orjson.loads(line) for line in done.stdout.splitlines()]
    # Then: each is refused, naming the segment (a typed error, or a defect a collecting reader reports) ...
    assert [o["backup_id"] for o in outcomes] == ids
    for outcome in outcomes:
        refusal = outcome.get("message") or " ".join(outcome["defects"])
        assert "segment-0001" in refusal, outcome
    # ... and the process never held more than the bound
    peaks = {o["backup_id"]: o["peak_rss"] // MiB for o in outcomes}
    for o in outcomes:
        said = o.get("message") or [d for d in o["defects"] if "manifest.json" not in d]
        print(f"{path} {o['backup_id']}: {o['peak_rss'] // MiB} MiB: {o.get('error') or ''} {said}"[:400])
    assert max(peaks.values()) * MiB < RSS_BOUND, peaks
