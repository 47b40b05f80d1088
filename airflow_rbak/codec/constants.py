"""Constants of the RBAK v1 segment format and its storage layout (docs/format.md)."""

from __future__ import annotations

import enum

MAGIC = b"RBAK"
END_MAGIC = b"KABR"
FORMAT_VERSION = 1
HEADER_SIZE = 32
FOOTER_SIZE = 8
LENGTH_PREFIX_SIZE = 4

DEFAULT_ZSTD_LEVEL = 3
DEFAULT_SEGMENT_MAX_BYTES = 128 * 1024**2
#: RabbitMQ's default ``max_message_size`` (3.8 and later): the largest message a record holds at the default limits.
DEFAULT_MAX_MESSAGE_BYTES = 128 * 1024**2
#: A record's JSON: the body as an array of numbers takes at most 4 bytes per body byte (``255,``), plus
#: properties and headers, which fit one content-header frame and grow a few times in JSON.
DEFAULT_MAX_RECORD_BYTES = 4 * DEFAULT_MAX_MESSAGE_BYTES + 1024**2
#: The largest ``segment_max_bytes`` a writer accepts: what our readers allow by default leaves room for it and one
#: record more, so no segment we write is refused by a reader at its default cap.
MAX_SEGMENT_MAX_BYTES = DEFAULT_SEGMENT_MAX_BYTES
#: What a segment may legitimately hold: the writer seals once the payload reaches ``segment_max_bytes``, so
#: a payload is at most that plus one record (641 MiB). Readers refuse more unless given a larger cap, and
#: the writer never writes more: it seals early before a record that would pass it, and refuses a record
#: that alone would.
DEFAULT_MAX_DECOMPRESSED_BYTES = MAX_SEGMENT_MAX_BYTES + DEFAULT_MAX_RECORD_BYTES
DEFAULT_SEGMENT_MAX_INTERVAL_MS = 60 * 60 * 1000


class Compression(enum.IntEnum):
    """The header's compression byte, with the file extension each one uses."""

    NONE = 0
    ZSTD = 1
    LZ4 = 2

    @property
    def extension(self) -> str:
        """File extension including the dot, or ``""`` for no compression."""
        return {Compression.NONE: "", Compression.ZSTD: ".zst", Compression.LZ4: ".lz4"}[self]

    @classmethod
    def parse(cls, name: str | int | Compression) -> Compression:
        """Accept ``none``/``zstd``/``lz4`` (any case), the byte value, or a member."""
        from airflow_rbak.exceptions import ConfigurationError

        if isinstance(name, Compression):
            return name
        if isinstance(name, int):
            try:
                return cls(name)
            except ValueError:
                raise ConfigurationError(f"unknown compression byte {name}; expected 0, 1 or 2") from None
        key = str(name).strip().lower()
        if key in ("none", "", "uncompressed"):
            return cls.NONE
        if key in ("zstd", "zst"):
            return cls.ZSTD
        if key == "lz4":
            return cls.LZ4
        raise ConfigurationError(f"unknown compression {name!r}; expected one of none, zstd, lz4")
