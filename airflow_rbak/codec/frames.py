"""Where each frame of a zstd or LZ4 payload begins and ends, and the size it declares, from its headers alone.

RFC 8878 defines zstd data as one or more frames, and the LZ4 frame format
allows a sequence of frames, so another writer may well emit several (a
streaming encoder, a writer that flushes per record). Walking the frame and
block headers, without decompressing anything, lets the reader sum what the
frames declare and refuse a bomb before it allocates, and decompress each
frame on its own, holding one chunk at a time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import DecompressionError

_U32 = struct.Struct("<I")
_ZSTD_MAGIC = 0xFD2FB528
_LZ4_MAGIC = 0x184D2204
#: Skippable frames (both formats): a 4-byte size, then that many bytes that decompress to nothing.
_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
#: RFC 8878: no block holds more than 128 KiB of content.
_ZSTD_MAX_BLOCK = 128 * 1024
_ZSTD_MAX_HEADER = 18
_PAYLOAD_AT = 32  # byte offset of the payload in a segment: errors name the segment's byte


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its byte range in the payload, its position, and the decompressed size it declares (None: none)."""

    index: int
    start: int
    end: int
    declared: int | None
    skippable: bool = False


def frames(data: bytes | memoryview, compression: Compression, segment: str) -> Iterator[Frame]:
    """Each frame of a zstd or LZ4 payload in order; a payload of no frame, or a damaged header, is refused."""
    view = memoryview(data)
    walk = _zstd_frame if compression is Compression.ZSTD else _lz4_frame
    name = "zstd" if compression is Compression.ZSTD else "LZ4"
    pos = index = 0
    if not len(view):
        raise DecompressionError(f"payload holds no {name} frame", segment=segment, offset=_PAYLOAD_AT)
    while pos < len(view):
        magic = _u32(view, pos, segment, name)
        if magic in _SKIPPABLE:
            end = pos + 8 + _u32(view, pos + 4, segment, name)
            frame = Frame(index, pos, _inside(view, end, pos, segment, name), 0, skippable=True)
        else:
            frame = walk(view, pos, index, magic, segment)
        yield frame
        pos, index = frame.end, index + 1


def _u32(view: memoryview, pos: int, segment: str, name: str) -> int:
    if len(view) - pos < 4:
        raise DecompressionError(f"{name} frame is truncated", segment=segment, offset=_PAYLOAD_AT + pos)
    return int(_U32.unpack_from(view, pos)[0])


def _inside(view: memoryview, end: int, start: int, segment: str, name: str) -> int:
    if end > len(view):
        raise DecompressionError(f"{name} frame is truncated", segment=segment, offset=_PAYLOAD_AT + start)
    return end


def _zstd_frame(view: memoryview, pos: int, index: int, magic: int, segment: str) -> Frame:
    """A zstd frame (RFC 8878 3.1.1): header, blocks (3-byte headers) up to the last one, an optional checksum."""
    if magic != _ZSTD_MAGIC:
        raise DecompressionError(f"not a zstd frame (frame {index})", segment=segment, offset=_PAYLOAD_AT + pos)
    head = bytes(view[pos : pos + _ZSTD_MAX_HEADER])
    try:
        params = zstandard.get_frame_parameters(head)
        at = pos + zstandard.frame_header_size(head)
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"not a zstd frame (frame {index}): {exc}", segment=segment,
                                 offset=_PAYLOAD_AT + pos) from None
    while True:
        if len(view) - at < 3:
            raise DecompressionError("zstd frame is truncated", segment=segment, offset=_PAYLOAD_AT + at)
        block = view[at] | view[at + 1] << 8 | view[at + 2] << 16
        kind, size = (block >> 1) & 3, block >> 3
        if kind == 3 or size > _ZSTD_MAX_BLOCK:
            raise DecompressionError(f"corrupt zstd block header in frame {index}", segment=segment,
                                     offset=_PAYLOAD_AT + at)
        at = _inside(view, at + 3 + (1 if kind == 1 else size), pos, segment, "zstd")
        if block & 1:
            break
    end = _inside(view, at + (4 if params.has_checksum else 0), pos, segment, "zstd")
    declared = None if params.content_size == zstandard.CONTENTSIZE_UNKNOWN else params.content_size
    return Frame(index, pos, end, declared)


def _lz4_frame(view: memoryview, pos: int, index: int, magic: int, segment: str) -> Frame:
    """An LZ4 frame: magic, FLG, BD, optional content size and dictionary id, header checksum, then blocks
    (4-byte sizes, the top bit marking a stored block) up to a zero end mark, and an optional content checksum."""
    if magic != _LZ4_MAGIC:
        raise DecompressionError(f"not an LZ4 frame (frame {index})", segment=segment, offset=_PAYLOAD_AT + pos)
    if len(view) - pos < 7:
        raise DecompressionError("LZ4 frame is truncated", segment=segment, offset=_PAYLOAD_AT + pos)
    flags = view[pos + 4]
    if flags >> 6 != 1:
        raise DecompressionError(f"LZ4 frame {index} has version {flags >> 6}, not 1", segment=segment,
                                 offset=_PAYLOAD_AT + pos + 4)
    block_checksum, has_size, content_checksum, has_dict = flags & 0x10, flags & 0x08, flags & 0x04, flags & 0x01
    at = pos + 6
    declared = None
    if has_size:
        _inside(view, at + 8, pos, segment, "LZ4")
        declared = int.from_bytes(view[at : at + 8], "little")
        at += 8
    at += (4 if has_dict else 0) + 1  # the dictionary id, then the header checksum byte
    while True:
        size = _u32(view, at, segment, "LZ4")
        at += 4
        if not size:
            break
        at = _inside(view, at + (size & 0x7FFFFFFF) + (4 if block_checksum else 0), pos, segment, "LZ4")
    end = _inside(view, at + (4 if content_checksum else 0), pos, segment, "LZ4")
    return Frame(index, pos, end, declared)
