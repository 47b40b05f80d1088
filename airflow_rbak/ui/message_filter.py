"""The messages page's filter, until ``repository.message_filter`` (issue 43's search) lands: the same names and shape.

``MessageFilter.from_params`` takes the form's fields as text, refuses a bad one with
:class:`MessageFilterError` naming the field, and ``matches`` tests one record. A body regex is bounded: at most
:data:`MAX_PATTERN` characters, no nested repetition (the shape that runs away), and applied to at most
:data:`BODY_SCAN_BYTES` of a body.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from airflow_rbak.codec import BackupRecord
from airflow_rbak.exceptions import RbakError

MAX_PATTERN = 200
BODY_SCAN_BYTES = 1024 * 1024
#: A repeated group that itself repeats (``(a+)+``, ``(a|a)*``): the shape of a pattern that backtracks forever.
_NESTED_REPEAT = re.compile(r"\([^)]*[+*}][^)]*\)\s*[+*{]")
FIELDS = ("after", "before", "message_id", "correlation_id", "routing_key", "exchange", "header", "content_type",
          "body_contains", "body_regex")


class MessageFilterError(RbakError, ValueError):
    """A filter field that cannot be used as given; the message names the field."""


def _time(name: str, text: str) -> int:
    """Milliseconds since the epoch, from milliseconds or an ISO 8601 time (UTC unless it says otherwise)."""
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise MessageFilterError(f"{name}: {text[:40]!r} is not a time (2026-11-27T02:00:00Z, or milliseconds)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class MessageFilter:
    """Which messages to show: every field given must match (an AND); none given matches everything."""

    after: int | None = None
    before: int | None = None
    message_id: str | None = None
    correlation_id: str | None = None
    routing_key: str | None = None
    exchange: str | None = None
    header: tuple[str, str] | None = None
    content_type: str | None = None
    body_contains: bytes | None = None
    body_regex: re.Pattern[bytes] | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> MessageFilter:
        """A filter from text fields (a form, a query string); refuses unknown fields and bad values by name."""
        unknown = sorted(set(params) - set(FIELDS))
        if unknown:
            raise MessageFilterError(f"{unknown[0]}: not a filter (filters: {', '.join(FIELDS)})")
        text = {k: str(v) for k, v in params.items() if v is not None and str(v) != ""}
        header = None
        if "header" in text:
            name, sep, value = text["header"].partition("=")
            if not sep or not name:
                raise MessageFilterError(f"header: {text['header'][:40]!r} is not name=value")
            header = (name, value)
        regex = None
        if "body_regex" in text:
            pattern = text["body_regex"]
            if len(pattern) > MAX_PATTERN or _NESTED_REPEAT.search(pattern):
                raise MessageFilterError(f"body_regex: refused: at most {MAX_PATTERN} characters and no repeated group "
                                         "that repeats (such as (a+)+), which could run for ever")
            try:
                regex = re.compile(pattern.encode())
            except re.error as exc:
                raise MessageFilterError(f"body_regex: not a regular expression ({exc})") from None
        return cls(after=_time("after", text["after"]) if "after" in text else None,
                   before=_time("before", text["before"]) if "before" in text else None,
                   message_id=text.get("message_id"), correlation_id=text.get("correlation_id"),
                   routing_key=text.get("routing_key"), exchange=text.get("exchange"), header=header,
                   content_type=text.get("content_type"),
                   body_contains=text["body_contains"].encode() if "body_contains" in text else None, body_regex=regex)

    def matches(self, record: BackupRecord) -> bool:
        """Whether ``record`` passes every field given."""
        p = record.properties
        stamp = record.backed_up_at
        return ((self.after is None or stamp >= self.after) and (self.before is None or stamp < self.before)
                and (self.message_id is None or p.message_id == self.message_id)
                and (self.correlation_id is None or p.correlation_id == self.correlation_id)
                and (self.routing_key is None or fnmatch.fnmatchcase(record.routing_key, self.routing_key))
                and (self.exchange is None or record.exchange == self.exchange)
                and (self.content_type is None or p.content_type == self.content_type)
                and (self.header is None or self._header(record))
                and (self.body_contains is None or self.body_contains in record.body)
                and (self.body_regex is None or self.body_regex.search(record.body[:BODY_SCAN_BYTES]) is not None))

    def _header(self, record: BackupRecord) -> bool:
        assert self.header is not None
        name, value = self.header
        return any(k == name and _scalar(v.to_json()) == value for k, v in record.headers)

    def describe(self) -> str:
        """The filter in words, for the page and the API."""
        said = [f"{k}={v!r}" for k, v in ((f, getattr(self, f)) for f in FIELDS if f != "body_regex") if v is not None]
        if self.body_regex is not None:
            said.append(f"body_regex={self.body_regex.pattern.decode()!r}")
        return ", ".join(said) or "all messages"


def _scalar(value: Any) -> str:
    """A header value as text: a typed scalar (``{"Long": 3}``, ``{"ShortString": "a"}``) by its value."""
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        if not isinstance(inner, dict | list):
            return str(inner).lower() if isinstance(inner, bool) else str(inner)
    return str(value)
