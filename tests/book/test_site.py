"""The built book, as a reader's browser sees it: headless Chromium opens every page of the
table of contents, at a desktop width (1280 px) and a phone width (390 px), and checks that

* it loads without console errors, display maths is typeset by MathJax, every image loads and
  every internal link resolves;
* the document does not scroll sideways (wide tables, equations and logs scroll inside their
  own box);
* every figure is vector (SVG) or has at least twice the pixels it is displayed with, so it
  stays sharp on high-density screens;
* no page shows a solution marker, a raw BibTeX key, raw ``$`` maths, or a Markdown table
  left as text (a ``Markdown(...)`` output rendered without ``markdown_format: gfm``);
* no "Show code cell source" toggle opens onto a cell that shows nothing: a cell whose only
  job is to compute numbers for the prose is removed from the page instead;
* at the desktop's width no cell output (a printout, a table) is wider than its column, so none
  hides its right part behind a scroll bar (at a phone's width they may scroll in their box);
* every icon of the theme is drawn (book/_static/course-icons.css has a rule for its class).

Each page is opened once per width for the whole suite (tests/site_visits.py, shared with
tests/book/test_site_reader.py). Needs `make book` first (`make test` does it). Without Chromium the tests skip with a reason,
except under CI (CI=true), where a missing browser or site is a failure.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.site_visits import PAGES, WIDTHS
from tools.browser import ROOT, SITE


pytestmark = pytest.mark.site


BIB_KEYS = sorted(set(re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text(), re.M)))


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


def raw_markup(prose: str) -> list[str]:
    """Markup a reader should never see in the prose: solution markers, citation roles or raw
    BibTeX keys, TeX left between dollar signs, and a Markdown table's rule row ``|---|``
    (which smartquotes turn into ``|—|``) left as text."""
    found = [m for m in ("BEGIN SOLUTION", "END SOLUTION", "{cite", "{glue", "{doc}") if m in prose]
    found += [f"BibTeX key {key}" for key in BIB_KEYS if re.search(rf"(?<![\\w/.-]){re.escape(key)}(?![\\w-])", prose)]
    found += [f"raw maths {m.group(0)[:40]!r}" for m in re.finditer(r"\$\$|\$[^$\s][^$\n]{0,200}?[\\^_{}][^$\n]*?\$", prose)]
    found += [f"Markdown table as text {m.group(0)!r}" for m in re.finditer(r"\|:?[-–—]+:?\|", prose)][:1]
    return found


def test_raw_markup_is_detected():
    key = BIB_KEYS[0]
    assert raw_markup(f"see {key} and $\\alpha_1$ ### BEGIN SOLUTION") == [
        "BEGIN SOLUTION", f"BibTeX key {key}", "raw maths '$\\\\alpha_1$'"]
    assert raw_markup("costs $5 and $10 per hour; see Kaplan et al. (2020)") == []
    assert raw_markup("| run | ms |\n|—|—:|\n| a | 1 |") == ["Markdown table as text '|—|'"]
    assert raw_markup("| a | b |\n|---|---|") == ["Markdown table as text '|---|'"]
    assert raw_markup("a ratio |x| - |y| and a dash – here") == []


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
@pytest.mark.parametrize("path", PAGES)
def test_page(site_visits, path, width):
    """One visit per page and width: console, maths, images, links, layout, markup, toggles."""
    assert (SITE / path).exists(), f"{path} is in the table of contents but was not built"
    server, found = site_visits
    seen = found[path, width]
    assert seen["status"] == 200, f"{path}: HTTP {seen['status']}"
    errors, untypeset, body_text = seen["errors"], seen["untypeset"], seen["body_text"]
    broken_images, hrefs, scroll_width, wide = seen["broken_images"], seen["hrefs"], seen["scroll_width"], seen["wide"]
    blurry, prose, empty_toggles, article = seen["blurry"], seen["prose"], seen["empty_toggles"], seen["article"]
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
    if width == WIDTHS["desktop"] and seen["cut_off"]:
        problems.append(f"cell outputs wider than their column: {seen['cut_off'][:5]}")
    if seen["blank_icons"]:
        problems.append(f"icons drawn by no rule of course-icons.css: {sorted(set(seen['blank_icons']))[:5]}")
    assert not problems, f"{path} at {width}px:\n  " + "\n  ".join(problems)
