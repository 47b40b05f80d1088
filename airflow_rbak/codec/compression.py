"""Payload compression, and decompression bounded by what the payload may legitimately hold.

A hostile payload (a decompression bomb, a frame whose declared size lies, a
length prefix of gigabytes) must be refused with memory that does not depend
on what it claims. So, unless the payload is small, decompression runs twice:
first a streaming pass that holds one chunk at a time, counts the output
against the cap and any declared size and lets the caller walk its framing;
then, only for a payload that passed, one allocation of exactly its size.
A reader that needs no payload whole (the deep check) streams it once
instead (:func:`stream`), holding one chunk at a time.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Protocol

import lz4.frame
import zstandard

from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import DecompressionBombError, DecompressionError
from airflow_rbak.codec.frames import Frame, frames

_CHUNK = 1 << 20
#: Payloads that declare at most this many bytes are decompressed in one pass: refusing them late costs little.
_ONE_PASS_BYTES = 16 * _CHUNK
#: Compressed bytes handed to the LZ4 decompressor per call (see _lz4_frame).
_LZ4_INPUT = 256 * 1024


class ChunkVisitor(Protocol):
    """Sees a large payload chunk by chunk before it is allocated whole; raises to refuse it."""

    def chunk(self, view: memoryview, offset: int) -> None: ...

    def end(self, size: int) -> None: ...


def compress(payload: bytes | bytearray | memoryview, compression: Compression, level: int) -> bytes:
    """Compress a whole payload as one frame (zstd level 1-22; LZ4 frame; or none); any buffer, never copied first."""
    if compression is Compression.ZSTD:
        return zstandard.ZstdCompressor(level=level).compress(payload)
    if compression is Compression.LZ4:
        return lz4.frame.compress(payload)
    return bytes(payload)


def decompress(
    data: bytes | memoryview, compression: Compression, cap: int, segment: str, *,
    expected_size: int | None = None, visit: ChunkVisitor | None = None,
) -> bytes:
    """Decompress every frame of ``data``, refusing past ``cap`` bytes or a size other than ``expected_size``.

    The frames' declared sizes are summed before anything is decompressed, so
    a frame declaring more than the cap leaves is refused before any
    allocation. ``visit`` sees a large payload chunk by chunk before anything
    payload-sized is allocated (a segment's framing walk); a small one is
    left to the caller.
    """
    limit, count = _bounds(data, compression, cap, segment, expected_size)
    if compression is Compression.NONE:
        return bytes(data)
    if limit > _ONE_PASS_BYTES:
        limit = measure(data, compression, limit, segment, visit)
        _check_expected(limit, expected_size, segment)
    out = _decompress_exactly(data, compression, limit, segment, single=count == 1)
    _check_expected(len(out), expected_size, segment)
    return out


def stream(
    data: bytes | memoryview, compression: Compression, cap: int, segment: str, *, expected_size: int | None = None,
) -> Generator[memoryview, None, None]:
    """The decompressed payload chunk by chunk, within the bounds :func:`decompress` holds it to.

    For a reader that needs no payload whole: it is decompressed once, and only a chunk is held at a time
    (an uncompressed payload is yielded whole, as the view of ``data`` it is). A chunk is valid until the
    next one is asked for.
    """
    limit, _ = _bounds(data, compression, cap, segment, expected_size)
    if compression is Compression.NONE:
        yield memoryview(data)
        return
    size = 0
    for chunk in _chunks(data, compression, segment):
        size += len(chunk)
        if size > limit:
            raise _bomb(limit, segment)
        yield chunk
    _check_expected(size, expected_size, segment)


def _bounds(data: bytes | memoryview, compression: Compression, cap: int, segment: str,
            expected_size: int | None) -> tuple[int, int]:
    """The most the payload may decompress to, and its number of frames; refuses what is out of bounds already."""
    if expected_size is not None and expected_size > cap:
        raise _bomb(cap, segment, expected_size, "the manifest declares")
    if compression is Compression.NONE:
        _check_expected(len(data), expected_size, segment)
        if len(data) > cap:
            raise _bomb(cap, segment)
        return len(data), 1
    declared, count = _survey(data, compression, cap, segment)
    if declared is not None and expected_size is not None and declared != expected_size:
        raise DecompressionError(
            f"frames declare {declared} decompressed bytes, the manifest {expected_size}", segment=segment, offset=32)
    return min(x for x in (cap, declared, expected_size) if x is not None), count


def measure(data: bytes | memoryview, compression: Compression, cap: int, segment: str, visit: ChunkVisitor | None = None) -> int:
    """The payload's decompressed size, holding one chunk at a time; refuse past ``cap``."""
    size = 0
    for chunk in _chunks(data, compression, segment):
        if size + len(chunk) > cap:
            raise _bomb(cap, segment)
        if visit is not None:
            visit.chunk(chunk, size)
        size += len(chunk)
    if visit is not None:
        visit.end(size)
    return size


def _check_expected(size: int, expected: int | None, segment: str) -> None:
    if expected is not None and size != expected:
        raise DecompressionError(f"payload is {size} bytes uncompressed, manifest says {expected}", segment=segment, offset=32)


def _bomb(cap: int, segment: str, declared: int | None = None, who: str = "") -> DecompressionBombError:
    what = f"{who} {declared} decompressed bytes, more" if declared is not None else "payload decompresses to more bytes"
    return DecompressionBombError(f"{what} than the reader's cap of {cap} bytes", segment=segment, offset=32)


def _survey(data: bytes | memoryview, compression: Compression, cap: int, segment: str) -> tuple[int | None, int]:
    """The sum of the sizes the frames declare (None when one declares none) and the number of frames.

    A running sum past ``cap`` is refused at the frame that passes it, before anything is decompressed.
    """
    total, known, count = 0, True, 0
    for frame in frames(data, compression, segment):
        count += 1
        if frame.declared is None:
            known = False
            continue
        total += frame.declared
        if total > cap:
            raise _bomb(cap, segment, total, "its frames declare")
    return (total if known else None), count


def _decompress_exactly(data: bytes | memoryview, compression: Compression, limit: int, segment: str, *,
                        single: bool = False) -> bytes:
    """Decompress a payload known to hold at most ``limit`` bytes."""
    if compression is Compression.ZSTD and single:
        try:  # one frame (what we write): one allocation of the size it states or was measured to have
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=limit, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # a damaged frame: the streaming path names it
    out = bytearray()
    for chunk in _chunks(data, compression, segment):
        out += chunk
        if len(out) > limit:
            raise _bomb(limit, segment)
    return bytes(out)


def _chunks(data: bytes | memoryview, compression: Compression, segment: str) -> Iterator[memoryview]:
    """The decompressed payload, at most ``_CHUNK`` bytes at a time, frame after frame.

    A frame that declares its size must hold exactly that: one that holds more
    is refused as soon as it passes it.
    """
    view = memoryview(data)
    if compression is Compression.NONE:
        for pos in range(0, len(view), _CHUNK):
            yield view[pos : pos + _CHUNK]
        return
    for frame in frames(view, compression, segment):
        if frame.skippable:
            continue
        size = 0
        source = view[frame.start : frame.end]
        decoded = _zstd_frame(source, segment) if compression is Compression.ZSTD else _lz4_frame(source, segment)
        for chunk in decoded:
            size += len(chunk)
            if frame.declared is not None and size > frame.declared:
                raise _lying(frame, size, segment)
            yield chunk
        if frame.declared is not None and size != frame.declared:
            raise _lying(frame, size, segment)


def _lying(frame: Frame, size: int, segment: str) -> DecompressionError:
    return DecompressionError(f"frame {frame.index} declares {frame.declared} decompressed bytes but holds "
                              f"{'more' if size > (frame.declared or 0) else size}", segment=segment, offset=32 + frame.start)


def _zstd_frame(source: memoryview, segment: str) -> Iterator[memoryview]:
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=False)
    while True:
        try:
            chunk = reader.read(_CHUNK)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"corrupt zstd payload: {exc}", segment=segment, offset=32) from None
        if not chunk:
            return
        yield memoryview(chunk)


def _lz4_frame(source: memoryview, segment: str) -> Iterator[memoryview]:
    """The frame's output chunk by chunk, its input fed a slice at a time.

    The decompressor copies the input it has not consumed on every call: fed the whole frame, a long one
    cost a copy of what remained per chunk of output.
    """
    decompressor = lz4.frame.LZ4FrameDecompressor()
    fed, stalled = 0, False
    try:
        while not decompressor.eof:
            # A call capped at max_length leaves needs_input False even when what it was fed is all decoded, so a
            # call that gave nothing is followed by more input, and only input run out means the frame is cut short.
            if decompressor.needs_input or stalled:
                feed = source[fed : fed + _LZ4_INPUT]
                if not feed:
                    raise DecompressionError("LZ4 frame is truncated", segment=segment, offset=32)
            else:
                feed = source[:0]
            fed += len(feed)
            chunk = decompressor.decompress(feed, max_length=_CHUNK)
            stalled = not chunk
            if chunk:
                yield memoryview(chunk)
    except RuntimeError as exc:
        raise DecompressionError(f"corrupt LZ4 payload: {exc}", segment=segment, offset=32) from None
