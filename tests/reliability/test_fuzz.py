"""Property-based fuzzing of the reader: mutated real segments and manifests get typed errors, never anything else.

Segments are mutated at three depths: raw bytes (bit flips, overwrites, cuts, splices), the header's
fields, and the decompressed payload (length prefixes, record JSON), resealed with a valid CRC so the
mutation reaches the decompressor, the framing and the record parser (the C accelerator included).
Manifests are mutated as text and as JSON values. Each example runs under a deadline (no hang) and
with its peak Python allocation measured (bounded memory).

CI runs a fixed, derandomized budget (``EXAMPLES`` per test). For a long local run::

    RBAK_FUZZ_EXAMPLES=50000 .venv/bin/pytest tests/reliability/test_fuzz.py -q

which also randomizes the examples and keeps failures in hypothesis's example database.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import tracemalloc
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import (
    BackupManifest,
    BackupProperties,
    BackupRecord,
    CodecError,
    Compression,
    HeaderValue,
    ManifestError,
    decode_segment,
    encode_payload,
    encode_record,
    encode_segment,
    read_header,
)
from airflow_rbak.codec.compression import compress
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.segment_check import SegmentCheck, check_segment_bytes
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest
from airflow_rbak.restore.plan import plan_restore
from airflow_rbak.restore.wire import iter_wire_records
from airflow_rbak.storage import MemoryStorage
from tests.repository.backup_writer import BackupWriter

LONG_RUN = int(os.environ.get("RBAK_FUZZ_EXAMPLES", "0"))
EXAMPLES = LONG_RUN or 400
CAP = 1 << 20  # the reader's decompression cap in these tests
PEAK_LIMIT = 8 * CAP  # the most one example may allocate: a few copies of a capped payload
FUZZ = settings(
    max_examples=EXAMPLES, derandomize=not LONG_RUN, deadline=dt.timedelta(seconds=2),
    database=None if not LONG_RUN else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
H = HeaderValue


def sample_records(queue: str) -> list[BackupRecord]:
    """Records as a capture writes them: empty, text and binary bodies, every property, every header type."""
    headers = (("n", H.long(-7)), ("s", H.short(3)), ("t", H.long_string("ünï")), ("b", H.bytes_(b"\0\xff")),
               ("f", H.float32(0.5)), ("d", H.double(-1.25)), ("ts", H.timestamp(1_700_000_000)), ("v", H.void()),
               ("ok", H.bool_(True)), ("tbl", H.table([("arr", H.array([H.long(1), H.short_string("x")]))])))
    props = BackupProperties(content_type="application/json", delivery_mode=2, priority=5, message_id="m", timestamp=9,
                             type_field="t", app_id="a")
    bodies = [b"", b'{"order": 1}', bytes(range(256)), "ünïcødé".encode() * 20, b"\0" * 300]
    return [BackupRecord(body=b, properties=props, headers=headers if i % 2 else (), exchange="ex", routing_key="rk",
                         delivery_tag=i, redelivered=bool(i % 2), backed_up_at=1_000 + i, source_queue=queue,
                         source_vhost="/") for i, b in enumerate(bodies)]


RECORDS = sample_records("orders")
SEGMENTS = {c: encode_segment(RECORDS, c).data for c in Compression}
PAYLOAD = SEGMENTS[Compression.NONE][32:-8]
ZSTD_ENTRY = encode_segment(RECORDS).metadata("f/queues/_default/orders/segment-0001.zst", 1)


def seal(header: bytes, body: bytes) -> bytes:
    """A segment with a correct CRC and end magic around any header and body."""
    framed = header + body
    return framed + struct.pack("<I", zlib.crc32(framed)) + b"KABR"


@st.composite
def byte_edits(draw, data: bytes) -> bytes:
    """One to four raw edits: flip a bit, overwrite, cut, delete, duplicate or insert a range."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        pos = draw(st.integers(0, len(out) - 1))
        end = draw(st.integers(pos, min(len(out), pos + 64)))
        kind = draw(st.sampled_from(["flip", "set", "cut", "delete", "duplicate", "insert"]))
        if kind == "flip":
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            out[pos] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, ord('"'), ord("{"), ord("]")]))
        elif kind == "cut":
            del out[pos:]
        elif kind == "delete":
            del out[pos:end]
        elif kind == "duplicate":
            out[pos:pos] = out[pos:end]
        else:
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    return bytes(out)


