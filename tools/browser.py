"""What every look at the built book shares: the pages of the table of contents, a local
HTTP server over a folder, and a headless Chromium driven by Playwright.

Used by the browser tests (``tests/book/test_site.py``, ``tests/book/test_book_explorers.py``,
``tests/autograde/test_autograde_class.py``) and by ``tools/screenshots.py``. Chromium is Debian's
(``apt-get install chromium``) or the one ``CHROMIUM=/path`` names; the flags keep it from
reaching for the network, which this course's tests never need.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


class BrowserUnavailable(RuntimeError):
    """No Chromium, or no Playwright: the caller decides whether that is a skip or a failure."""


def toc_pages(toc_path: Path = ROOT / "book" / "_toc.yml") -> list[str]:
    """Every document of the table of contents, in reading order, as ``path.html``."""
    toc = yaml.safe_load(toc_path.read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", [{"chapters": toc.get("chapters")}]):
        walk(part.get("chapters"))
    return [f + ".html" for f in files]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on a free loopback port; yields the base URL (ending in ``/``)."""
    handler = functools.partial(_Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def chromium():
    """A headless Chromium (Playwright's ``Browser``); raises :class:`BrowserUnavailable`."""
    if not Path(CHROMIUM).exists():
        raise BrowserUnavailable(f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is pinned in requirements.txt
        raise BrowserUnavailable("the playwright package is not installed") from None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
