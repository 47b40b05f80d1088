"""Payloads of several compression frames: every frame is read, and the bounds hold per frame and in total."""

from __future__ import annotations

import struct

import lz4.frame
import pytest
import zstandard

from airflow_rbak.codec import compression as compression_module
from airflow_rbak.codec.compression import decompress, stream
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import DecompressionBombError, DecompressionError

PIECES = (b"first " * 100, b"second " * 300, b"third " * 50)
WHOLE = b"".join(PIECES)
SKIPPABLE = struct.pack("<II", 0x184D2A50, 5) + b"notes"


def zstd_frames(sized: bool, pieces=PIECES) -> bytes:
    return b"".join(zstandard.ZstdCompressor(write_content_size=sized, write_checksum=True).compress(p) for p in pieces)


def lz4_frames(sized: bool, pieces=PIECES) -> bytes:
    return b"".join(lz4.frame.compress(p, store_size=sized, block_checksum=True, content_checksum=True) for p in pieces)


CASES = {
    "zstd, sizes declared": (Compression.ZSTD, zstd_frames(True)),
    "zstd, no sizes": (Compression.ZSTD, zstd_frames(False)),
    "zstd, a skippable frame between": (Compression.ZSTD, zstd_frames(True, PIECES[:1]) + SKIPPABLE + zstd_frames(False, PIECES[1:])),
    "lz4, sizes declared": (Compression.LZ4, lz4_frames(True)),
    "lz4, no sizes": (Compression.LZ4, lz4_frames(False)),
    "lz4, a skippable frame between": (Compression.LZ4, lz4_frames(False, PIECES[:1]) + SKIPPABLE + lz4_frames(True, PIECES[1:])),
}


@pytest.mark.parametrize("name", CASES)
def test_every_frame_is_decompressed_in_order(name):
    compression, data = CASES[name]

    assert decompress(data, compression, 1 << 20, "s") == WHOLE
    assert decompress(data, compression, len(WHOLE), "s", expected_size=len(WHOLE)) == WHOLE


@pytest.mark.parametrize("name", CASES)
def test_the_cap_bounds_all_frames_together(name):
    compression, data = CASES[name]

    with pytest.raises(DecompressionBombError, match=f"cap of {len(WHOLE) - 1} bytes"):
        decompress(data, compression, len(WHOLE) - 1, "s")  # each frame fits, together they do not


@pytest.mark.parametrize("compression, frames", [(Compression.ZSTD, zstd_frames), (Compression.LZ4, lz4_frames)])
def test_frames_declaring_more_than_the_cap_leaves_are_refused_before_decompressing(compression, frames):
    data = frames(True)

    with pytest.raises(DecompressionBombError, match=f"its frames declare {len(WHOLE)} decompressed bytes"):
        decompress(data, compression, len(WHOLE) - 1, "s")


def test_a_frame_holding_more_than_it_declares_is_refused():
    frame = bytearray(zstd_frames(True, PIECES[1:2]))
    descriptor = frame[4]
    assert descriptor >> 6 == 1 and not descriptor & 3  # a 2-byte content size (stored less 256), no dictionary id
    at = 5 if descriptor & 0x20 else 6  # after the window byte, which a single-segment frame leaves out
    frame[at : at + 2] = struct.pack("<H", 10)
    data = zstd_frames(True, PIECES[:1]) + bytes(frame)

    with pytest.raises(DecompressionError, match=r"^s: corrupt zstd payload: .*too small"):  # libzstd holds it to 266
        decompress(data, Compression.ZSTD, 1 << 20, "s")


@pytest.mark.parametrize("compression, frames", [(Compression.ZSTD, zstd_frames), (Compression.LZ4, lz4_frames)])
def test_a_truncated_last_frame_is_refused(compression, frames):
    data = frames(False)[:-3]

    with pytest.raises(DecompressionError, match="truncated"):
        decompress(data, compression, 1 << 20, "s")


@pytest.mark.parametrize("compression", [Compression.ZSTD, Compression.LZ4])
def test_bytes_that_are_no_frame_after_a_frame_are_refused(compression):
    data = (zstd_frames if compression is Compression.ZSTD else lz4_frames)(True, PIECES[:1]) + b"garbage!"

    with pytest.raises(DecompressionError, match="not a"):
        decompress(data, compression, 1 << 20, "s")


@pytest.fixture(params=[(7, 16), (1 << 20, 256 * 1024)], ids=["small-pieces", "default-pieces"])
def pieces(request, monkeypatch):
    """Decompressed chunks of this many bytes, and LZ4 input fed this many bytes at a time."""
    out, lz4_input = request.param
    monkeypatch.setattr(compression_module, "_CHUNK", out)
    monkeypatch.setattr(compression_module, "_LZ4_INPUT", lz4_input)


@pytest.mark.parametrize("name", CASES)
def test_a_stream_yields_what_decompress_returns_within_the_same_bounds(pieces, name):
    compression, data = CASES[name]

    assert b"".join(stream(data, compression, len(WHOLE), "s", expected_size=len(WHOLE))) == WHOLE
    assert decompress(data, compression, len(WHOLE), "s") == WHOLE
    with pytest.raises(DecompressionBombError):
        b"".join(stream(data, compression, len(WHOLE) - 1, "s"))
    with pytest.raises(DecompressionError, match=f"(payload is|frames declare) {len(WHOLE)} .*, (the )?manifest"):
        b"".join(stream(data, compression, 1 << 20, "s", expected_size=len(WHOLE) + 1))


@pytest.mark.parametrize("compression, frames", [(Compression.ZSTD, zstd_frames), (Compression.LZ4, lz4_frames)])
def test_a_stream_refuses_a_truncated_last_frame(pieces, compression, frames):
    data = frames(False)[:-3]

    with pytest.raises(DecompressionError, match="truncated"):
        b"".join(stream(data, compression, 1 << 20, "s"))
    with pytest.raises(DecompressionError, match="truncated"):
        decompress(data, compression, 1 << 20, "s")


def test_an_uncompressed_payload_streams_as_itself_and_its_bounds_hold():
    assert list(stream(WHOLE, Compression.NONE, len(WHOLE), "s")) == [WHOLE]
    with pytest.raises(DecompressionBombError):
        list(stream(WHOLE, Compression.NONE, len(WHOLE) - 1, "s"))
    with pytest.raises(DecompressionError, match="manifest says"):
        list(stream(WHOLE, Compression.NONE, 1 << 20, "s", expected_size=1))


def test_an_lz4_frame_read_a_block_per_chunk_reads_whole(monkeypatch):
    # Given a frame of 64 KiB blocks, read one block's output at a time and fed a little input at a time: every call
    # that completes a block returns exactly a chunk, after which the decompressor asks for no input (it may hold
    # more output) although it has none to give without more input
    whole = b"".join(b"%08d rbak " % i for i in range(60_000))
    frame = lz4.frame.compress(whole, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    monkeypatch.setattr(compression_module, "_CHUNK", 64 * 1024)
    monkeypatch.setattr(compression_module, "_LZ4_INPUT", 1000)

    # When it is read, Then every block comes out, and a cut frame is still refused
    assert decompress(frame, Compression.LZ4, len(whole), "s") == whole
    assert b"".join(stream(frame, Compression.LZ4, len(whole), "s")) == whole
    with pytest.raises(DecompressionError, match="truncated"):
        decompress(frame[:-5], Compression.LZ4, len(whole), "s")
