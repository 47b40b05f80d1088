"""The values a message filter takes from a user, checked one field at a time before any record is read.

Every value comes from a user, a DAG run's conf or a form, so each is type- and size-checked here, and a bad one
raises :class:`FilterError` naming the field to correct: a filter that cannot be read is refused, never widened to
select everything. :class:`~airflow_rbak.repository.message_filter.MessageFilter` is built from these checks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from airflow_rbak.exceptions import ConfigurationError

#: The longest regular expression or routing-key glob taken, in characters.
MAX_PATTERN_CHARS = 1000
#: The longest property value, exchange or header value taken (an AMQP short string holds at most 255 bytes).
MAX_TEXT_CHARS = 1024
#: The most bytes ``body_contains`` may hold.
MAX_BODY_CONTAINS_BYTES = 65536
#: The most header conditions in one filter.
MAX_HEADERS = 32

HeaderWanted = str | int | float | bool | None


class FilterError(ConfigurationError):
    """A filter value is invalid; ``field`` names the one to correct (``body_regex``, ``headers.x-tenant``)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


def epoch_ms(value: Any, name: str) -> int | None:
    """A moment a user gives (a window's end, a range's date) as epoch milliseconds: an int, an integral float, a
    digit string or an ISO 8601 string (UTC when it names no zone); None and "" stay None. :class:`FilterError`
    naming ``name`` for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dt.datetime):
        return _datetime_ms(value)
    if isinstance(value, str) and len(value) <= 64:
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            return _datetime_ms(dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00")))
        except ValueError:
            pass
    raise FilterError(name, f"expected epoch milliseconds (1732240800000) or ISO 8601 (2024-11-22T02:00:00Z), got {value!r:.60}")


def _datetime_ms(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def checked_text(value: Any, name: str, limit: int) -> str | None:
    """A text field as given, or None; refused when it is not text, is empty (an empty field would select nothing
    a user meant) or is longer than ``limit``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FilterError(name, f"expected text, got {type(value).__name__}")
    if not value:
        raise FilterError(name, "is empty; leave it out to select every value")
    if len(value) > limit:
        raise FilterError(name, f"{len(value)} characters, more than the {limit} taken")
    return value


def checked_headers(value: Any) -> tuple[tuple[str, HeaderWanted], ...]:
    """Header conditions (a mapping or ``(name, value)`` pairs) as pairs sorted by name, so equal filters compare
    equal; each name once, each value text, a number, a boolean or None."""
    pairs = value.items() if isinstance(value, Mapping) else value
    if not isinstance(pairs, tuple | list) and not isinstance(value, Mapping):
        raise FilterError("headers", f"expected an object of header names and values, got {type(value).__name__}")
    found: dict[str, HeaderWanted] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise FilterError("headers", "expected (name, value) pairs")
        name, wanted = pair
        if not isinstance(name, str) or not name or len(name) > 255:
            raise FilterError("headers", f"a header name must be 1-255 characters of text, got {name!r:.60}")
        if wanted is not None and not isinstance(wanted, str | int | float | bool):
            raise FilterError(f"headers.{name}", f"expected text, a number or a boolean, got {type(wanted).__name__}")
        if isinstance(wanted, str) and len(wanted) > MAX_TEXT_CHARS:
            raise FilterError(f"headers.{name}", f"{len(wanted)} characters, more than the {MAX_TEXT_CHARS} taken")
        if name in found:
            raise FilterError(f"headers.{name}", "named twice")
        found[name] = wanted
    if len(found) > MAX_HEADERS:
        raise FilterError("headers", f"{len(found)} conditions, more than the {MAX_HEADERS} taken")
    return tuple(sorted(found.items()))


def checked_body(value: Any) -> bytes | None:
    """``body_contains`` as bytes (a text as its UTF-8 bytes), or None; refused when empty or too long."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, bytes | bytearray):
        raise FilterError("body_contains", f"expected text or bytes, got {type(value).__name__}")
    if not value:
        raise FilterError("body_contains", "is empty; leave it out to select every body")
    if len(value) > MAX_BODY_CONTAINS_BYTES:
        raise FilterError("body_contains", f"{len(value)} bytes, more than the {MAX_BODY_CONTAINS_BYTES} taken")
    return bytes(value)


def hex_bytes(value: Any) -> bytes:
    """``body_contains_hex`` as bytes: the form :meth:`MessageFilter.to_params` writes for a body that is not UTF-8."""
    if not isinstance(value, str) or len(value) > 2 * MAX_BODY_CONTAINS_BYTES:
        raise FilterError("body_contains_hex", "expected hex digits")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise FilterError("body_contains_hex", "expected hex digits (two per byte)") from None
