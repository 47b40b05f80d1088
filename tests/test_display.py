"""How untrusted names read for people: escaped for terminals and logs, literal in Markdown, and times that never raise."""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

import airflow_rbak
from airflow_rbak.display import md_code, package_logger, printable, when

TITLE_AND_NEWLINE = "orders\x1b]0;pwned\x07\nINFO forged line"
GFM = MarkdownIt("commonmark").enable("table")
#: The bidirectional classes of the characters that override or isolate the order text is shown in.
BIDI_CONTROLS = ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "LRM", "RLM", "ALM")


def inline_tokens(markdown: str) -> list:
    """The inline children of the one paragraph a Markdown line makes."""
    blocks = [t for t in GFM.parse(markdown) if t.type == "inline"]
    assert len(blocks) == 1, markdown
    return blocks[0].children or []


@pytest.mark.parametrize(("name", "shown"), [
    ("\x1b[2J\x1b[Hcleared", "\\x1b[2J\\x1b[Hcleared"),
    (TITLE_AND_NEWLINE, "orders\\x1b]0;pwned\\x07\\nINFO forged line"),
    ("tab\there\rcr", "tab\\there\\rcr"),
    ("nul\x00del\x7f", "nul\\x00del\\x7f"),
    ("c1\x9b31mcsi\x85nel", "c1\\x9b31mcsi\\x85nel"),
    ("bidi\u202eevil\u2066", "bidi\\u202eevil\\u2066"),
    ("line\u2028sep", "line\\u2028sep"),
])
def test_control_characters_are_shown_escaped(name, shown):
    assert printable(name) == shown


@pytest.mark.parametrize("name", ["naïve-ü", "日本語/ключ", "emoji-🙂‍🙂", "a b|c`d", "back\\slash"])
def test_ordinary_text_is_left_as_it_is(name):
    assert printable(name) == name


@given(st.text())
def test_no_character_a_terminal_acts_on_survives_and_escaping_twice_changes_nothing(name):
    shown = printable(name)

    assert not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") or unicodedata.bidirectional(c) in BIDI_CONTROLS
                   for c in shown)
    assert printable(shown) == shown


@pytest.mark.parametrize("name", ["`", "``x``", "a```b", "` lead", "trail `", "[x](http://evil)", "![i](http://evil/i.png)",
                                  "<b>bold</b>", "*em* _u_", "&amp;", "http://evil.example/x", "  ", "q"])
def test_a_code_span_shows_the_name_literally_and_is_never_a_link_an_image_or_html(name):
    tokens = inline_tokens(f"queue {md_code(name)} here")

    assert [t.type for t in tokens] == ["text", "code_inline", "text"]
    assert tokens[1].content == name


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40))
def test_any_name_in_a_table_cell_stays_in_its_cell_and_reads_back_as_its_printable_form(name):
    table = f"| name | n |\n|---|---|\n| {md_code(name, in_table=True)} | 7 |\n"

    tokens = GFM.parse(table)

    rows = [t for t in tokens if t.type == "tr_open"]
    cells = [t for t in tokens if t.type == "inline"][2:]
    assert len(rows) == 2 and len(cells) == 2
    assert [c.type for c in cells[0].children] == ["code_inline"]
    assert cells[0].children[0].content == printable(name)
    assert cells[1].content == "7"


def test_a_log_record_with_a_title_sequence_and_a_newline_in_a_name_is_logged_as_one_escaped_line(caplog):
    log = package_logger("airflow_rbak.tests.display")

    with caplog.at_level(logging.INFO, logger="airflow_rbak.tests.display"):
        log.info("captured queue %s in vhost %r", TITLE_AND_NEWLINE, "prod")

    (record,) = caplog.records
    assert record.getMessage() == "captured queue orders\\x1b]0;pwned\\x07\\nINFO forged line in vhost 'prod'"
    assert "\n" not in caplog.text.rstrip("\n") and "\x1b" not in caplog.text


def test_every_module_of_the_package_logs_through_a_logger_that_escapes_names():
    package = Path(airflow_rbak.__file__).parent
    sources = {p.relative_to(package).as_posix(): p.read_text() for p in package.rglob("*.py")}

    direct = [name for name, text in sources.items() if "logging.getLogger(__name__)" in text]
    task_logger = [name for name, text in sources.items() if name.startswith("operators/") and "self.log." in text]
    assert direct == [], "use display.package_logger(__name__)"
    assert task_logger == [], "Airflow's self.log takes no filter: log through the module's package_logger"


@pytest.mark.parametrize(("ms", "shown"), [
    (None, "-"),
    (0, "1970-01-01 00:00:00 UTC"),
    (1_795_000_000_000, "2026-11-18 11:06:40 UTC"),
    (9_000_000_000_000_000_000, "invalid time (9000000000000000000)"),
    (-9_000_000_000_000_000_000, "invalid time (-9000000000000000000)"),
    (10 ** 40, "invalid time (100000000000000000000000…)"),
    (float("nan"), "invalid time (nan)"),
    ("yesterday\x1b[2J", "invalid time ('yesterday\\x1b[2J')"),
])
def test_a_time_reads_as_a_utc_date_or_says_it_is_invalid_without_raising(ms, shown):
    assert when(ms) == shown


def test_an_invalid_time_is_never_longer_than_a_line():
    assert len(when(10 ** 4000)) < 60 and len(when("x" * 10_000)) < 60
