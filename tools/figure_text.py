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


def svg_font_sizes(svg: str) -> list[float]:
    """Every text size in a matplotlib SVG, in the SVG's user units (pt as drawn)."""
    sizes = []
    for block in _TEXT_GROUP.findall(svg):
        for scale in _GROUP_SCALE.findall(block):
            sizes.append(100 * float(scale))
            sizes += [100 * float(scale) * float(k) for k in _USE_SCALE.findall(block)]
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