@st.composite
def header_edits(draw, compression: Compression) -> bytes:
    """A header with hostile fields: version, compression byte, record count, timestamps."""
    return struct.pack(
        "<4sBB2sQqq", draw(st.sampled_from([b"RBAK", b"RBAX"])), draw(st.sampled_from([1, 1, 1, 0, 2, 255])),
        draw(st.sampled_from([int(compression)] * 3 + [0, 1, 2, 3, 255])), draw(st.sampled_from([b"\0\0", b"\xff\xff"])),
        draw(st.sampled_from([len(RECORDS), len(RECORDS), 0, 1, len(RECORDS) + 1, 2**32, 2**63, 2**64 - 1])),
        draw(st.integers(-(2**63), 2**63 - 1)), draw(st.integers(-(2**63), 2**63 - 1)),
    )


@st.composite
def payload_edits(draw) -> bytes:
    """The decompressed payload with a length prefix rewritten, a record's JSON edited, or records spliced."""
    payload = bytearray(PAYLOAD)
    kind = draw(st.sampled_from(["length", "json", "splice"]))
    if kind == "length":
        offset = draw(st.sampled_from(_record_offsets()))
        value = draw(st.sampled_from([0, 1, 2**31, 2**32 - 1]) | st.integers(0, len(payload)))
        payload[offset:offset + 4] = struct.pack("<I", value)
    elif kind == "json":
        offset = draw(st.sampled_from(_record_offsets()))
        (length,) = struct.unpack_from("<I", payload, offset)
        edited = draw(byte_edits(bytes(payload[offset + 4:offset + 4 + length])))
        payload[offset:offset + 4 + length] = struct.pack("<I", len(edited)) + edited
    else:
        payload = bytearray(draw(byte_edits(bytes(payload))))
    return bytes(payload)


def _record_offsets() -> list[int]:
    offsets, pos = [], 0
    while pos < len(PAYLOAD):
        offsets.append(pos)
        pos += 4 + struct.unpack_from("<I", PAYLOAD, pos)[0]
    return offsets


@st.composite
def hostile_segments(draw) -> bytes:
    """A real segment mutated at one depth; resealed (valid CRC) more often than not."""
    compression = draw(st.sampled_from(list(Compression)))
    data = SEGMENTS[compression]
    depth = draw(st.sampled_from(["bytes", "header", "payload"]))
    if depth == "bytes":
        mutated = draw(byte_edits(data))
        return seal(mutated[:32], mutated[32:-8]) if draw(st.booleans()) and len(mutated) >= 40 else mutated
    header = draw(header_edits(compression)) if depth == "header" else data[:32]
    if depth == "payload" and compression is not Compression.NONE and draw(st.integers(0, 9)) == 0:
        return seal(header, draw(st.sampled_from(BOMBS[compression])))
    body = data[32:-8] if depth == "header" else compress(draw(payload_edits()), compression, 1)
    return seal(header, body)


def _bombs(compression: Compression) -> list[bytes]:
    """Payloads that decompress past the cap: just past it, and well past it without a declared size."""
    import lz4.frame
    import zstandard

    if compression is Compression.LZ4:
        return [lz4.frame.compress(b"\0" * (CAP + 1)), lz4.frame.compress(b"\0" * 4 * CAP, store_size=False)]
    return [zstandard.ZstdCompressor().compress(b"\0" * (CAP + 1)),
            zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 4 * CAP)]


BOMBS = {c: _bombs(c) for c in (Compression.ZSTD, Compression.LZ4)}


