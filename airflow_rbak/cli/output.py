"""How ``rbak`` writes its output: names in a backup come from whoever may declare a queue, so none reaches the
terminal raw.

Text goes through :func:`say`, which shows control characters escaped
(:func:`~airflow_rbak.display.printable`); JSON through :func:`json_line`,
which also escapes what JSON itself leaves raw inside strings.
"""

from __future__ import annotations

import re
from typing import IO, Any

import orjson

from airflow_rbak.display import printable

#: What JSON leaves raw inside strings but a terminal acts on: DEL, C1 controls, line separators, bidi overrides.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def say(out: IO[str], line: str = "") -> None:
    """Write one line of text output with its control characters shown escaped."""
    out.write(printable(line) + "\n")


def listed(items: list[str] | tuple[str, ...], most: int = 20, empty: str = "nothing") -> str:
    """Names for one line of text: the first ``most``, then how many more."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more if items else empty


def json_line(out: IO[str], value: Any) -> None:
    """Write ``value`` as one line of JSON that a terminal shows as it is."""
    out.write(json_safe(orjson.dumps(value).decode()) + "\n")


def json_safe(text: str) -> str:
    """JSON text with the characters :data:`_JSON_UNSAFE` names written as ``\\uXXXX``: the same JSON value.

    Outside its strings JSON holds only ASCII, so each such character is inside a string, where the escape is valid.
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
