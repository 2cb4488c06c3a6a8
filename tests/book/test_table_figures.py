"""A table cell's figure stays on one line with its unit (book/_ext/course_site.py, item 12).

Section 6's table of layouts showed "1,120.0" over "GB", and section 7's "10.4" over "GB",
at a desktop's width; on a phone more cells of sections 6 and 7 and of Lab 7 broke so. The
build wraps each cell that is one figure and its unit in a span that does not wrap; the
cell's text is unchanged.
"""
from __future__ import annotations

import importlib.util
import re

import pytest

from tools.browser import ROOT, SITE, toc_pages

_spec = importlib.util.spec_from_file_location("course_site", ROOT / "book" / "_ext" / "course_site.py")
course_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course_site)


@pytest.mark.parametrize("cell, kept", [
    ("<td><p>1,120.0 GB</p></td>", "1,120.0 GB"),
    ("<td>0.054 s</td>", "0.054 s"),
    ('<td class="text-right"><p>2.12 GB/s</p></td>', "2.12 GB/s"),
    ("<td><p>-3.5 ms</p></td>", "-3.5 ms"),
    ("<td><p>12 days</p></td>", "12 days"),
    ("<td><p>10 GB of 20 GB</p></td>", None),   # a phrase may wrap between its words
    ("<td><p>1.5 sec</p></td>", None),          # not a unit of the list
    ("<td><p>128 micro-batches</p></td>", None),
    ("<td><p>1 × 1 × 1024</p></td>", None),
])
def test_a_cell_that_is_a_figure_and_a_unit_is_kept_whole(cell, kept):
    out = course_site.figures_keep_units(cell)
    if kept is None:
        assert out == cell
    else:
        assert f'<span class="course-figure">{kept}</span>' in out
        assert re.sub(r"</?span[^>]*>", "", out) == cell  # the text itself is unchanged


def test_every_built_table_keeps_its_figures_whole():
    pages = [SITE / p for p in toc_pages()]
    if not all(p.exists() for p in pages):
        pytest.skip("the book is not built: run `make book` first")
    units = "|".join(re.escape(u) for u in course_site.FIGURE_UNITS)
    bare = re.compile(r"<td\b[^>]*>\s*(?:<p>)?([-+\u2212]?\d[\d.,]*\s+(?:" + units + r"))(?:</p>)?\s*</td>")
    found = {p.relative_to(SITE).as_posix(): bare.findall(p.read_text(encoding="utf-8")) for p in pages}
    found = {k: v[:5] for k, v in found.items() if v}
    assert not found, f"table cells whose figure may break from its unit: {found}"
    css = (ROOT / "book" / "_static" / "course.css").read_text(encoding="utf-8")
    assert re.search(r"\.course-figure\s*\{[^}]*white-space:\s*nowrap", css)
