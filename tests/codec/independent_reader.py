"""A minimal RBAK reader written from the format alone (docs/format.md): struct, zlib, zstandard, lz4 and json.

It shares no code with ``airflow_rbak`` so that the tests catch a codec that
agrees with itself but not with the specification.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib

import lz4.frame
import zstandard


def read_segment(data: bytes) -> tuple[dict, list[dict]]:
    """Return (header fields, records as parsed JSON objects), asserting every spec check."""
    assert len(data) >= 40, "shorter than header + footer"
    magic, version, comp, reserved, count, first, last = struct.unpack_from("<4sBB2sQqq", data, 0)
    assert magic == b"RBAK" and data[-4:] == b"KABR"
    (crc,) = struct.unpack_from("<I", data, len(data) - 8)
    assert crc == zlib.crc32(data[:-8]), "CRC-32 mismatch"
    assert version == 1 and reserved == b"\0\0"
    payload = data[32:-8]
    if comp == 1:
        payload = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True).read()
    elif comp == 2:
        payload = lz4.frame.decompress(payload)
    else:
        assert comp == 0
    records, pos = [], 0
    while pos < len(payload):
        (length,) = struct.unpack_from("<I", payload, pos)
        pos += 4
        records.append(json.loads(payload[pos : pos + length]))
        pos += length
    assert pos == len(payload) and len(records) == count
    header = {"compression": comp, "record_count": count, "first_timestamp": first, "last_timestamp": last}
    header["sha256"] = hashlib.sha256(data).hexdigest()
    return header, records
