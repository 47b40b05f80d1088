"""Typed errors of the codec: each names the segment and says, in one line, what is wrong."""

from __future__ import annotations

from airflow_rbak.exceptions import RbakError


class CodecError(RbakError):
    """A segment, record or manifest could not be read or written.

    ``segment`` is the key or file name the caller gave (``<segment>`` when
    none was given); ``offset`` is the byte offset of the defect when known
    (in the file, or in the decompressed payload for record errors).
    """

    def __init__(self, reason: str, *, segment: str = "<segment>", offset: int | None = None) -> None:
        self.reason = reason
        self.segment = segment
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{segment}: {reason}{where}")


class SegmentTooShortError(CodecError):
    """Fewer bytes than a header and a footer: the file is truncated or not a segment."""


class BadMagicError(CodecError):
    """The start magic ``RBAK`` or the end magic ``KABR`` is missing."""


class ChecksumMismatchError(CodecError):
    """The CRC-32 in the footer (or a SHA-256 in a manifest) does not match the bytes."""


class UnsupportedVersionError(CodecError):
    """The header names a format version this reader does not know."""


class UnsupportedCompressionError(CodecError):
    """The header names a compression algorithm this reader does not know."""


class DecompressionError(CodecError):
    """The payload is not a valid stream of the named compression."""


class DecompressionBombError(CodecError):
    """The payload would decompress past the reader's cap; refused before allocating."""


class RecordFramingError(CodecError):
    """A record's length prefix runs past the payload, or bytes trail the last record."""


class RecordCountMismatchError(CodecError):
    """The header's record count disagrees with the records in the payload."""


class RecordDecodeError(CodecError):
    """A record is not valid JSON or not a valid BackupRecord."""


class ManifestError(CodecError):
    """A manifest is not valid JSON or does not follow the manifest schema."""


class RecordTooLargeError(CodecError):
    """A record alone would make a segment larger than readers accept by default (a message past 128 MiB)."""
