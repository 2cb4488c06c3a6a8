"""The explorers as their readers meet them, with a screen reader or on a narrow screen.

axe-core, with every impact (minor included).

The suite's page visits (tests/site_visits.py) run axe-core when a page has loaded, and keep
only serious and critical violations; the planner's form is built later, when the reader
scrolls near it, so that visit never sees it. Here each explorer page, and the planner page with
its form drawn, is opened at the phone's and the desktop's width, and axe-core checks the
explorer itself (the theme around it is the site visits' business) for any violation: a table
whose corner header cell is empty, or two scroll boxes a screen reader lists under the same
name ("Table (scrolls sideways)" twice on the Chinchilla explorer), for instance.

No figure in an explorer's tables is cut from its unit by a line break: the planner's "next
fastest layouts" showed every step time as "3.833" over "s", at 1280 px as at 390 px.

A page's own tables, written in Markdown or printed by a cell, are checked without a browser:
no header cell of a built page may be empty.
"""
from __future__ import annotations

import re

import pytest

from tests.site_visits import AXE
from tools.browser import SITE, toc_pages

EXPLORERS = ["book/explore/chinchilla.html", "book/explore/memory.html", "book/explore/pipeline.html",
             "book/explore/collectives.html", "book/explore/fsdp.html", "chapters/planner.html"]
WIDTHS = {"phone": 390, "desktop": 1280}

_AXE_ON_EXPLORERS = """async () => {
  const result = await axe.run({include: [['.explorer[data-ready="true"]']]}, {resultTypes: ['violations']});
  return result.violations.map(v => `${v.id} (${v.impact}): ` +
    v.nodes.slice(0, 3).map(n => n.target.join(' ')).join('; '));
}"""


def _open_explorer(browser, server, path, width):
    """A new page at ``width`` px with the explorer of ``path`` drawn (the planner's form loads
    when it comes near, so the explorer is scrolled into view first)."""
    page = browser.new_page(viewport={"width": width, "height": 844})
    page.goto(server + path, wait_until="load")
    page.locator(".explorer").first.scroll_into_view_if_needed()
    page.wait_for_selector('.explorer[data-ready="true"]', timeout=20_000)
    page.wait_for_function("() => !document.querySelector('.explorer[aria-busy]')", timeout=20_000)
    return page


# Table cells holding one figure and its unit ("3.833 s", "16.30 GiB", "52.3 %") whose text
# the browser lays out on more than one line.
_FIGURES_ON_TWO_LINES_JS = """() => Array.from(document.querySelectorAll('.explorer td'))
  .filter(td => td.offsetParent !== null && /^[-+]?[\\d.,]+\\s?(s|ms|%|GB|GiB|TB)$/.test(td.textContent.trim()))
  .filter(td => { const r = document.createRange(); r.selectNodeContents(td);
                  return new Set(Array.from(r.getClientRects()).map(b => Math.round(b.top))).size > 1; })
  .map(td => td.textContent.trim())"""


@pytest.mark.site
@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
@pytest.mark.parametrize("path", EXPLORERS)
def test_explorer_reads_well(browser, server, path, width):
    """axe-core finds nothing; each scroll box has a name of its own that says what it holds;
    no figure in the explorer's tables is broken from its unit."""
    page = _open_explorer(browser, server, path, width)
    try:
        page.add_script_tag(path=str(AXE))
        violations = page.evaluate(_AXE_ON_EXPLORERS)
        labels = page.evaluate("""() => Array.from(document.querySelectorAll('.explorer [role=region]'))
            .map(r => r.getAttribute('aria-label'))""")
        cells = page.evaluate("() => document.querySelectorAll('.explorer td').length")
        cut = page.evaluate(_FIGURES_ON_TWO_LINES_JS)
    finally:
        page.close()
    assert not violations, f"{path} at {width}px:\n  " + "\n  ".join(violations)
    # A scroll box's name says what it holds: a list of regions called "Table" tells nothing.
    assert labels and all(label and not label.startswith("Table") for label in labels), labels
    assert len(set(labels)) == len(labels), f"scroll boxes with the same name: {labels}"
    assert cells > 0
    assert not cut, f"{path} at {width}px: figures broken over two lines: {cut[:8]}"


def empty_header_cells(html: str) -> list[str]:
    """The header cells of a page's article that hold no text (a Markdown table's corner "| |")."""
    article = re.search(r"<article\b.*?</article>", html, flags=re.S)
    found = []
    for row in re.findall(r"<thead>.*?</thead>", article.group(0) if article else html, flags=re.S):
        cells = re.findall(r"<th\b[^>]*>(.*?)</th>", row, flags=re.S)
        if any(not re.sub(r"<[^>]+>|&nbsp;|\s", "", cell) for cell in cells):
            found.append(" | ".join(re.sub(r"<[^>]+>", "", c).strip() for c in cells)[:80])
    return found


def test_empty_header_cells_are_found():
    assert empty_header_cells('<article><table><thead><tr><th class="head"><p></p></th>'
                              '<th class="head"><p>E</p></th></tr></thead></table></article>') == [" | E"]
    assert empty_header_cells("<article><table><thead><tr><th>fit</th><th>E</th></tr></thead></table></article>") == []


def test_no_table_of_a_page_has_an_empty_header_cell():
    pages = [SITE / p for p in toc_pages()]
    if not all(p.exists() for p in pages):
        pytest.skip("the book is not built: run `make book` first")
    bad = {p.relative_to(SITE).as_posix(): empty_header_cells(p.read_text(encoding="utf-8")) for p in pages}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"tables whose header has an empty cell (name the column): {bad}"
