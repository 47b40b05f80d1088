"""The ``body_regex`` field of a message filter: its search bounded in time, and the texts every match holds.

A regular expression can backtrack for longer than the universe lasts on a body of a few dozen bytes (``(a+)+$``);
none is refused by its shape, but each search of one body is bounded in time (:data:`REGEX_SECONDS`, plus
:data:`REGEX_SECONDS_PER_MIB` for each MiB of the body): a pattern that exceeds it raises
:class:`RegexTimeoutError`, which stops the read and says so, rather than passing over the body as if it had not
matched, which would hide messages. :func:`required_texts` lets a reader skip a body, or a segment, that cannot match.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import regex

from airflow_rbak.codec.records import BackupRecord
from airflow_rbak.repository.filter_values import FilterError

#: How long one search of one body by ``body_regex`` may take, in seconds, before the read stops ...
REGEX_SECONDS = 0.25
#: ... plus this much for each MiB of the body (a literal pattern scans about 1 GiB/s).
REGEX_SECONDS_PER_MIB = 0.25


class RegexTimeoutError(FilterError):
    """``body_regex`` took longer than its bound on one body: the pattern backtracks too much to finish."""


def regex_test(pattern: str) -> Callable[[BackupRecord], bool]:
    """The test of ``body_regex``: the pattern searched in the body read as UTF-8, bounded in time per body, and
    skipped where the body lacks a text every match holds."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise FilterError("body_regex", f"not a valid regular expression: {exc}") from None
    texts = required_texts(pattern)
    needle = max(texts, key=len).encode("utf-8") if texts else b""

    def test(record: BackupRecord) -> bool:
        body = record.body
        if needle not in body:  # every match holds it: the pattern need not run
            return False
        limit = REGEX_SECONDS + REGEX_SECONDS_PER_MIB * len(body) / 1048576
        try:
            return compiled.search(body.decode("utf-8", "replace"), timeout=limit) is not None
        except TimeoutError:
            raise RegexTimeoutError(
                "body_regex",
                f"searching one {len(body)}-byte body took longer than {limit:.2f} s, so the read stopped; the "
                "pattern backtracks too much (nested repeats such as (a+)+ or overlapping alternatives such as "
                "(a|aa)+): simplify it",
            ) from None

    return test


#: Characters that stand for themselves in a pattern, outside a set or a group, in both ``re`` and ``regex``.
_PLAIN = frozenset(" !\"#%&',-/:;<=>@_`~")
#: What may follow ``(?`` for a group that sets no flag (a flag such as ``(?i)`` may change what every literal matches).
_GROUPS = frozenset(":=!<>P")
_REPEAT = re.compile(r"\d+(,\d*)?|,\d+")
_ESCAPE_NAME = re.compile(r"[\w =.-]*")


def required_texts(pattern: str) -> tuple[str, ...]:
    """Runs of plain characters that every match of ``pattern`` holds, so a body that lacks one needs no search.

    Read conservatively: only characters outside any group, set or escape, not followed by a quantifier, in a
    pattern with no alternation at its top level and no inline flag; anything unusual (a ``[`` inside a set, an
    unclosed group or brace) gives none. A missing text may make a search slower, never miss a match.
    """
    runs: list[str] = []
    run: list[str] = []
    depth, i, n = 0, 0, len(pattern)

    def flush() -> None:
        if run and depth == 0 and "\ufffd" not in run:
            runs.append("".join(run))
        run.clear()

    while i < n:
        c = pattern[i]
        if c == "\\":
            flush()
            i += 2
            if i - 1 < n and pattern[i - 1].isalnum():  # \x41, \N{...}, \p{L}, \L<name>, \12: one token, however long
                if i < n and pattern[i] in "{<":
                    close = pattern.find("}" if pattern[i] == "{" else ">", i)
                    if close < 0 or not _ESCAPE_NAME.fullmatch(pattern[i + 1 : close]):
                        return ()
                    i = close + 1
                while i < n and pattern[i].isalnum():
                    i += 1
            continue
        if c == "[":
            flush()
            i += 1
            i += i < n and pattern[i] == "^"
            i += i < n and pattern[i] == "]"
            while i < n and pattern[i] != "]":
                if pattern[i] == "[":
                    return ()  # a nested set or a POSIX class: read differently by re and regex
                i += 2 if pattern[i] == "\\" else 1
            if i >= n:
                return ()
            i += 1
            continue
        if c == "(":
            if pattern.startswith("(?", i) and pattern[i + 2 : i + 3] not in _GROUPS:
                return ()
            flush()
            depth += 1
        elif c == ")":
            flush()
            depth -= 1
            if depth < 0:
                return ()
        elif c == "|":
            if depth == 0:
                return ()
        elif c in "*+?{":
            if run and i > 0 and pattern[i - 1] == run[-1]:
                run.pop()  # the quantifier applies to the character before it: it may be absent or repeated
            flush()
            if c == "{":
                close = pattern.find("}", i)
                if close < 0 or not _REPEAT.fullmatch(pattern[i + 1 : close]):
                    return ()  # a brace that is no count: a literal, or a fuzzy constraint
                i = close
        elif c.isalnum() or c in _PLAIN:
            if depth == 0:
                run.append(c)
        else:  # . ^ $ } and anything else: not a plain character
            flush()
        i += 1
    if depth != 0:
        return ()
    flush()
    return tuple(runs)
