"""Bad input gets a typed error naming the segment: never another exception, never a big allocation."""

from __future__ import annotations

import pytest

from airflow_rbak.codec import (
    BadMagicError,
    ChecksumMismatchError,
    CodecError,
    Compression,
    DecompressionBombError,
    RecordCountMismatchError,
    RecordDecodeError,
    RecordFramingError,
    SegmentTooShortError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
    decode_segment,
)
from tests.codec.hostile import named_cases, seal, small_segment

EXPECTED = {
    "wrong_magic": BadMagicError,
    "version_2": UnsupportedVersionError,
    "compression_7": UnsupportedCompressionError,
    "length_prefix_ffffffff": RecordFramingError,
    "zstd_declares_64_gib": DecompressionBombError,
    "record_count_2_pow_63": RecordCountMismatchError,
    "truncated_footer": BadMagicError,
    "empty_file": SegmentTooShortError,
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_named_defect_raises_its_typed_error_naming_the_segment(case):
    with pytest.raises(EXPECTED[case]) as info:
        decode_segment(named_cases()[case], name=f"bad/{case}")

    assert str(info.value).startswith(f"bad/{case}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
def test_truncation_at_every_offset_is_a_typed_error(compression):
    data = small_segment(compression)
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            decode_segment(data[:cut], name="cut")


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
def test_every_single_bit_flip_is_a_typed_error(compression):
    data = small_segment(compression)
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CodecError):
            decode_segment(bytes(flipped), name="flip")


def test_a_payload_flip_is_caught_by_the_crc_with_the_footer_offset():
    data = bytearray(small_segment(Compression.NONE))
    data[40] ^= 0x01

    with pytest.raises(ChecksumMismatchError) as info:
        decode_segment(bytes(data), name="q/segment-0001")

    assert info.value.offset == len(data) - 8
    assert "CRC-32 mismatch" in str(info.value)


def test_a_record_that_is_not_json_names_the_record_and_its_offset():
    payload = b"\x03\x00\x00\x00{x}"

    with pytest.raises(RecordDecodeError) as info:
        decode_segment(seal(1, 0, 1, payload), name="s")

    assert "record 0" in str(info.value) and info.value.offset == 4


def test_a_header_count_that_disagrees_with_the_records_is_refused():
    good = small_segment(Compression.NONE)

    with pytest.raises(RecordCountMismatchError):
        decode_segment(seal(1, 0, 2, good[32:-8]), name="s")
    with pytest.raises(RecordCountMismatchError):
        decode_segment(seal(1, 0, 4, good[32:-8]), name="s")


def test_a_bomb_without_a_declared_size_stops_at_the_cap():
    import zstandard

    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * (8 << 20))

    with pytest.raises(DecompressionBombError):
        decode_segment(seal(1, 1, 1, bomb), name="s", max_decompressed_bytes=1 << 20)
