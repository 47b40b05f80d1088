"""Which stored messages a user asked for: one frozen filter, validated once, that tests a record.

The same selection serves ``rbak messages``, ``rbak search`` (in process and on Spark), the backups view and the
selective restore, so each names it the same way (:meth:`MessageFilter.describe`) and passes it on in the same form
(:meth:`MessageFilter.to_params`, read back by :meth:`MessageFilter.from_params`).

What each field tests (every field set must hold; an unset field selects everything):

- ``since`` / ``until``: the record's ``backed_up_at``, epoch milliseconds, both ends inclusive, the time the
  backup took the message (the restore's time window reads the same field). The AMQP ``timestamp`` property is
  the publisher's and is often absent, so it is not what a window means.
- ``message_id``, ``correlation_id``, ``exchange``, ``content_type``: equal to the property (or the exchange the
  message was published to), case-sensitive.
- ``routing_key``: a shell glob (``orders.*``, ``eu-?``), case-sensitive, over the whole routing key.
- ``headers``: each name's value equal to the given one, where a header of that name is present on the record. A
  text value is compared with the header as text (``5`` matches a Long 5, ``true`` a Bool true, a Bytes header its
  UTF-8 text); a number or a boolean with the header's value of that type. Tables and arrays never match.
- ``body_contains``: the body holds these bytes (a text is taken as its UTF-8 bytes).
- ``body_regex``: a regular expression (the ``regex`` package's syntax, a superset of Python's ``re``) found in the
  body read as UTF-8 (bytes that are not UTF-8 read as U+FFFD).

Every value is type- and size-checked as the filter is built (``filter_values.py``), and a bad one raises
:class:`FilterError` naming the field; ``body_regex`` is searched with a bound in time per body (``body_regex.py``),
so a pattern that backtracks too much raises :class:`RegexTimeoutError` rather than hiding messages.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_rbak.codec.headers import BOOL, BYTES, DOUBLE, FLOAT, LONG, LONG_STRING, SHORT, SHORT_STRING, TIMESTAMP, VOID
from airflow_rbak.codec.record_stream import KEEP_ALL, Prefilter
from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.display import printable
from airflow_rbak.repository.body_regex import RegexTimeoutError, regex_test, required_texts
from airflow_rbak.repository.filter_values import (
    MAX_PATTERN_CHARS,
    MAX_TEXT_CHARS,
    FilterError,
    HeaderWanted,
    checked_body,
    checked_headers,
    checked_text,
    epoch_ms,
    hex_bytes,
)

#: The filter's errors and its reading of a moment are imported from here by every user of a filter (the restore's
#: window among them), so they stay importable from the module named for the filter.
__all__ = ["PARAM_NAMES", "FilterError", "MessageFilter", "RegexTimeoutError", "epoch_ms", "header_text"]

_TEXT_FIELDS = ("message_id", "correlation_id", "exchange", "content_type")
#: Text that every JSON writer writes as it is: printable ASCII but the quote, the backslash and the slash.
_UNESCAPED = re.compile(r"[ !#-.0-\[\]-~]+")


@dataclass(frozen=True)
class MessageFilter:
    """A selection of stored messages; every field that is set must hold (see the module's docstring).

    ``headers`` may be given as a mapping; it is kept as a tuple of ``(name, value)`` pairs sorted by name, so
    the filter is hashable and two equal selections compare equal.
    """

    since: int | None = None
    until: int | None = None
    message_id: str | None = None
    correlation_id: str | None = None
    routing_key: str | None = None
    exchange: str | None = None
    headers: tuple[tuple[str, HeaderWanted], ...] = ()
    content_type: str | None = None
    body_contains: bytes | None = None
    body_regex: str | None = None
    _tests: tuple[Callable[[BackupRecord], bool], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "since", epoch_ms(self.since, "since"))
        set_(self, "until", epoch_ms(self.until, "until"))
        if self.since is not None and self.until is not None and self.since > self.until:
            raise FilterError("since", f"{_iso(self.since)} is after until ({_iso(self.until)})")
        for name in _TEXT_FIELDS:
            set_(self, name, checked_text(getattr(self, name), name, MAX_TEXT_CHARS))
        set_(self, "routing_key", checked_text(self.routing_key, "routing_key", MAX_PATTERN_CHARS))
        set_(self, "headers", checked_headers(self.headers))
        set_(self, "body_contains", checked_body(self.body_contains))
        set_(self, "body_regex", checked_text(self.body_regex, "body_regex", MAX_PATTERN_CHARS))
        set_(self, "_tests", self._build_tests())

    # -- reading untrusted input ------------------------------------------------------------------------------

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> MessageFilter:
        """A filter from a mapping of field names (a DAG run's conf, a form, JSON); empty values are unset.

        Unknown names are refused, so a misspelt filter never widens the selection to everything.
        ``body_contains_hex`` gives the body's bytes as hex (what :meth:`to_params` writes for bytes that are
        not UTF-8).
        """
        if params is None:
            return cls()
        if not isinstance(params, Mapping):
            raise FilterError("filter", f"expected an object of filter fields, got {type(params).__name__}")
        known = {*PARAM_NAMES, "body_contains_hex"}
        unknown = sorted(str(k)[:60] for k in params if k not in known)
        if unknown:
            raise FilterError(unknown[0], f"unknown filter field; known: {', '.join(PARAM_NAMES)}")
        values = {k: v for k, v in params.items() if v is not None and v != "" and v != {}}
        hex_body = values.pop("body_contains_hex", None)
        if hex_body is not None:
            if "body_contains" in values:
                raise FilterError("body_contains_hex", "give body_contains or body_contains_hex, not both")
            values["body_contains"] = hex_bytes(hex_body)
        return cls(**values)

    def to_params(self) -> dict[str, Any]:
        """The set fields as JSON values, which :meth:`from_params` reads back to an equal filter."""
        out: dict[str, Any] = {}
        for name in PARAM_NAMES:
            value = getattr(self, name)
            if value is None or value == ():
                continue
            if name == "headers":
                out[name] = dict(value)
            elif name == "body_contains":
                try:
                    out[name] = value.decode("utf-8")
                except UnicodeDecodeError:
                    out["body_contains_hex"] = value.hex()
            else:
                out[name] = value
        return out

    # -- testing records --------------------------------------------------------------------------------------

    @property
    def selects_all(self) -> bool:
        """True when no field is set: every record matches."""
        return not self._tests

    def needles(self) -> tuple[bytes, ...]:
        """Byte strings each of which a stored record's JSON must hold to match: the quoted value of each exact text
        field (``"order-4711"``) made only of characters no JSON writer escapes.

        A reader skips parsing a segment's records when its payload lacks one: a search by ``message_id`` then
        costs little more than decompressing. Values with other characters give none (a writer may escape
        ``/``, ``\u00e9`` for ``é``), so a needle never hides a match.
        """
        values = (self.message_id, self.correlation_id, self.exchange, self.content_type)
        return tuple(f'"{v}"'.encode() for v in values if v is not None and _UNESCAPED.fullmatch(v))

    def matches(self, record: BackupRecord) -> bool:
        """True when the record meets every set field; :class:`RegexTimeoutError` when ``body_regex`` overruns."""
        for test in self._tests:
            if not test(record):
                return False
        return True

    def select(self, pairs: list[tuple[int, BackupRecord]]) -> list[tuple[int, BackupRecord]]:
        """The (index, record) pairs whose record meets every set field, in order: :meth:`matches` over a run of
        records, each test narrowing what the next one looks at."""
        for test in self._tests:
            pairs = [pair for pair in pairs if test(pair[1])]
        return pairs

    def prefilter(self) -> Prefilter:
        """What a record must have to match that the reader can test as it parses it, before building it: the
        window, bytes its body must hold (``body_contains``, else a text every match of ``body_regex`` holds), a
        text its routing key must hold (the glob's longest plain run) and its first header condition."""
        texts = required_texts(self.body_regex) if self.body_regex is not None and self.body_contains is None else ()
        needle = self.body_contains or (max(texts, key=len).encode("utf-8") if texts else b"")
        key_runs = [] if self.routing_key is None or "[" in self.routing_key else re.split(r"[*?]", self.routing_key)
        name, wanted = self.headers[0] if self.headers else ("", None)
        return Prefilter(needle, KEEP_ALL.since if self.since is None else max(self.since, KEEP_ALL.since),
                         KEEP_ALL.until if self.until is None else min(self.until, KEEP_ALL.until),
                         max(key_runs, key=len, default=""), name, wanted if isinstance(wanted, str) else None)

    def _build_tests(self) -> tuple[Callable[[BackupRecord], bool], ...]:
        """One small test per set field, the cheapest first."""
        tests: list[Callable[[BackupRecord], bool]] = []
        since, until = self.since, self.until
        if since is not None:
            tests.append(lambda r: r.backed_up_at >= since)
        if until is not None:
            tests.append(lambda r: r.backed_up_at <= until)
        for name in ("message_id", "correlation_id", "content_type"):
            wanted = getattr(self, name)
            if wanted is not None:
                tests.append(_property_test(name, wanted))
        if self.exchange is not None:
            exchange = self.exchange
            tests.append(lambda r: r.exchange == exchange)
        if self.routing_key is not None:
            # fnmatch's translation uses atomic groups for each '*', so a glob cannot backtrack without bound
            glob = re.compile(fnmatch.translate(self.routing_key))
            tests.append(lambda r: glob.match(r.routing_key) is not None)
        for name, wanted in self.headers:
            tests.append(_header_test(name, wanted))
        if self.body_contains is not None:
            needle = self.body_contains
            tests.append(lambda r: needle in r.body)
        if self.body_regex is not None:
            tests.append(regex_test(self.body_regex))
        return tuple(tests)

    # -- saying what it selects -------------------------------------------------------------------------------

    def describe(self) -> str:
        """The selection in one line of plain text, for plans, approval requests, reports and the view.

        ``every message`` when nothing is set; otherwise the window, then the other conditions joined by ``and``
        (``messages backed up from … to … with message_id 'm-1' and body containing '4711'``), each value quoted and
        with control characters shown escaped (:func:`~airflow_rbak.display.printable`), so a value cannot break
        the line or the document around it.
        """
        window = ""
        if self.since is not None and self.until is not None:
            window = f" backed up from {_iso(self.since)} to {_iso(self.until)}"
        elif self.since is not None:
            window = f" backed up at or after {_iso(self.since)}"
        elif self.until is not None:
            window = f" backed up at or before {_iso(self.until)}"
        parts = [f"{name} {_quoted(getattr(self, name))}" for name in ("message_id", "correlation_id")
                 if getattr(self, name) is not None]
        if self.routing_key is not None:
            parts.append(f"routing key like {_quoted(self.routing_key)}")
        if self.exchange is not None:
            parts.append(f"exchange {_quoted(self.exchange)}")
        parts.extend(f"header {_quoted(name)} = {_quoted(value)}" for name, value in self.headers)
        if self.content_type is not None:
            parts.append(f"content type {_quoted(self.content_type)}")
        if self.body_contains is not None:
            parts.append(f"body containing {_quoted_bytes(self.body_contains)}")
        if self.body_regex is not None:
            parts.append(f"body matching /{printable(self.body_regex)}/")
        if not window and not parts:
            return "every message"
        return "messages" + window + (" with " + " and ".join(parts) if parts else "")


#: The filter's fields, in the order the docs and the forms list them.
PARAM_NAMES: tuple[str, ...] = tuple(f.name for f in fields(MessageFilter) if f.init)


def _property_test(name: str, wanted: str) -> Callable[[BackupRecord], bool]:
    def test(record: BackupRecord) -> bool:
        return getattr(record.properties, name) == wanted

    return test


def _header_test(name: str, wanted: HeaderWanted) -> Callable[[BackupRecord], bool]:
    def test(record: BackupRecord) -> bool:
        return any(key == name and _header_equals(value.kind, value.value, wanted) for key, value in record.headers)

    return test


_TEXT_KINDS = (LONG_STRING, SHORT_STRING)
_INT_KINDS = (LONG, SHORT, TIMESTAMP)


def _header_equals(kind: str, value: Any, wanted: HeaderWanted) -> bool:
    """A header's value against the one asked for: text with text, typed values with their own type."""
    if wanted is None:
        return kind == VOID
    if isinstance(wanted, bool):
        return kind == BOOL and value is wanted
    if isinstance(wanted, int):
        return kind in _INT_KINDS and value == wanted
    if isinstance(wanted, float):
        return kind in (FLOAT, DOUBLE) and value == wanted
    return _header_text(kind, value) == wanted


def header_text(kind: str, value: Any) -> str | None:
    """A header's value as a ``headers`` filter compares it with text (None: it has no text, no text filter matches)."""
    return _header_text(kind, value)


def _header_text(kind: str, value: Any) -> str | None:
    if kind in _TEXT_KINDS:
        return value
    if kind in _INT_KINDS:
        return str(value)
    if kind == BOOL:
        return "true" if value else "false"
    if kind in (FLOAT, DOUBLE):
        return repr(value)
    if kind == BYTES:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None  # Void, tables and arrays have no text to compare


def _iso(ms: int) -> str:
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


def _quoted(value: Any) -> str:
    if isinstance(value, str):
        return "'" + printable(value).replace("'", "\\'") + "'"
    return printable(repr(value) if value is not None else "void")


def _quoted_bytes(value: bytes) -> str:
    try:
        return _quoted(value.decode("utf-8"))
    except UnicodeDecodeError:
        return f"hex {value.hex()[:200]}"
