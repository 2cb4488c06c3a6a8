"""One visit per page of the built book and width, shared by tests/book/test_site.py and
tests/book/test_site_reader.py: each page of the table of contents is opened once at a phone's width
(390 px) and once at a desktop's (1280 px), and everything both files check is read in that visit.

The visits are split between two headless Chromiums (the second on a thread of its own), page
by page in turn, so that both cores work all along; the site took two visits per page and width
before, about three minutes of the suite.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urljoin

from tools.browser import ROOT, toc_pages

PAGES = toc_pages()
WIDTHS = {"phone": 390, "desktop": 1280}
AXE_VERSION = "4.11.0"
AXE = ROOT / "tests" / "assets" / "axe-core" / "axe.min.js"
# Every page is one template around its content. At the phone's width axe-core checks every page
# (the content, in the narrow layout where tables and code must scroll); at the desktop's, one page
# of each kind (the wide layout's sidebar and header): the first of each folder, and the first
# chapter with its tables and figures. axe-core takes about a second a page.
DESKTOP_AXE = sorted({"chapters/01-single-gpu.html"} | {next(p for p in PAGES if p.rpartition("/")[0] == folder)
                                                        for folder in {p.rpartition("/")[0] for p in PAGES}})

_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id} (${v.impact}, ${v.nodes.length} nodes): ` +
              v.nodes.slice(0, 3).map(n => n.target.join(' ')).join('; '));
}"""

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

# Display equations whose typeset width exceeds the box MathJax draws them in: the column, less
# the equation number beside a numbered equation (a wider one hides its end in a scroll box).
_WIDE_EQUATIONS_JS = """() => Array.from(document.querySelectorAll('article mjx-container[display="true"]'))
  .map(box => {
    const math = box.querySelector('svg, mjx-math');  // MathJax's SVG or CommonHTML output
    const style = getComputedStyle(box);
    const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return [(box.closest('[id]') || {}).id || box.textContent.slice(0, 40),
            Math.round(math ? math.getBoundingClientRect().width : box.scrollWidth), Math.round(room)];
  })
  .filter(([, width, room]) => width > room + 1)
  .map(([id, width, room]) => `${id}: ${width}px in a ${room}px column`)"""

# Cell outputs wider than their own box, at the desktop's width: a table or printout whose right
# part is cut off or hidden behind a scroll bar.
_CUT_OFF_JS = """() => Array.from(document.querySelectorAll(
    'article .cell_output pre, article .cell_output .output, article .cell_output table, ' +
    'article .cell_output .pst-scrollable-table-container'))
  .filter(el => el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
  .filter(el => !el.parentElement.closest('.cell_output pre, .cell_output table'))
  .map(el => `${el.tagName.toLowerCase()} ${el.scrollWidth}px in ${el.clientWidth}px: ` +
             el.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50))"""

# The pages' own tables (not cell outputs) of at most three columns that scroll sideways: on a
# phone, three columns of words fit the column once the cells are compact (book/_static/course.css).
_SCROLLING_SMALL_TABLES_JS = """() => Array.from(document.querySelectorAll('article .pst-scrollable-table-container'))
  .filter(box => !box.closest('.cell_output') && box.clientWidth > 0)
  .map(box => [box, box.querySelector('table')])
  .filter(([box, t]) => t && t.rows[0] && t.rows[0].cells.length <= 3 && box.scrollWidth > box.clientWidth + 1)
  .map(([box, t]) => t.rows[0].textContent.trim().replace(/\\s+/g, ' ').slice(0, 50) +
                     `: ${box.scrollWidth}px in ${box.clientWidth}px`)"""

# Inline code that a line break cuts inside a word ("labs.colle" / "ctives") or inside an
# option's leading dashes ("--" / "nproc"): each as "before|after" the break. A break at a
# space, or after a dot, underscore, slash or inner hyphen (book/_ext/course_site.py, item 11),
# is where a reader expects one.
_CODE_CUT_MID_WORD_JS = """() => {
  const bad = [];
  const alnum = c => /[A-Za-z0-9]/.test(c);
  for (const code of document.querySelectorAll('article code')) {
    if (code.closest('pre') || code.getClientRects().length < 2) continue;
    const chars = [], tops = [];
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (let i = 0; i < n.length; i++) {
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const box = r.getBoundingClientRect();
        chars.push(n.data[i]); tops.push(box.height ? box.top : null);
      }
    }
    const text = chars.join('');
    let prev = -1;
    for (let i = 0; i < chars.length; i++) {
      if (tops[i] === null || /\\s/.test(chars[i])) continue;
      if (prev >= 0 && i === prev + 1 && tops[i] > tops[prev] + 2) {
        const a = chars[prev], b = chars[i];
        const optionDash = a === '-' && (prev === 0 || /[-\\s]/.test(chars[prev - 1]));
        if ((alnum(a) && alnum(b)) || optionDash)
          bad.push(text.slice(Math.max(0, prev - 15), prev + 1) + '|' + text.slice(i, i + 15));
      }
      prev = i;
    }
  }
  return bad;
}"""

