"""How citations are written in the prose.

The book renders citations author-year (``bibtex_reference_style`` in ``_config.yml``), where
``{cite}`` and ``{cite:p}`` already print their own parentheses: "(NVIDIA, 2022; Dubey et al.,
2024)". Written inside parentheses of the prose's own, they print two pairs, "((NVIDIA, ...))".
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("chapters", "labs", "book") for p in (ROOT / d).rglob("*.md"))
# "(" directly before a parenthetical citation role: the rendered text gets two opening brackets.
DOUBLE_PARENS = re.compile(r"\(\s*\{cite(?::p)?\}`")


def test_the_book_cites_author_year():
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert re.search(r"bibtex_reference_style:\s*author_year", config)


def double_parenthesised(markdown: str) -> list[int]:
    """Line numbers where a {cite} or {cite:p} role opens right after a "(" of the prose."""
    return [n for n, line in enumerate(markdown.splitlines(), 1) if DOUBLE_PARENS.search(line)]


def test_the_rule_catches_a_parenthesised_cite_and_passes_the_rest():
    text = ("a port per GPU ({cite}`nvidia2022h100`).\n"
            "a port per GPU {cite}`nvidia2022h100`.\n"
            "as ( {cite:p}`a,b` ) says\n"
            "as {cite:t}`dubey2024llama3` (Table 4) says\n")
    assert double_parenthesised(text) == [1, 3]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_parenthetical_cite_inside_parentheses(path):
    lines = double_parenthesised(path.read_text(encoding="utf-8"))
    assert not lines, f"{path.relative_to(ROOT)}: lines {lines} put a parenthetical citation inside parentheses"
