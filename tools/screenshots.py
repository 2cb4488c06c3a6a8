"""Screenshots of every page of the built book at a desktop and a phone width, for looking at.

    python tools/screenshots.py                       # the public edition in _build/html
    python tools/screenshots.py --site _build/html-instructor --out _build/screenshots-instructor

Writes ``<out>/<width>/<page>.png`` (full-page captures; git ignores ``_build``) and prints,
per page and width, the document's scroll width when it is wider than the window. The pages
are the table of contents' (``book/_toc.yml``), so new pages are included as they are added.
Needs Chromium (``apt-get install chromium`` or ``CHROMIUM=/path``) and playwright.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "screenshots")
    parser.add_argument("--pages", nargs="*", help="only these pages (e.g. chapters/03-chinchilla.html)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"error: no built site at {args.site}: run `make book` first", file=sys.stderr)
        return 1
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        print(f"error: Chromium not found at {chromium}", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(args.site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    pages = args.pages or toc_pages()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        for name, (width, height) in WIDTHS.items():
            context = browser.new_context(viewport={"width": width, "height": height},
                                          device_scale_factor=1)
            for path in pages:
                page = context.new_page()
                page.goto(base + path, wait_until="load")
                page.evaluate("() => (window.MathJax && MathJax.startup && MathJax.startup.promise) || null")
                scroll = page.evaluate("() => document.documentElement.scrollWidth")
                target = args.out / name / (path.replace("/", "__").removesuffix(".html") + ".png")
                target.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(target), full_page=True)
                flag = f"  scrolls sideways: {scroll}px > {width}px" if scroll > width else ""
                print(f"{name:7} {path}{flag}")
                page.close()
            context.close()
        browser.close()
    httpd.shutdown()
    print(f"screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
