"""The built book, as a reader's browser sees it: headless Chromium opens every page of the
table of contents, at a desktop width (1280 px) and a phone width (390 px), and checks that

* it loads without console errors, display maths is typeset by MathJax, every image loads and
  every internal link resolves;
* the document does not scroll sideways (wide tables, equations and logs scroll inside their
  own box);
* every figure is vector (SVG) or has at least twice the pixels it is displayed with, so it
  stays sharp on high-density screens;
* no page shows a solution marker, a raw BibTeX key, or raw ``$`` maths;
* no "Show code cell source" toggle opens onto a cell that shows nothing: a cell whose only
  job is to compute numbers for the prose is removed from the page instead.

Needs `make book` first (`make test` does it). Without Chromium the tests skip with a reason,
except under CI (CI=true), where a missing browser or site is a failure.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from tools.browser import ROOT, SITE, toc_pages


pytestmark = pytest.mark.site


PAGES = toc_pages()
WIDTHS = {"desktop": 1280, "phone": 390}
BIB_KEYS = sorted(set(re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text(), re.M)))


def _load(browser, url, width=1280):
    """Open a page; return it with the console errors and uncaught exceptions it produced."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    # Wait until MathJax (if the page loads it) has finished typesetting.
    page.evaluate(
        "() => (window.MathJax && MathJax.startup && MathJax.startup.promise) || null"
    )
    return page, errors


def _anchors(html_file: Path) -> set[str]:
    text = html_file.read_text(encoding="utf-8", errors="replace")
    return set(re.findall(r'\bid="([^"]+)"', text)) | set(re.findall(r'\bname="([^"]+)"', text))


def _broken_links(hrefs: list[str], server: str) -> list[str]:
    broken = []
    for href in hrefs:
        if not href.startswith(server):
            continue  # external links are not checked here (no network)
        url = urlparse(href)
        target = SITE / unquote(url.path[len(urlparse(server).path):])
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            broken.append(href)
        elif url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _anchors(target):
            broken.append(href)
    return sorted(set(broken))


# What a reader sees: the article's text without code, maths and scripts.
_PROSE_JS = """() => {
  const root = (document.querySelector('article') || document.body).cloneNode(true);
  root.querySelectorAll('pre, code, script, style, mjx-container, .cell_input, details:not([open]) > :not(summary)')
      .forEach(el => el.remove());
  return root.textContent;
}"""

# Figures as displayed: SVG, or natural width at least twice the displayed width.
_BLURRY_JS = """() => Array.from(document.querySelectorAll('article img'))
  .filter(img => img.clientWidth > 0 && !/\\.svg(\\?|#|$)/i.test(img.currentSrc || img.src))
  .filter(img => img.naturalWidth < 2 * img.clientWidth)
  .map(img => `${(img.currentSrc || img.src).split('/').pop()}: ${img.naturalWidth}px shown at ${img.clientWidth}px`)"""

# Code toggles (hidden cell sources) whose cell shows no output.
_EMPTY_TOGGLES_JS = """() => Array.from(document.querySelectorAll('article div.cell'))
  .filter(cell => cell.querySelector(':scope > details.hide, :scope > details.above-input'))
  .filter(cell => {
    const out = cell.querySelector('.cell_output');
    return !out || (!out.textContent.trim() && !out.querySelector('img, svg, table, iframe'));
  })
  .map(cell => (cell.querySelector('pre') || cell).textContent.trim().split('\\n')[0].slice(0, 70))"""


def raw_markup(prose: str) -> list[str]:
    """Markup a reader should never see in the prose: solution markers, citation roles or raw
    BibTeX keys, and TeX left between dollar signs."""
    found = [m for m in ("BEGIN SOLUTION", "END SOLUTION", "{cite", "{glue", "{doc}") if m in prose]
    found += [f"BibTeX key {key}" for key in BIB_KEYS if re.search(rf"(?<![\\w/.-]){re.escape(key)}(?![\\w-])", prose)]
    found += [f"raw maths {m.group(0)[:40]!r}" for m in re.finditer(r"\$\$|\$[^$\s][^$\n]{0,200}?[\\^_{}][^$\n]*?\$", prose)]
    return found


def test_raw_markup_is_detected():
    key = BIB_KEYS[0]
    assert raw_markup(f"see {key} and $\\alpha_1$ ### BEGIN SOLUTION") == [
        "BEGIN SOLUTION", f"BibTeX key {key}", "raw maths '$\\\\alpha_1$'"]
    assert raw_markup("costs $5 and $10 per hour; see Kaplan et al. (2020)") == []


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
@pytest.mark.parametrize("path", PAGES)
def test_page(browser, server, path, width):
    """One visit per page and width: console, maths, images, links, layout, markup, toggles."""
    assert (SITE / path).exists(), f"{path} is in the table of contents but was not built"
    page, errors = _load(browser, urljoin(server, path), width)
    try:
        untypeset = page.evaluate(
            """() => Array.from(document.querySelectorAll('div.math, span.math'))
                      .filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 60))"""
        )
        body_text = page.inner_text("article") if page.query_selector("article") else page.inner_text("body")
        broken_images = page.evaluate(
            """() => Array.from(document.images)
                      .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src)"""
        )
        hrefs = page.evaluate("() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
        scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
        wide = page.evaluate(
            """(w) => Array.from(document.querySelectorAll('article *'))
                 .filter(el => el.getBoundingClientRect().right > w + 1 && el.getClientRects().length)
                 .filter(el => !el.closest('[style*=overflow], .pst-scrollable-table-container, .output, div.math, mjx-container, pre, .highlight'))
                 .slice(0, 3).map(el => el.tagName.toLowerCase() + '.' + el.className)""", width)
        blurry = page.evaluate(_BLURRY_JS)
        prose = page.evaluate(_PROSE_JS)
        empty_toggles = page.evaluate(_EMPTY_TOGGLES_JS)
        article = page.evaluate("() => (document.querySelector('article') || document.body).textContent")
    finally:
        page.close()
    problems = []
    if errors:
        problems.append(f"console errors: {errors}")
    if untypeset:
        problems.append(f"maths not typeset by MathJax: {untypeset[:5]}")
    if "$$" in body_text or re.search(r"\\begin\{", body_text):
        problems.append("raw TeX ($$ or \\begin) left in the page text")
    if broken_images:
        problems.append(f"images that did not load: {broken_images}")
    broken = _broken_links(hrefs, server)
    if broken:
        problems.append(f"internal links that do not resolve: {broken[:10]}")
    if scroll_width > width:
        problems.append(f"the page scrolls sideways: {scroll_width}px wide in a {width}px window {wide}")
    if blurry:
        problems.append(f"figures neither SVG nor at least 2x their displayed width: {blurry}")
    markup = raw_markup(prose)
    # A directive or role that MyST did not parse (a backtick fence whose title holds a role,
    # say) shows up as text, often swallowing what follows into a code block.
    markup += [m for m in ("```{", ":::{", "{glue:") if m in article]
    if markup:
        problems.append(f"raw markup visible: {markup[:8]}")
    if empty_toggles:
        problems.append(f"code toggles that open onto a cell with no output: {empty_toggles}")
    assert not problems, f"{path} at {width}px:\n  " + "\n  ".join(problems)