# The theme's icons are drawn by book/_static/course-icons.css: an icon class without a rule
# there shows nothing.
_BLANK_ICONS_JS = """() => Array.from(document.querySelectorAll('[class*="fa-"]'))
  .filter(el => el.getClientRects().length && el.getBoundingClientRect().width > 0)
  .filter(el => ['mask-image', '-webkit-mask-image'].every(p => {
      const v = getComputedStyle(el).getPropertyValue(p); return !v || v === 'none'; }))
  .map(el => el.className)"""

_FIGURES_JS = """() => Array.from(document.querySelectorAll('article .cell_output img, article figure img'))
  .filter(img => img.clientWidth > 0)
  .map(img => [img.getAttribute('src'), img.getBoundingClientRect().width])"""

_UNTYPESET_JS = """() => Array.from(document.querySelectorAll('div.math, span.math'))
  .filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 60))"""

_BROKEN_IMAGES_JS = """() => Array.from(document.images)
  .filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.src)"""

# Elements of the article that stick out of the window without a scroll box of their own.
_WIDE_JS = """(w) => Array.from(document.querySelectorAll('article *'))
  .filter(el => el.getBoundingClientRect().right > w + 1 && el.getClientRects().length)
  .filter(el => !el.closest('[style*=overflow], .pst-scrollable-table-container, .output, div.math, mjx-container, pre, .highlight'))
  .slice(0, 3).map(el => el.tagName.toLowerCase() + '.' + el.className)"""


def _visit(page, server: str, path: str, width: int) -> dict:
    """What one page shows at one width (``errors``: console errors and uncaught exceptions)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    url = urljoin(server, path)
    response = page.goto(url, wait_until="load")
    status = response.status if response is not None else None
    page.evaluate("() => (window.MathJax && MathJax.startup && MathJax.startup.promise) || null")
    found = {
        "status": status,
        "untypeset": page.evaluate(_UNTYPESET_JS),
        "body_text": page.inner_text("article") if page.query_selector("article") else page.inner_text("body"),
        "broken_images": page.evaluate(_BROKEN_IMAGES_JS),
        "hrefs": page.evaluate("() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"),
        "scroll_width": page.evaluate("() => document.documentElement.scrollWidth"),
        "wide": page.evaluate(_WIDE_JS, width),
        "blurry": page.evaluate(_BLURRY_JS),
        "prose": page.evaluate(_PROSE_JS),
        "empty_toggles": page.evaluate(_EMPTY_TOGGLES_JS),
        "article": page.evaluate("() => (document.querySelector('article') || document.body).textContent"),
        "equations": page.evaluate(_WIDE_EQUATIONS_JS),
        "figures": [(urljoin(url, src), shown) for src, shown in page.evaluate(_FIGURES_JS)],
        "cut_off": page.evaluate(_CUT_OFF_JS),
        "scrolling_small_tables": page.evaluate(_SCROLLING_SMALL_TABLES_JS),
        "code_cut_mid_word": page.evaluate(_CODE_CUT_MID_WORD_JS) if width == WIDTHS["phone"] else [],
        "blank_icons": page.evaluate(_BLANK_ICONS_JS),
        "axe": None,  # not run at this width
    }
    # The page's own errors, before axe-core runs: axe fetches the stylesheets again itself
    # (resolving one @import against the page, a 404 of its own making).
    found["errors"] = list(errors)
    if width != WIDTHS["desktop"] or path in DESKTOP_AXE:
        page.add_script_tag(path=str(AXE))
        found["axe"] = page.evaluate(_AXE_RUN)
    return found


def _visit_all(browser, server: str, visits: list[tuple[str, int]]) -> dict:
    found, contexts = {}, {}
    for path, width in visits:
        if width not in contexts:
            contexts[width] = browser.new_context(viewport={"width": width, "height": 844})
        page = contexts[width].new_page()
        try:
            found[path, width] = _visit(page, server, path, width)
        finally:
            page.close()
    for context in contexts.values():
        context.close()
    return found


def _visit_all_in_own_browser(server: str, visits: list[tuple[str, int]]) -> dict:
    from tools.browser import chromium

    with chromium() as browser:  # Playwright's sync API: one instance per thread
        return _visit_all(browser, server, visits)


def visit_every_page(browser, server: str) -> dict:
    """``{(path, width): what that visit found}`` for every page of ``PAGES`` at both widths."""
    if not AXE.exists():
        raise FileNotFoundError(f"axe-core {AXE_VERSION} is missing at {AXE.relative_to(ROOT)}")
    if f"axe v{AXE_VERSION}" not in AXE.read_text(encoding="utf-8")[:200]:
        raise ValueError(f"{AXE.relative_to(ROOT)} is not axe-core {AXE_VERSION}")
    visits = [(path, width) for width in WIDTHS.values() for path in PAGES]
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(_visit_all_in_own_browser, server, visits[1::2])
        found = _visit_all(browser, server, visits[::2])
        found.update(other.result())
    return found
