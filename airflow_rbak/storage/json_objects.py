"""JSON documents read whole from a location, bounded before they are read and before they are parsed.

Anyone who can write to the location can put an object there, so its size is
stat'ed before it is read (:func:`~airflow_rbak.storage.base.read_bounded`),
its decompressed bytes are capped, and its values are counted before it is
parsed (:mod:`airflow_rbak.codec.bounded_json`).
"""

from __future__ import annotations

from typing import Any

from airflow_rbak.codec.bounded_json import JsonLimits, loads_bounded
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.storage.base import Storage, read_bounded


def read_json_text(storage: Storage, key: str, limits: JsonLimits) -> bytes:
    """The object's JSON text, decompressed as its extension says, at most ``limits.max_bytes`` before and after.

    Raises ``ObjectTooLargeError`` (a ``StorageError``, nothing read) or the codec's ``DecompressionBombError``.
    """
    data = read_bounded(storage, key, limits.max_bytes, limits.what)
    return decompress(data, compression_from_key(key), limits.max_bytes, key)


def load_json(storage: Storage, key: str, limits: JsonLimits, *, unique_keys: bool = False) -> Any:
    """The parsed JSON document at ``key``, refused unparsed when over ``limits`` (see :func:`read_json_text`).

    Errors: ``StorageError`` (missing, unreadable, over the byte cap by its stated size) and ``CodecError``
    (``JsonLimitError`` over a cap, ``JsonContentError`` not JSON or a repeated key, a decompression error).
    """
    return loads_bounded(read_json_text(storage, key, limits), key, limits, unique_keys=unique_keys)
