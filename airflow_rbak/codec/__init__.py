"""The RBAK codec: records, segments, manifests and storage keys.

Pure: it imports neither Airflow nor Spark, so Spark jobs, operators and the
``rbak`` command line all share it.
"""

from __future__ import annotations

from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import (
    BadMagicError,
    ChecksumMismatchError,
    CodecError,
    DecompressionBombError,
    DecompressionError,
    ManifestError,
    RecordCountMismatchError,
    RecordDecodeError,
    RecordFramingError,
    SegmentTooShortError,
    UnsupportedCompressionError,
    UnsupportedVersionError,
)
from airflow_rbak.codec.headers import HeaderValue
from airflow_rbak.codec.manifest import BackupManifest, DefinitionsBackup, QueueBackup, SegmentMetadata
from airflow_rbak.codec.records import BackupProperties, BackupRecord, decode_record, encode_record
from airflow_rbak.codec.segment import (
    DecodedSegment,
    EncodedSegment,
    SegmentHeader,
    decode_segment,
    encode_payload,
    encode_segment,
    iter_records,
    read_header,
)
from airflow_rbak.codec.writer import SegmentWriter

__all__ = [
    "BackupManifest", "BackupProperties", "BackupRecord", "BadMagicError", "ChecksumMismatchError", "CodecError",
    "Compression", "DecodedSegment", "DecompressionBombError", "DecompressionError", "DefinitionsBackup",
    "EncodedSegment", "HeaderValue", "ManifestError", "QueueBackup", "RecordCountMismatchError", "RecordDecodeError",
    "RecordFramingError", "SegmentHeader", "SegmentMetadata", "SegmentTooShortError", "SegmentWriter",
    "UnsupportedCompressionError", "UnsupportedVersionError", "decode_record", "decode_segment", "encode_payload",
    "encode_record", "encode_segment", "iter_records", "read_header",
]
