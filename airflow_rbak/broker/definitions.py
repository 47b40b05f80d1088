"""Definitions export: ``GET /api/definitions`` -> ``definitions/definitions.json.<ext>``.

The file holds the API's bytes unchanged (compressed like segments), so the
decompressed file equals what the broker returned; with ``include_users=True``
it contains password hashes: it is never logged, and only counts leave this
module. By default (``include_users=False``) the users, and the permissions
that name them, are left out, and every URI with user information in a runtime or global
parameter (federation upstreams, shovels, anything else carrying a URI) has
that user information replaced (the rest re-serialised, in the broker's
order), so the backup holds no password, in any encoding, and no hash.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from airflow_rbak.broker.errors import BrokerApiError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.bounded_json import DEFINITIONS_LIMITS, check_json_bytes
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import definitions_key
from airflow_rbak.codec.manifest import DefinitionsBackup
from airflow_rbak.storage.base import Storage

#: What ``include_users=False`` leaves out: the users (with their password hashes) and what names them.
USER_SECTIONS = ("users", "permissions", "topic_permissions")
#: Sections whose values are free-form, so any string in them may be a URI with credentials.
PARAMETER_SECTIONS = ("parameters", "global_parameters")
#: What replaces the user information (``user:password@``) of such a URI.
REDACTED_USERINFO = "redacted"
# scheme://userinfo@ : the user information is everything up to the last "@" before the host's path.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@")


def count_definitions(raw: bytes, key: str) -> DefinitionsBackup:
    """The manifest's DefinitionsBackup for a definitions document stored at ``key``."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BrokerApiError("management API returned definitions that are not valid JSON") from None
    return DefinitionsBackup.of(key, doc, len(raw))


def without_credentials(raw: bytes) -> bytes:
    """The definitions document without :data:`USER_SECTIONS` and with parameter URIs' user information redacted.

    The one place that decides what a credential-free export is: the backup with ``include_users=False``
    and every rollback snapshot store this.
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BrokerApiError("management API returned definitions that are not valid JSON") from None
    if not isinstance(doc, dict):
        raise BrokerApiError("management API returned definitions that are not a JSON object")
    return orjson.dumps({k: redact_uris(v) if k in PARAMETER_SECTIONS else v for k, v in doc.items() if k not in USER_SECTIONS})


def redact_uris(value: Any) -> Any:
    """``value`` with the user information of every URI in it (at any depth) replaced by :data:`REDACTED_USERINFO`.

    The whole user information goes, not the password as typed: a URI may carry it percent-encoded, or
    a user name that is itself a secret (an access key).
    """
    if isinstance(value, str):
        return _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED_USERINFO}@", value)
    if isinstance(value, list):
        return [redact_uris(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_uris(v) for k, v in value.items()}
    return value


def export_definitions(
    client: ManagementClient, storage: Storage, backup_id: str, compression: Compression = Compression.ZSTD,
    *, include_users: bool = False,
) -> DefinitionsBackup:
    """Fetch the broker's definitions and store them compressed (users left out if asked); return their counts."""
    compression = Compression.parse(compression)
    key = definitions_key(backup_id, compression)
    raw = client.definitions_raw()
    check_json_bytes(raw, key, DEFINITIONS_LIMITS)  # what no restore would read is refused now, not at restore
    if not include_users:
        raw = without_credentials(raw)
    counts = count_definitions(raw, key)
    if not include_users:
        counts.extensions["users_included"] = False
    storage.put(key, compress(raw, compression, 3))
    return counts
