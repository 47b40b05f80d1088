"""Hand-built hostile segments: each one a valid frame around one defect."""

from __future__ import annotations

import struct
import zlib

from airflow_rbak.codec import BackupRecord, Compression, encode_segment


def seal(version: int, compression: int, count: int, payload: bytes, first: int = 1, last: int = 1) -> bytes:
    """A segment with a correct CRC around whatever header fields and payload we choose."""
    body = struct.pack("<4sBB2sQqq", b"RBAK", version, compression, b"\0\0", count, first, last) + payload
    return body + struct.pack("<I", zlib.crc32(body)) + b"KABR"


def small_segment(compression: Compression = Compression.ZSTD) -> bytes:
    records = [BackupRecord(body=f"message {i}".encode(), backed_up_at=1000 + i, source_queue="q") for i in range(3)]
    return encode_segment(records, compression).data


def zstd_frame_declaring(size: int) -> bytes:
    """A zstd frame header that declares ``size`` content bytes, followed by one tiny RLE block."""
    descriptor = (3 << 6) | (1 << 5)  # 8-byte content size, single segment
    block = struct.pack("<I", (1 << 3) | (1 << 1) | 1)[:3] + b"\x00"  # last block, RLE, 1 byte
    return b"\x28\xb5\x2f\xfd" + bytes([descriptor]) + struct.pack("<Q", size) + block


def named_cases() -> dict[str, bytes]:
    """The hostile inputs issue 2 names, each with the error class it must raise."""
    good = small_segment(Compression.NONE)
    framed = struct.pack("<I", 0xFFFFFFFF) + b"{}"
    return {
        "wrong_magic": b"RBAX" + good[4:],
        "version_2": seal(2, 0, 3, good[32:-8]),
        "compression_7": seal(1, 7, 3, good[32:-8]),
        "length_prefix_ffffffff": seal(1, 0, 1, framed),
        "zstd_declares_64_gib": seal(1, 1, 1, zstd_frame_declaring(64 << 30)),
        "record_count_2_pow_63": seal(1, 0, 2**63, good[32:-8]),
        "truncated_footer": good[:-3],
        "empty_file": b"",
    }
