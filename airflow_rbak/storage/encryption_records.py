"""What an encrypted location records about its own encryption: its marker (with its identity) and key retirements.

- The **marker** (:data:`MARKER_KEY`, plain JSON at the location's root) says the location is encrypted and, since
  issue 51, carries ``location_id``: 32 random hex digits created with the marker, which every object's associated
  data names (``storage/encrypted.py``), so an object sealed for one location fails in another that shares its keys.
  A marker without one (written before) leaves the location unbound: read and written as before.
- A **retirement record** (:func:`retirement_key`, an object sealed like every other) lists, for one retired key id,
  each object the key had sealed when it was retired, with the SHA-256 of its stored envelope: all that key may
  still open there (``storage/key_retirement.py`` writes it).

Both are read from a location, so both are bounded and checked here; callers turn a ``ValueError`` into their own
typed error naming the location.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from airflow_rbak.codec.bounded_json import JsonLimits, loads_bounded
from airflow_rbak.codec.layout import LOCATION_STATE_PREFIX

#: The plain marker object at the root of an encrypted location (hidden from keyed listings).
MARKER_KEY = "rbak-encryption.json"
MARKER_FORMAT = "rbak-encryption-v1"
MAX_MARKER_BYTES = 64 * 1024
LOCATION_ID = re.compile(r"[0-9a-f]{32}")
RETIREMENT_FORMAT = "rbak-key-retirement-v1"
#: A retirement record's caps: about 150 bytes an object, so some 1.5 million objects.
RETIREMENT_LIMITS = JsonLimits(max_bytes=256 * 1024**2, max_values=4_000_000, what="a key retirement record")
_NOTE = "every other object here is sealed; see docs/operations.md, Encryption at rest"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def new_marker() -> tuple[bytes, str]:
    """A marker for a new location, and the random identity it holds."""
    location_id = os.urandom(16).hex()
    doc = {"format": MARKER_FORMAT, "cipher": "AES-256-GCM", "location_id": location_id, "note": _NOTE}
    return json.dumps(doc, sort_keys=True).encode(), location_id


def marker_identity(data: bytes) -> str | None:
    """The ``location_id`` a marker holds; None for a marker written before identities. ``ValueError`` saying why
    when the marker is not one (over the cap, not a JSON object of our format, a malformed identity)."""
    if len(data) > MAX_MARKER_BYTES:
        raise ValueError(f"{len(data)} bytes, over the {MAX_MARKER_BYTES} a marker may hold")
    try:
        doc = json.loads(bytes(data))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT:
        raise ValueError(f"not a {MARKER_FORMAT} marker")
    location_id = doc.get("location_id")
    if location_id is None:
        return None
    if not isinstance(location_id, str) or not LOCATION_ID.fullmatch(location_id):
        raise ValueError("its location_id is not 32 hex digits")
    return location_id


def retirement_key(key_id: str) -> str:
    """Where the retirement record of ``key_id`` is kept (location state: no backup is listed for it)."""
    return f"{LOCATION_STATE_PREFIX}retired-keys/{key_id}.json"


def retirement_record(key_id: str, location_id: str, retired_at_ms: int, pins: dict[str, str]) -> bytes:
    """The record's JSON: the objects ``key_id`` had sealed, each key with the SHA-256 of its stored envelope."""
    return json.dumps({"format": RETIREMENT_FORMAT, "key_id": key_id, "location_id": location_id,
                       "retired_at": retired_at_ms, "objects": dict(sorted(pins.items()))}, sort_keys=True).encode()


def retirement_pins(data: bytes, key_id: str, location_id: str | None, name: str) -> dict[str, str]:
    """The pins of a record read back, checked to be ``key_id``'s for this location; ``ValueError`` otherwise."""
    doc: Any = loads_bounded(data, name, RETIREMENT_LIMITS, unique_keys=True)
    if not isinstance(doc, dict) or doc.get("format") != RETIREMENT_FORMAT:
        raise ValueError(f"not a {RETIREMENT_FORMAT} record")
    if doc.get("key_id") != key_id or doc.get("location_id") != location_id:
        raise ValueError(f"it is the record of key {doc.get('key_id')!r} at location {doc.get('location_id')!r}")
    pins = doc.get("objects")
    if not isinstance(pins, dict) or not all(isinstance(v, str) and _SHA256.fullmatch(v) for v in pins.values()):
        raise ValueError("its objects are not a map of keys to SHA-256 digests")
    return pins