def peak_of(action) -> int:
    """Run ``action`` with allocations traced; the peak of Python allocations while it ran, in bytes."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_everything(data: bytes) -> None:
    """Every reader of segment bytes: header, strict decode, the deep check, and the restore fast path."""
    try:
        read_header(data, "fuzz")
    except CodecError:
        pass
    try:
        decoded = decode_segment(data, name="fuzz", max_decompressed_bytes=CAP)
    except CodecError as exc:
        assert str(exc).startswith("fuzz: ") and "\n" not in str(exc)
        decoded = None
    if decoded is not None:  # what the strict reader accepts, the restore's fast path reads the same way
        wire = list(iter_wire_records(data, "fuzz"))
        assert [w.body for w in wire] == [r.body for r in decoded.records]
        assert [w.backed_up_at for w in wire] == [r.backed_up_at for r in decoded.records]
    check = SegmentCheck(ZSTD_ENTRY.key, "/", "orders", 1)
    check_segment_bytes(data, "/", "orders", ZSTD_ENTRY, check, CAP)  # collects defects, never raises
    assert not check.ok or data == SEGMENTS[Compression.ZSTD]  # the deep check never passes altered bytes


def spaced_bodies() -> bytes:
    """Found by a long run: a body written ``[-0,0]`` (valid JSON: byte 0) that the restore's C parser refused."""
    payload = bytearray()
    for raw, text in ((encode_record(RECORDS[0]), b'"body":[-0,0]'), (encode_record(RECORDS[1]), b'"body":[ 0 ]')):
        edited = raw.replace(raw[raw.index(b'"body"'):raw.index(b',"properties"')], text)
        payload += struct.pack("<I", len(edited)) + edited
    return encode_payload(payload, 2, 1000, 1001).data


@pytest.mark.timeout(0 if LONG_RUN else 300)  # (no limit for a long local run)
@FUZZ
@given(hostile_segments())
@example(spaced_bodies())
def test_any_mutated_segment_gets_a_typed_error_or_reads_back_within_bounded_memory(data):
    assert peak_of(lambda: read_everything(data)) < PEAK_LIMIT


def manifest_bytes() -> bytes:
    """A real manifest: two queues with segments, definitions, extensions."""
    storage = MemoryStorage()
    writer = BackupWriter(storage, "fuzz-1", source_cluster="rabbit@a", rabbitmq_version="3.10.8")
    for name in ("orders", "eu/returns"):
        sink = writer.queue("/", name, "quorum")
        sink.add_all(sample_records(name))
        sink.close()
    writer.write_definitions(b'{"vhosts": [{"name": "/"}], "queues": [], "users": []}')
    writer.manifest.extensions["stream_offsets"] = {"first": 0, "last": 9}
    writer.finish()
    return storage.get("fuzz-1/manifest.json"), storage


MANIFEST, MANIFEST_STORAGE = manifest_bytes()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


PATHS = list(_paths(orjson.loads(MANIFEST)))


@st.composite
def hostile_manifests(draw) -> bytes:
    """The manifest with one value replaced or removed, or its text edited."""
    if draw(st.booleans()):
        return draw(byte_edits(MANIFEST))
    doc = orjson.loads(MANIFEST)
    path = draw(st.sampled_from(PATHS[1:]))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)


@pytest.mark.timeout(0 if LONG_RUN else 300)  # (no limit for a long local run)
@FUZZ
@given(hostile_manifests())
@example(MANIFEST.replace(b'"key": "fuzz-1/definitions', b'"key": "\x7fuzz-1/definitions'))  # found by a long run
def test_any_mutated_manifest_gets_a_manifest_error_or_round_trips_and_validation_and_planning_stay_typed(data):
    manifest = None
    try:
        manifest = BackupManifest.from_bytes(data)
    except ManifestError as exc:
        assert str(exc).startswith("manifest.json: ") and "\n" not in str(exc)
    else:
        assert BackupManifest.from_bytes(manifest.to_bytes()).to_json() == manifest.to_json()
    storage = MemoryStorage()
    for info in MANIFEST_STORAGE.list(""):
        storage.put(info.key, MANIFEST_STORAGE.get(info.key))
    storage.put("fuzz-1/manifest.json", data)
    reports = []

    def validate_and_plan() -> None:
        reports.append(validate_backup(storage, "fuzz-1", deep=True, max_decompressed_bytes=CAP))  # never raises
        try:
            plan_restore(storage, RestoreRequest("memory://", backup_id="fuzz-1", skip_damaged_segments=True))
        except RbakError as exc:
            assert "\n" not in str(exc)

    assert peak_of(validate_and_plan) < PEAK_LIMIT
    (report,) = reports
    assert report.valid or data != MANIFEST
    assert manifest is not None or not report.valid  # a manifest that cannot be read is reported
