"""The built book as a reader uses it on a phone (390 px) and a desktop (1280 px), in headless
Chromium:

* the table of contents and the page's contents open from their header buttons, show their
  links, close again, and a link in them navigates;
* axe-core (vendored under ``tests/assets/axe-core``, run offline) finds no serious or critical
  accessibility violation on any page of the table of contents at the phone's width, and on one
  page of each kind (``DESKTOP_AXE``) at the desktop's;
* no display equation is wider than its column (so none hides part of itself in a scroll box);
* every figure's smallest text is at least ``MIN_TEXT_PX`` CSS px as displayed, measured from
  the figure file (:mod:`tools.figure_text`): the glyph sizes of an SVG, or a PNG's recorded
  smallest font size and resolution, scaled by the width the page shows it at;
* at the desktop's width every figure is shown at its own size (an SVG's width, a coursefig
  PNG's width in inches at 96 CSS px an inch), so the labs' PNGs and the chapters' SVGs have
  text of one size, rather than a 400-dpi PNG filling the column at one px per pixel;
* clicking a figure opens it full screen, and Escape closes it.

Each page is opened once per width for the whole suite (tests/site_visits.py, shared with
tests/book/test_site.py); the tests read what that visit found.
Needs `make book` first. Without Chromium the tests skip with a reason, except under CI.
"""
from __future__ import annotations

import re
from urllib.parse import urljoin

import pytest

from tests.site_visits import DESKTOP_AXE, PAGES, WIDTHS
from tools.browser import SITE
from tools.figure_text import PNG_KEY, _natural_width_px, png_smallest_text_px, svg_smallest_text_px

pytestmark = pytest.mark.site

MIN_TEXT_PX = 10.0
# A page to start from, and a page the table of contents links to.
START, TARGET = "chapters/01-single-gpu.html", "chapters/02-kaplan.html"


@pytest.fixture(scope="module")
def measurements(site_visits):
    """{(path, width): what the suite's one visit found} (tests/site_visits.py)."""
    return site_visits[1]


def smallest_text(url: str, server: str, displayed_px: float) -> float | None:
    """The smallest text of the figure file behind ``url`` as displayed, in CSS px."""
    path = SITE / url[len(server):]
    if path.suffix == ".svg":
        return svg_smallest_text_px(path, displayed_px)
    if path.suffix == ".png":
        return png_smallest_text_px(path, displayed_px)
    return None


def _visible(page, selector: str) -> int:
    """How many links matching ``selector`` a reader can see (non-empty, inside the window)."""
    return page.evaluate("""(sel) => Array.from(document.querySelectorAll(sel)).filter(a => {
        const r = a.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth + 1
               && getComputedStyle(a).visibility !== 'hidden';
    }).length""", selector)


TOC_LINKS = "#pst-primary-sidebar a.reference, #pst-primary-sidebar-modal a.reference"
PAGE_LINKS = "#pst-secondary-sidebar a.nav-link, #pst-secondary-sidebar-modal a.nav-link"


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_table_of_contents_opens_closes_and_navigates(browser, server, width):
    page = browser.new_page(viewport={"width": width, "height": 844})
    try:
        page.goto(urljoin(server, START), wait_until="load")
        toggle = page.locator(".bd-header-article .primary-toggle")
        shown_at_start = _visible(page, TOC_LINKS)
        toggle.click()
        page.wait_for_timeout(400)
        after_tap = _visible(page, TOC_LINKS)
        if width < 992:  # a drawer: closed, tap opens it
            assert shown_at_start == 0 and after_tap > 5, (shown_at_start, after_tap)
            page.keyboard.press("Escape")
            page.wait_for_timeout(400)
            assert _visible(page, TOC_LINKS) == 0, "Escape did not close the table of contents"
            toggle.click()
            page.wait_for_timeout(400)
        else:  # a sidebar: shown, tap hides it, tap shows it again
            assert shown_at_start > 5 and after_tap == 0, (shown_at_start, after_tap)
            toggle.click()
            page.wait_for_timeout(400)
            assert _visible(page, TOC_LINKS) > 5, "the sidebar did not come back"
        link = page.locator(f'{TOC_LINKS.split(",")[0]}[href$="{TARGET.split("/")[-1]}"], '
                            f'{TOC_LINKS.split(",")[1].strip()}[href$="{TARGET.split("/")[-1]}"]').first
        link.click()
        page.wait_for_load_state("load")
        assert page.url.endswith(TARGET), page.url
    finally:
        page.close()


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_page_contents_open_and_navigate(browser, server, width):
    page = browser.new_page(viewport={"width": width, "height": 844})
    try:
        page.goto(urljoin(server, START), wait_until="load")
        toggle = page.locator(".bd-header-article .secondary-toggle")
        if toggle.is_visible():
            assert _visible(page, PAGE_LINKS) == 0
            toggle.click()
            page.wait_for_timeout(400)
        assert _visible(page, PAGE_LINKS) >= 2, "the page's contents are not shown"
        link = page.locator(PAGE_LINKS).filter(visible=True).nth(1)
        anchor = link.get_attribute("href")
        link.click()
        page.wait_for_timeout(400)
        assert anchor.startswith("#") and page.url.endswith(anchor), (page.url, anchor)
        assert _visible(page, PAGE_LINKS.split(",")[1]) == 0, "the drawer stayed open"
    finally:
        page.close()


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_axe_core_finds_no_serious_violation(measurements, width):
    checked = [path for (path, w), m in measurements.items() if w == width and m["axe"] is not None]
    assert len(checked) == (len(PAGES) if width == WIDTHS["phone"] else len(DESKTOP_AXE)) >= 5
    bad = {path: m["axe"] for (path, w), m in measurements.items() if w == width and m["axe"]}
    assert not bad, "\n".join(f"{path}: {v}" for path, v in bad.items())


