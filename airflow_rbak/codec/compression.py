"""Payload compression with a hard cap on what decompression may produce.

The cap is checked against the size a frame declares before anything is
allocated, and again while streaming, so a decompression bomb is refused
with memory bounded by the cap.
"""

from __future__ import annotations

import io

import lz4.frame
import zstandard

from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import DecompressionBombError, DecompressionError

_CHUNK = 1 << 20


def compress(payload: bytes | bytearray | memoryview, compression: Compression, level: int) -> bytes:
    """Compress a whole payload as one frame (zstd level 1-22; LZ4 frame; or none); any buffer, never copied first."""
    if compression is Compression.ZSTD:
        return zstandard.ZstdCompressor(level=level).compress(payload)
    if compression is Compression.LZ4:
        return lz4.frame.compress(payload)
    return bytes(payload)


def decompress(data: bytes | memoryview, compression: Compression, cap: int, segment: str) -> bytes:
    """Decompress ``data``; refuse past ``cap`` bytes with :class:`DecompressionBombError`."""
    if compression is Compression.NONE:
        return bytes(data)
    if compression is Compression.ZSTD:
        return _zstd(data, cap, segment)
    return _lz4(data, cap, segment)


def _bomb(cap: int, segment: str, declared: int | None = None) -> DecompressionBombError:
    what = f"declares {declared} decompressed bytes, more" if declared is not None else "decompresses to more bytes"
    return DecompressionBombError(f"payload {what} than the reader's cap of {cap} bytes", segment=segment, offset=32)


def _zstd(data: bytes | memoryview, cap: int, segment: str) -> bytes:
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"not a zstd frame: {exc}", segment=segment, offset=32) from None
    if declared > cap:
        raise _bomb(cap, segment, declared)
    if declared >= 0:
        # One frame that states its size (what we write): decompress in one call.
        try:
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=cap, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # several frames, or a damaged one: the streaming path reads or names it
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    return _drain(reader.read, cap, segment, zstandard.ZstdError, "zstd")


def _lz4(data: bytes | memoryview, cap: int, segment: str) -> bytes:
    try:
        info = lz4.frame.get_frame_info(bytes(data[:32]))
    except RuntimeError as exc:
        raise DecompressionError(f"not an LZ4 frame: {exc}", segment=segment, offset=32) from None
    if info.get("content_size", 0) > cap:
        raise _bomb(cap, segment, info["content_size"])
    out = bytearray()
    pending = bytes(data)
    try:
        while pending:  # one pass per concatenated frame
            decompressor = lz4.frame.LZ4FrameDecompressor()
            feed = pending
            while not decompressor.eof:
                out += decompressor.decompress(feed, max_length=_CHUNK)
                feed = b""
                if len(out) > cap:
                    raise _bomb(cap, segment)
                if decompressor.needs_input and not decompressor.eof:
                    raise DecompressionError("LZ4 frame is truncated", segment=segment, offset=32)
            pending = decompressor.unused_data
    except RuntimeError as exc:
        raise DecompressionError(f"corrupt LZ4 payload: {exc}", segment=segment, offset=32) from None
    return bytes(out)


def _drain(read, cap: int, segment: str, error: type[Exception], name: str) -> bytes:
    out = bytearray()
    try:
        while True:
            chunk = read(_CHUNK)
            if not chunk:
                break
            out += chunk
            if len(out) > cap:
                raise _bomb(cap, segment)
    except error as exc:
        raise DecompressionError(f"corrupt {name} payload: {exc}", segment=segment, offset=32) from None
    return bytes(out)
