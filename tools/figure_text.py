"""How large a figure's text is, read from the figure file itself.

matplotlib draws the book's SVG text as glyph paths (``svg.fonttype: path``): each text
artist is a group ``<g transform="translate(x y) scale(s -s)">`` whose glyphs are 1/100 of the
font size, so the font size in the SVG's user units is ``100 s``; a mathtext sub- or
superscript is a glyph ``<use ... scale(k)>`` inside it, at ``100 s k``. Displayed, one user unit
is ``displayed width / viewBox width`` CSS px.

A PNG figure cannot be read like that, so :mod:`coursefig` writes the smallest font size of
the figure (pt) into the PNG's text chunk ``coursefig:smallest-text-pt`` when it saves it; with
the PNG's resolution (its ``pHYs`` dpi) that gives the smallest text in image pixels, and the
displayed size scales it by ``displayed width / natural width``.
"""
from __future__ import annotations

import re
from pathlib import Path

PNG_KEY = "coursefig:smallest-text-pt"

_TEXT_GROUP = re.compile(r'<g id="text_\d+">(.*?)(?=<g id="text_\d+">|<g id="(?:patch|line2d|legend|axes|figure)_\d+">|</svg>)', re.S)
_GROUP_SCALE = re.compile(r'<g transform="[^"]*scale\(([\d.]+) -[\d.]+\)"')
_USE_SCALE = re.compile(r'<use [^>]*transform="[^"]*scale\(([\d.]+)\)"')
_VIEWBOX = re.compile(r'viewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) [\d.]+"')


_CSS_SIZE = re.compile(r'font-size\s*[:=]\s*"?([\d.]+)(?:px)?')


def svg_font_sizes(svg: str) -> list[float]:
    """Every text size in a matplotlib SVG, in the SVG's user units (pt as drawn). An SVG
    drawn by hand (real ``<text>`` elements, such as the landing page's map) gives the
    ``font-size`` values of its attributes and style sheet instead."""
    sizes = []
    for block in _TEXT_GROUP.findall(svg):
        for scale in _GROUP_SCALE.findall(block):
            sizes.append(100 * float(scale))
            sizes += [100 * float(scale) * float(k) for k in _USE_SCALE.findall(block)]
    if not sizes and "<text" in svg:
        sizes = [float(v) for v in _CSS_SIZE.findall(svg)]
    return sizes


def svg_smallest_text_px(path: Path, displayed_width_px: float) -> float | None:
    """The smallest text of an SVG figure in CSS px as displayed ``displayed_width_px`` wide;
    None when the SVG holds no matplotlib text."""
    svg = Path(path).read_text(encoding="utf-8")
    sizes = svg_font_sizes(svg)
    box = _VIEWBOX.search(svg)
    if not sizes or not box:
        return None
    return min(sizes) * displayed_width_px / float(box.group(1))


def png_smallest_text_px(path: Path, displayed_width_px: float) -> float | None:
    """The smallest text of a PNG figure in CSS px as displayed; None without coursefig's
    record of its smallest font size."""
    from PIL import Image

    with Image.open(path) as image:
        smallest_pt = image.info.get(PNG_KEY)
        dpi = image.info.get("dpi", (72, 72))[0]
        natural = image.width
    if smallest_pt is None:
        return None
    return float(smallest_pt) / 72 * dpi * displayed_width_px / natural


def _natural_width_px(svg: str) -> float | None:
    """An SVG's own width in CSS px (matplotlib writes it in pt)."""
    m = re.search(r'<svg[^>]*\bwidth="([\d.]+)(pt|px)?"', svg)
    if not m:
        return None
    return float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1)


def notebook_figures(path: Path, columns: tuple[float, ...] = (342.0, 730.0)):
    """(cell index, kind, [smallest text px shown in each column]) for every figure output of a
    stored notebook, offline: an image is shown at its natural width or the column's, whichever
    is smaller (``max-width: 100%``). For quick before/after looks; the site test measures the
    real pages."""
    import base64
    import io
    import json

    from PIL import Image

    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/svg+xml" in data:
                svg = data["image/svg+xml"]
                svg = "".join(svg) if isinstance(svg, list) else svg
                sizes, box, natural = svg_font_sizes(svg), _VIEWBOX.search(svg), _natural_width_px(svg)
                if not sizes or not box or not natural:
                    yield index, "svg", [None] * len(columns)
                    continue
                yield index, "svg", [min(sizes) * min(natural, c) / float(box.group(1)) for c in columns]
            elif "image/png" in data:
                raw = base64.b64decode("".join(data["image/png"]))
                with Image.open(io.BytesIO(raw)) as image:
                    smallest_pt, dpi, natural = image.info.get(PNG_KEY), image.info.get("dpi", (72, 72))[0], image.width
                if smallest_pt is None:
                    yield index, "png", [None] * len(columns)
                    continue
                yield index, "png", [float(smallest_pt) / 72 * dpi * min(natural, c) / natural
                                     for c in columns]


def main(argv: list[str] | None = None) -> int:
    """Print the smallest text of every figure in the notebooks named, worst first."""
    import argparse

    parser = argparse.ArgumentParser(description="smallest figure text as displayed, from stored notebook outputs")
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--columns", nargs="+", type=float, default=[342.0, 730.0],
                        help="column widths in CSS px (default: a 390 px phone's and a 1280 px desktop's)")
    args = parser.parse_args(argv)
    rows = []
    for nb in args.notebooks:
        for index, kind, px in notebook_figures(nb, tuple(args.columns)):
            rows.append((px[0] if px[0] is not None else -1, f"{nb}", index, kind, px))
    for _, nb, index, kind, px in sorted(rows):
        shown = "  ".join("   n/a" if p is None else f"{p:6.1f}" for p in px)
        print(f"{shown}  {kind}  {nb} cell {index}")
    return 0


if __name__ == "__main__":

    raise SystemExit(main())
