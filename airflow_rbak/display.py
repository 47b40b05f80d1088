"""How things read for people, the same in ``rbak`` output, task logs, the approval request and the backups view.

Names (vhosts, queues, backup ids, cluster names) come from whoever may declare
a queue on a broker, so they are untrusted text. Everything that leaves the
program renders them here, so a name can never change the structure around it:
:func:`printable` for terminals and logs, :func:`md_code` for Markdown.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

#: Characters a terminal or log reader acts on rather than shows: C0 and C1 controls, DEL, line and paragraph
#: separators, and the bidirectional overrides that reorder what is shown ("Trojan Source").
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_BACKTICKS = re.compile("`+")
#: The most digits of a bad time value shown (a corrupt manifest may hold an integer of any length).
_MAX_SHOWN_DIGITS = 24


def printable(text: object) -> str:
    """``text`` with every control character shown escaped (``\\x1b``, ``\\n``, ``\\u202e``); other Unicode kept.

    What a terminal or a log viewer would act on (move the cursor, set the window title, start a new log line)
    becomes visible instead; ``naïve-ü`` stays as it is.
    """
    return _UNPRINTABLE.sub(_escape_char, str(text))


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def md_code(text: object, *, in_table: bool = False) -> str:
    """``text`` as a Markdown code span that shows it literally, whatever it holds.

    The fence is one backtick longer than any run inside, so the name cannot close it; a code span is never a
    link, an image, an autolink or HTML; control characters (a newline would end a table row or the paragraph)
    are shown escaped. In a table cell ``in_table`` escapes ``|``, which GFM splits cells on even inside a code
    span and then shows unescaped.
    """
    shown = printable(text)
    longest = max((len(run) for run in _BACKTICKS.findall(shown)), default=0)
    fence = "`" * (longest + 1)
    # A space on both sides is stripped by the parser (unless all is space): pad when the text starts or ends
    # with a backtick or a space, so neither merges with the fence nor is lost.
    if shown.strip(" ") and (shown[0] in "` " or shown[-1] in "` "):
        shown = f" {shown} "
    if in_table:
        shown = shown.replace("|", "\\|")
    return f"{fence}{shown}{fence}" if shown else "` `"


def package_logger(name: str) -> logging.Logger:
    """The stdlib logger ``name`` with :class:`PrintableLogFilter` installed: every message it logs is one line.

    A filter on a logger sees only the records logged on that very logger (not those of its children), so every
    module of the package takes its logger here: ``log = package_logger(__name__)``. Operators log through such a
    module logger too, not ``self.log``: Airflow's task logger is a structlog logger, which takes no filter.
    """
    logger = logging.getLogger(name)
    if not any(isinstance(f, PrintableLogFilter) for f in logger.filters):
        logger.addFilter(_LOG_FILTER)
    return logger


class PrintableLogFilter(logging.Filter):
    """Renders a record's message with :func:`printable`, so a queue name cannot forge log lines or drive a terminal.

    The whole formatted message is escaped, not the arguments alone, so a name inside an exception or a summary
    object is caught too. The record is kept (a filter that returns True only rewrites).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is the handler's to report, as without this filter
            return True
        escaped = printable(message)
        if escaped != message or record.args:
            record.msg, record.args = escaped, ()
        return True


_LOG_FILTER = PrintableLogFilter()


def when(ms: Any) -> str:
    """Milliseconds since the epoch as ``2026-11-24 07:06:00 UTC``; ``-`` for none; never raises.

    A value no calendar date has (a damaged manifest) reads ``invalid time (…)``, with at most
    :data:`_MAX_SHOWN_DIGITS` characters of it shown.
    """
    if ms is None:
        return "-"
    try:
        if isinstance(ms, bool) or not isinstance(ms, int | float):
            raise TypeError
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return f"invalid time ({_bounded(ms)})"


def _bounded(value: Any) -> str:
    try:
        text = printable(value if isinstance(value, int | float) else repr(value))
    except ValueError:  # an int too long for str() (sys.set_int_max_str_digits)
        return "a number too long to show"
    return text if len(text) <= _MAX_SHOWN_DIGITS else text[:_MAX_SHOWN_DIGITS] + "…"


def size(n: int) -> str:
    """A byte count in binary units with one decimal: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def span(ms: int) -> str:
    """A length of time in the unit a person reads it in: ``45 minutes``, ``5 hours``, ``26 days``, ``3 years``."""
    minutes = max(0, ms) // 60_000
    for unit, length in (("year", 365 * 24 * 60), ("day", 24 * 60), ("hour", 60)):
        if minutes >= 2 * length:
            return count(minutes // length, unit)
    return count(minutes, "minute")


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 segment``, ``2 segments``, ``1,500 messages``: a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
