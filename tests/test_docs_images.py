"""The screenshots in the docs are the ones the browser tests take (tests/ui/screenshots.py lists them): each is
committed, shown by a page, a PNG at the browser tests' fixed size, and no other picture is left behind.

``make screenshots`` takes them anew from real runs (tests/ui/test_screenshots.py, tests/ui/test_browser.py); those
tests check what each page shows, never its pixels.
"""

from __future__ import annotations

import re
import struct
import zlib

import pytest

from tests.ui.screenshots import DOCUMENTED, IMAGES, REPO, SIZE

DOCS = REPO / "docs"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _pages() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in [*DOCS.glob("*.md"), REPO / "README.md"]}


def _png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk, after checking the signature and that chunk's CRC."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR"), "the first chunk is not IHDR"
    body, crc = data[16:29], struct.unpack(">I", data[29:33])[0]
    assert zlib.crc32(b"IHDR" + body) == crc, "IHDR's CRC does not match"
    assert data.endswith(b"IEND\xaeB`\x82"), "no IEND chunk at the end"
    width, height = struct.unpack(">II", body[:8])
    return width, height


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_documented_screenshot_is_a_png_of_the_browser_tests_size_shown_by_a_page(name):
    path = IMAGES / name
    assert path.is_file(), f"{name} is missing: run make screenshots"
    assert _png_size(path.read_bytes()) == SIZE
    assert [page for page, text in _pages().items() if f"](images/{name})" in text], f"no page shows {name}"


def test_every_picture_under_docs_is_a_documented_screenshot_or_a_rendered_diagram():
    pictures = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*") if p.suffix in (".png", ".jpg", ".gif", ".svg")}
    diagrams = {str(p.relative_to(DOCS)) for p in (DOCS / "diagrams").glob("*.svg")}
    assert pictures - diagrams == {f"images/{name}" for name in DOCUMENTED}


def test_every_image_a_page_shows_exists():
    shown = {(page, target) for page, text in _pages().items()
             for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text) if "://" not in target}
    base = {page: (REPO / page).parent for page, _ in shown}
    assert [(page, target) for page, target in sorted(shown) if not (base[page] / target).is_file()] == []
