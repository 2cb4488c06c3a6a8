"""The public site reads as one standalone course: no page calls itself "the chapter".

The course is made of sections (and labs, and appendices); a page that says "this chapter" or
"the chapter's convention" speaks of a book the reader does not have. Both the MyST sources of
every public page and the built HTML (``make book``, prose, captions, stored outputs and the
source of every code cell a reader can expand) are checked.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SOURCE_DIRS = ("chapters", "labs", "book", "book/explore")

# "the chapter", "this chapter", "the chapter's", "chapter's" (straight or curly apostrophe).
SELF_REFERENCE = re.compile(r"\b(?:the|this|that)\s+chapter\b|\bchapter['’]s\b", re.I)


def offending_lines(text: str) -> list[str]:
    """Each self-reference with up to 50 characters of context either side."""
    return [" ".join(text[max(0, m.start() - 50):m.end() + 50].split()) for m in SELF_REFERENCE.finditer(text)]


def public_sources() -> list[Path]:
    return [p for d in SOURCE_DIRS for p in sorted((ROOT / d).glob("*.md"))]


def built_pages() -> list[Path]:
    return sorted(p for p in SITE.rglob("*.html") if "_static" not in p.parts)


def page_text(path: Path) -> str:
    """The text a reader can see or expand: tags removed, entities decoded (scripts kept,
    since the explorers' data and labels live in them)."""
    raw = path.read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_pattern_catches_self_references():
    for phrase in ("as this chapter shows", "the chapter's convention", "the chapter’s first count",
                   "the rest of the Chapter"):
        assert offending_lines(phrase), phrase
    for phrase in ("the chapters of the course", "Chapter 17 of a textbook", "a chapter_12 key"):
        assert not offending_lines(phrase), phrase


@pytest.mark.parametrize("path", public_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_source_does_not_call_itself_a_chapter(path):
    found = offending_lines(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} says 'the chapter' of itself: {found[:5]}"


def test_built_site_does_not_call_itself_a_chapter():
    pages = built_pages()
    if not pages:
        unavailable("no built site in _build/html: run `make book` first")
    found = {str(p.relative_to(SITE)): lines for p in pages if (lines := offending_lines(page_text(p)))}
    assert not found, "pages that say 'the chapter' of themselves: " + "; ".join(
        f"{page}: {lines[:3]}" for page, lines in sorted(found.items()))
