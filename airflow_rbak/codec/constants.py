"""Constants of the RBAK segment format (spec 000) and its storage layout (spec 001)."""

from __future__ import annotations

import enum

MAGIC = b"RBAK"
END_MAGIC = b"KABR"
FORMAT_VERSION = 1
HEADER_SIZE = 32
FOOTER_SIZE = 8
LENGTH_PREFIX_SIZE = 4

DEFAULT_ZSTD_LEVEL = 3
#: A record holds at most one RabbitMQ message (512 MiB at most); its JSON
#: body can be four times that, so the decode cap sits above it.
DEFAULT_MAX_DECOMPRESSED_BYTES = 2 * 1024**3
DEFAULT_SEGMENT_MAX_BYTES = 128 * 1024**2
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
