"""What the chapters point at exists: every key they cite is in the bibliography (the book
build fails on a missing key too, but only on a full build), and the introduction's map of the
course names every section of the table of contents."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
CITE = re.compile(r"\{cite(?::[tp])?\}`([^`]+)`")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_every_cited_key_is_in_the_bibliography(chapter):
    keys = set(re.findall(r"@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text(encoding="utf-8")))
    cited = {k.strip() for m in CITE.finditer(chapter.read_text(encoding="utf-8")) for k in m.group(1).split(",")}
    assert not cited - keys, f"{chapter.name} cites keys the bibliography lacks: {sorted(cited - keys)}"


def test_the_introduction_maps_every_section():
    toc = (ROOT / "book" / "_toc.yml").read_text(encoding="utf-8")
    sections = re.findall(r"file: chapters/(\d\d-[\w-]+)", toc)
    intro = (ROOT / "chapters" / "00-introduction.md").read_text(encoding="utf-8")
    missing = [s for s in sections if s != "00-introduction" and f"{{doc}}`{s}`" not in intro]
    assert sections and not missing, f"the introduction's map of the course leaves out {missing}"


def test_no_bibliography_title_holds_a_tex_command():
    """The bibliography page prints a title's TeX commands as text ("\\texttt megatron/core/...",
    which also made the page scroll sideways on a phone): titles hold plain words and braces."""
    titles = re.findall(r"^\s*(?:title|booktitle)\s*=\s*(.+)$", (ROOT / "book" / "references.bib").read_text(encoding="utf-8"),
                        flags=re.M)
    assert titles
    commands = [t for t in titles if re.search(r"\\[A-Za-z]+", t)]
    assert not commands, commands
