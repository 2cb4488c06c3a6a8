"""How much a reader's browser downloads to show each page of the built book the first time
(an empty cache): every request the page makes until it is settled, MathJax's typesetting, its
web fonts and the explorers' data included.

    python benchmarks/page_weight.py                      # the public edition in _build/html
    python benchmarks/page_weight.py --site DIR --json out.json

Prints, per page of the table of contents, the requests made and their bytes as served
(uncompressed, as a plain static server sends them) and gzip-compressed (about what a host
that compresses, as GitHub Pages does, sends), heaviest first, then the largest files of the
heaviest page. Needs Chromium and playwright (tools/browser.py).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the course's top folder holds `tools`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.browser import SITE, BrowserUnavailable, chromium, serve, toc_pages

#: A phone's viewport: what a reader on the slowest link sees first.
VIEWPORT = {"width": 390, "height": 844}

_SETTLED = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
}"""


def page_weight(browser, url: str) -> list[dict]:
    """``[{url, bytes, gzip_bytes}]`` for every response of one first visit to ``url``."""
    context = browser.new_context(viewport=VIEWPORT)  # a fresh context: nothing cached
    page = context.new_page()
    responses = []
    page.on("response", lambda response: responses.append(response))
    try:
        page.goto(url, wait_until="load")
        page.evaluate(_SETTLED)
        page.wait_for_load_state("networkidle")
        found = []
        for response in responses:
            try:
                body = response.body()
            except Exception:  # noqa: BLE001 - a redirect or an aborted request has no body
                continue
            found.append({"url": response.url, "bytes": len(body), "gzip_bytes": len(gzip.compress(body, 6))})
        return found
    finally:
        context.close()


def measure(site: Path, pages: list[str]) -> dict:
    """``{page: [responses]}`` for each page of ``pages`` under ``site``."""
    with serve(site) as base, chromium() as browser:
        return {path: page_weight(browser, base + path) for path in pages}


def _kb(n: int) -> str:
    return f"{n / 1e3:,.0f} kB"


def report(found: dict) -> str:
    rows = sorted(((sum(r["bytes"] for r in rs), sum(r["gzip_bytes"] for r in rs), len(rs), path)
                   for path, rs in found.items()), reverse=True)
    width = max(len(path) for *_, path in rows)
    lines = [f"{'page':<{width}}  {'requests':>8}  {'as served':>10}  {'gzipped':>9}"]
    lines += [f"{path:<{width}}  {n:>8}  {_kb(b):>10}  {_kb(g):>9}" for b, g, n, path in rows]
    heaviest = rows[0][3]
    lines += ["", f"heaviest page: {heaviest}, {_kb(rows[0][0])} as served ({_kb(rows[0][1])} gzipped); "
                  f"median page {_kb(sorted(r[0] for r in rows)[len(rows) // 2])}",
              "its largest files:"]
    for r in sorted(found[heaviest], key=lambda r: -r["bytes"])[:8]:
        lines.append(f"  {_kb(r['bytes']):>9}  {r['url'].split('/', 3)[-1].split('?')[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--pages", nargs="*", help="only these pages (e.g. chapters/03-chinchilla.html)")
    parser.add_argument("--json", type=Path, help="also write every response's size here")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"error: no built site at {args.site}: run `make book` first", file=sys.stderr)
        return 1
    try:
        found = measure(args.site, args.pages or toc_pages())
    except BrowserUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report(found))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