def test_display_equations_fit_a_phone(measurements):
    bad = {path: m["equations"] for (path, w), m in measurements.items() if w == 390 and m["equations"]}
    assert not bad, "\n".join(f"{path}: {v}" for path, v in bad.items())


def test_small_tables_fit_a_phone(measurements):
    """A table of two or three columns of words reads on a 390 px phone without a sideways
    scroll (the chapters' comparison tables and the labs' index scrolled by 9 to 45 px)."""
    bad = {path: m["scrolling_small_tables"] for (path, w), m in measurements.items()
           if w == 390 and m["scrolling_small_tables"]}
    assert not bad, bad


def test_inline_code_breaks_between_words_on_a_phone(measurements):
    """On a 390 px phone a command in the text wraps at its spaces, dots and underscores, never
    inside a word: the labs' index showed ``python -m labs.colle`` / ``ctives --`` / ``nproc N``."""
    checked = [path for (path, w) in measurements if w == 390]
    assert len(checked) == len(PAGES)
    bad = {path: m["code_cut_mid_word"] for (path, w), m in measurements.items()
           if w == 390 and m["code_cut_mid_word"]}
    assert not bad, bad


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_figure_text_is_legible(site_visits, width):
    server, measurements = site_visits
    small, unmeasured, count = [], [], 0
    for (path, w), m in measurements.items():
        for url, shown in m["figures"] if w == width else ():
            count += 1
            px = smallest_text(url, server, shown)
            if px is None:
                unmeasured.append(f"{path}: {url.rsplit('/', 1)[-1]}")
            elif px < MIN_TEXT_PX:
                small.append(f"{path}: {url.rsplit('/', 1)[-1][:12]} {px:.1f}px")
    assert count > 20, f"only {count} figures found"
    assert not unmeasured, f"figures whose text size cannot be read: {unmeasured}"
    assert not small, f"figures with text under {MIN_TEXT_PX}px at {width}px:\n  " + "\n  ".join(small)


def natural_width(url: str, server: str) -> float | None:
    """The width in CSS px a figure file asks for: an SVG's own width; a PNG with coursefig's
    record, its width in inches at 96 px an inch; None for anything else."""
    from PIL import Image

    path = SITE / url[len(server):]
    if path.suffix == ".svg":
        return _natural_width_px(path.read_text(encoding="utf-8"))
    if path.suffix == ".png":
        with Image.open(path) as png:
            dpi = png.info.get("dpi", (0, 0))[0]
            return png.width / dpi * 96 if PNG_KEY in png.info and dpi else None
    return None


# The desktop's text column is 672 CSS px; a figure narrower than this is shown at its own size.
DESKTOP_FIGURE_ROOM = 600


def _sized_by_the_page(path: str) -> set[str]:
    """The figure files a page gives a width of its own (a figure's ``:width:``)."""
    html = (SITE / path).read_text(encoding="utf-8")
    return {m.group(1).rsplit("/", 1)[-1] for m in re.finditer(r'<img [^>]*src="([^"]+)"[^>]*style="width: [^"]+"', html)}


def test_figures_are_shown_at_their_own_size_on_a_desktop(site_visits):
    """A PNG figure at its width in inches; an SVG at its own width unless the page sets one."""
    server, measurements = site_visits
    wrong, pngs = [], 0
    for (path, w), m in measurements.items():
        sized = _sized_by_the_page(path) if w == WIDTHS["desktop"] else set()
        for url, shown in m["figures"] if w == WIDTHS["desktop"] else ():
            natural = natural_width(url, server)
            if natural is None or natural > DESKTOP_FIGURE_ROOM:
                continue
            if url.endswith(".svg") and url.rsplit("/", 1)[-1] in sized:
                continue  # the author chose its width
            pngs += url.endswith(".png")
            if abs(shown - natural) > 1.5:
                wrong.append(f"{path}: {url.rsplit('/', 1)[-1][:12]} shown {shown:.0f}px, its size {natural:.0f}px")
    assert pngs >= 5, f"only {pngs} PNG figures measured"
    assert not wrong, "figures not shown at their own size at 1280px:\n  " + "\n  ".join(wrong)


def test_a_figure_opens_full_screen(browser, server):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(urljoin(server, START), wait_until="load")
        figure = page.locator("article .cell_output img").first
        figure.click()
        page.wait_for_timeout(300)
        shown = page.evaluate("""() => { const d = document.querySelector('dialog.course-zoom');
            const img = d && d.querySelector('img'); return d && d.open ? [img.getAttribute('src'), img.getBoundingClientRect().width] : null }""")
        assert shown, "clicking a figure did not open it"
        assert shown[0].split("/")[-1] == figure.get_attribute("src").split("/")[-1]
        assert shown[1] > 0.9 * 390 - 20, f"the full-screen figure is {shown[1]}px wide"
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
        assert not page.evaluate("() => document.querySelector('dialog.course-zoom').open")
    finally:
        page.close()
