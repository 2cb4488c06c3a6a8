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
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the course's top folder holds `tools`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.browser import ROOT, SITE, BrowserUnavailable, chromium, serve, toc_pages

WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "screenshots")
    parser.add_argument("--pages", nargs="*", help="only these pages (e.g. chapters/03-chinchilla.html)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"error: no built site at {args.site}: run `make book` first", file=sys.stderr)
        return 1
    pages = args.pages or toc_pages()
    try:
        with serve(args.site) as base, chromium() as browser:
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
    except BrowserUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
