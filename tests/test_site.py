"""The built book, as a reader's browser sees it: headless Chromium opens every page of the
table of contents and checks that it loads without console errors, that display maths is
typeset by MathJax, that every image loads, and that every internal link resolves.

Needs `make book` first (`make test` does it). Without Chromium the tests skip with a reason,
except under CI (CI=true), where a missing browser or site is a failure.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]

pytestmark = pytest.mark.site


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [f + ".html" for f in files]


PAGES = toc_pages()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        _unavailable(f"no built site at {SITE.relative_to(ROOT)}: run `make book` first")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        _unavailable(f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is pinned in requirements.txt
        _unavailable("the playwright package is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def _load(browser, url):
    """Open a page; return it with the console errors and uncaught exceptions it produced."""
    page = browser.new_page()
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


@pytest.mark.parametrize("path", PAGES)
def test_page(browser, server, path):
    """One visit per page: console, maths, images, links."""
    assert (SITE / path).exists(), f"{path} is in the table of contents but was not built"
    page, errors = _load(browser, urljoin(server, path))
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
    assert not problems, f"{path}:\n  " + "\n  ".join(problems)
