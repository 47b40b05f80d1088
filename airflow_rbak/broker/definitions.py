"""Definitions export: ``GET /api/definitions`` -> ``definitions/definitions.json.<ext>``.

The file holds the API's bytes unchanged (compressed like segments), so the
decompressed file equals what the broker returned. It contains password
hashes: it is never logged, and only counts leave this module. With
``include_users=False`` the users, and the permissions that name them, are
left out (the rest re-serialised, in the broker's order), so the backup holds
no password hash at all.
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

#: What ``include_users=False`` leaves out: the users (with their password hashes) and what names them.
USER_SECTIONS = ("users", "permissions", "topic_permissions")


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


def without_users(raw: bytes) -> bytes:
    """The definitions document without its :data:`USER_SECTIONS`."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BrokerApiError("management API returned definitions that are not valid JSON") from None
    if not isinstance(doc, dict):
        raise BrokerApiError("management API returned definitions that are not a JSON object")
    return orjson.dumps({k: v for k, v in doc.items() if k not in USER_SECTIONS})


def export_definitions(
    client: ManagementClient, storage: Storage, backup_id: str, compression: Compression = Compression.ZSTD,
    *, include_users: bool = True,
) -> DefinitionsBackup:
    """Fetch the broker's definitions and store them compressed (users left out if asked); return their counts."""
    compression = Compression.parse(compression)
    raw = client.definitions_raw()
    if not include_users:
        raw = without_users(raw)
    key = definitions_key(backup_id, compression)
    counts = count_definitions(raw, key)
    if not include_users:
        counts.extensions["users_included"] = False
    storage.put(key, compress(raw, compression, 3))
    return counts
