"""The landing page and its map show every part of the course, assignments included, with a time.

- The committed map (book/_static/course-map.svg) is what tools/course_map.py draws now, and
  the counts it prints (labs, assignments, explorers) are those of the table of contents.
- Every section of the book's "Sections" part has a box with its reading time.
- The landing page links every assignment, every lab's starting page, every explorer and the
  planner, and gives each kind of practice a time.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools import course_map

ROOT = Path(__file__).resolve().parents[2]
TOC = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
FILES = {part["caption"]: [c["file"] for c in part["chapters"]] for part in TOC["parts"]}
INDEX = (ROOT / "book" / "index.md").read_text(encoding="utf-8")


def test_the_committed_map_is_the_drawn_one():
    assert (ROOT / "book" / "_static" / "course-map.svg").read_text(encoding="utf-8") == course_map.course_map(), \
        "run `python tools/course_map.py`"


def test_every_section_is_on_the_map_with_a_time():
    sections = [Path(f).name for f in FILES["Sections"] if not f.endswith("09-exercises")]
    on_map = [f for _, boxes in course_map.PARTS for f, *_ in boxes]
    assert sorted(on_map) == sorted(sections)
    assert all(course_map.READING_MIN[f] > 0 for f in on_map)
    svg = course_map.course_map()
    for _, boxes in course_map.PARTS:
        for f, title, *_ in boxes:
            assert f">{title}<" in svg and f"{course_map.READING_MIN[f]} min" in svg


def test_practice_counts_come_from_the_table_of_contents():
    counts = course_map.toc_counts()
    assert counts["assignments"] == len(FILES["Assignments"]) >= 5
    assert counts["labs"] == len(FILES["Labs"]) - 1  # not the page on running them
    assert counts["explorers"] == len(FILES["Explorers"])
    svg = course_map.course_map()
    word = course_map.NUMBER_WORDS[counts["assignments"]]
    assert f"{word.capitalize()} assignments" in svg and "2–3 h each" in svg


def test_landing_page_names_every_part():
    for f in FILES["Assignments"] + FILES["Explorers"]:
        rel = "../" + f if not f.startswith("book/") else f.removeprefix("book/")
        assert rel in INDEX, f"the landing page does not link {f}"
    assert "../labs/00-running-the-labs" in INDEX and "../chapters/planner" in INDEX
    table = INDEX[INDEX.index("## Time per part"):]
    for row in ("Labs", "Assignments", "Planning a run", "Explorers"):
        line = next(l for l in table.splitlines() if row in l and l.startswith("|"))
        assert re.search(r"\d+\s*(min|h)", line), f"no time for {row}"
