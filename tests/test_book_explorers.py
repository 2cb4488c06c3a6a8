"""The book's interactive explorers, driven in headless Chromium the way a reader would.

At a desktop width (1280 px) and a phone width (390 px) each test moves every control of one
explorer to several values and checks that the figures on the page equal what `solutions/`
computes for those inputs, here, in the test (the page only looks up a table that the book's
build computed, so this catches a stale, mis-indexed or mis-formatted table). It also checks
that the page makes no request outside this machine (the explorers must work offline), logs no
console error and does not scroll sideways.

Needs the built book (`make book`). Without Chromium or the site the tests skip with a reason,
except under CI (CI=true), where that is a failure.
"""
from __future__ import annotations

import functools
import http.server
import math
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from solutions import scaling

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTHS = (1280, 390)

# The page shows four significant digits (counts, gigabytes, ratios) or three decimals (losses).
REL = 1e-3
ABS_LOSS = 1e-3

pytestmark = pytest.mark.site


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (SITE / "book" / "explore" / "chinchilla.html").exists():
        _unavailable(f"no built explorers under {SITE.relative_to(ROOT)}: run `make book` first")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
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


class Visit:
    """One explorer page at one width, with what it logged and requested."""

    def __init__(self, browser, server, name, width):
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.outside: list[str] = []
        local = urlparse(server).hostname

        def route(r):
            host = urlparse(r.request.url).hostname
            if r.request.url.startswith(("data:", "blob:")) or host in (local, "localhost"):
                r.continue_()
            else:
                self.outside.append(r.request.url)
                r.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        response = self.page.goto(f"{server}book/explore/{name}.html", wait_until="load")
        assert response is not None and response.ok, f"{name}: HTTP {response and response.status}"
        self.page.wait_for_selector(f'.explorer[data-explorer="{name}"][data-ready="true"]', timeout=10_000)
        self.root = self.page.locator(f'.explorer[data-explorer="{name}"]')

    def text(self, selector: str) -> str:
        return self.root.locator(selector).inner_text().strip()

    def finish(self):
        """The checks every visit ends with."""
        overflow = self.page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        self.context.close()
        assert not self.errors, f"console errors: {self.errors}"
        assert not self.outside, f"requests that left this machine: {self.outside}"
        assert overflow <= 0, f"the page scrolls sideways by {overflow} px"


def number(text: str) -> float:
    """Parse a displayed figure: '14.60 B', '1.142 T', '2,048 GB', '1.00e23 FLOPs', '12.5 %'."""
    m = re.search(r"(-?[\d,]*\.?\d+(?:e[+-]?\d+)?)\s*([KMBT%])?", text)
    assert m, f"no number in {text!r}"
    value = float(m.group(1).replace(",", ""))
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "%": 1e-2, None: 1.0}[m.group(2)]
    return value * scale


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def width(request):
    return request.param


# --------------------------------------------------------------------------
# Chinchilla
# --------------------------------------------------------------------------

#: The slider's scale: position i is a budget of 10**(18 + i/10) FLOPs.
def budget_at(i: int) -> float:
    return 10.0 ** (18 + i / 10)


SETS = ("hoffmann_rounded", "hoffmann_precise", "epoch_2024")


def test_chinchilla_explorer(browser, server, width):
    visit = Visit(browser, server, "chinchilla", width)
    slider = visit.root.locator('input[name="budget"]')
    checked = []
    for how, position in (("fill", 0), ("fill", 40), ("fill", 52), ("key", "End"), ("key", "ArrowLeft"),
                          ("fill", 73), ("key", "Home")):
        if how == "fill":
            slider.fill(str(position))
        else:
            slider.press(position)
        i = int(slider.input_value())
        C = budget_at(i)
        assert number(visit.text('[data-out="C"]')) == pytest.approx(C, rel=5e-3)  # shown to 3 digits
        for key in SETS:
            N, D, ratio, loss = scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[key])
            cell = lambda out: visit.text(f'td[data-set="{key}"][data-out="{out}"]')  # noqa: E731
            assert number(cell("N")) == pytest.approx(N, rel=REL), (key, C)
            assert number(cell("D")) == pytest.approx(D, rel=REL), (key, C)
            assert number(cell("ratio")) == pytest.approx(ratio, rel=REL), (key, C)
            assert number(cell("loss")) == pytest.approx(loss, abs=ABS_LOSS), (key, C)
        checked.append(i)
    assert checked == [0, 40, 52, 90, 89, 73, 0], checked
    visit.finish()
