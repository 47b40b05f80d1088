"""Definitions export: ``GET /api/definitions`` -> ``definitions/definitions.json.<ext>``.

The file holds the API's bytes unchanged (compressed like segments), so the
decompressed file equals what the broker returned. It contains password
hashes: it is never logged, and only counts leave this module.
"""

from __future__ import annotations

import orjson

from airflow_rbak.broker.errors import BrokerApiError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import definitions_key
from airflow_rbak.codec.manifest import DefinitionsBackup
from airflow_rbak.storage.base import Storage


def count_definitions(raw: bytes, key: str) -> DefinitionsBackup:
    """The manifest's DefinitionsBackup for a definitions document stored at ``key``."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BrokerApiError("management API returned definitions that are not valid JSON") from None
    return DefinitionsBackup(
        key=key,
        vhost_count=len(doc.get("vhosts", [])),
        queue_count=len(doc.get("queues", [])),
        exchange_count=len(doc.get("exchanges", [])),
        user_count=len(doc.get("users", [])),
        size_bytes=len(raw),
    )


def export_definitions(
    client: ManagementClient, storage: Storage, backup_id: str, compression: Compression = Compression.ZSTD
) -> DefinitionsBackup:
    """Fetch the broker's definitions and store them compressed; return their counts."""
    compression = Compression.parse(compression)
    raw = client.definitions_raw()
    key = definitions_key(backup_id, compression)
    counts = count_definitions(raw, key)
    storage.put(key, compress(raw, compression, 3))
    return counts
