"""Interactive explorers for the book: the numbers come from ``solutions/`` at build time.

The ``explorer`` directive (``{explorer} chinchilla``, ``memory`` or ``pipeline`` in a MyST
page) calls the course's tested functions over a grid of inputs and writes the results into
the page as JSON. A small script, ``book/_static/explore/explore.js``, draws the controls and
*looks values up* in that table: it computes no formula of its own, so what the reader sees
is exactly what the tests check. The script and its style sheet are copied into the built
site, so the explorers work offline and without a server (no CDN, no request at view time).
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ASSETS = HERE.parent / "_static" / "explore"
GB = 1e9


def _sig(x, digits=6):
    """A float rounded to ``digits`` significant digits (keeps the JSON small)."""
    return float(f"{float(x):.{digits}g}")


# --------------------------------------------------------------------------
# Chinchilla: compute-optimal N, D, D/N and loss under three constant sets
# --------------------------------------------------------------------------

#: log10 of the compute budgets on the slider, from 1e18 to 1e27 FLOPs in tenths of a decade.
CHINCHILLA_LOG10_C = np.round(np.arange(180, 271) / 10, 1)


def chinchilla_data() -> dict:
    import coursefig
    from solutions import scaling

    budgets = 10.0 ** CHINCHILLA_LOG10_C
    sets = []
    for colour, (key, label, short) in zip(coursefig.CYCLE, (
        ("hoffmann_rounded", "Hoffmann et al. 2022, as printed", "Hoffmann, printed"),
        ("hoffmann_precise", "Hoffmann et al. 2022, TeX source", "Hoffmann, TeX"),
        ("epoch_2024", "Epoch AI's 2024 replication", "Epoch AI"),
    )):
        c = scaling.CONSTANT_SETS[key]
        N, D, ratio, loss = scaling.compute_optimal_closed_form(budgets, c)
        sets.append({
            "key": key, "label": label, "short": short, "colour": colour, "cite": c.cite,
            "constants": {f: getattr(c, f) for f in ("E", "A", "B", "alpha", "beta")},
            "a": _sig(scaling.allocation_exponent(c)),
            "N": [_sig(x) for x in N], "D": [_sig(x) for x in D],
            "ratio": [_sig(x) for x in ratio], "loss": [_sig(x) for x in loss],
        })
    return {"log10C": [float(x) for x in CHINCHILLA_LOG10_C], "C": [_sig(x) for x in budgets],
            "default": int(np.argmin(np.abs(CHINCHILLA_LOG10_C - 23.0))), "sets": sets}


BUILDERS = {"chinchilla": chinchilla_data}
#: The modules whose change must rebuild an explorer page.
SOURCES = {"chinchilla": ["solutions/scaling.py"]}


class ExplorerDirective(SphinxDirective):
    """``{explorer} NAME``: the explorer's container and its table of values as JSON."""

    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0]
        if name not in BUILDERS:
            raise self.error(f"unknown explorer {name!r}; known: {', '.join(BUILDERS)}")
        for source in SOURCES[name] + ["book/_ext/explore.py"]:
            self.env.note_dependency(str(ROOT / source))
        payload = json.dumps(BUILDERS[name](), separators=(",", ":")).replace("</", "<\\/")
        html = (
            f'<div class="explorer" data-explorer="{name}">'
            f'<noscript>This explorer needs JavaScript.</noscript>'
            f'<script type="application/json" class="explorer-data">{payload}</script></div>'
        )
        return [nodes.raw("", html, format="html")]


def _add_assets(app, pagename, templatename, context, doctree):
    if 'class="explorer"' in context.get("body", ""):
        app.add_css_file("explore/explore.css")
        app.add_js_file("explore/explore.js", defer="defer")


def _copy_assets(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "explore"
    target.mkdir(parents=True, exist_ok=True)
    for source in ASSETS.iterdir():
        if source.is_file():
            shutil.copyfile(source, target / source.name)


def setup(app):
    app.add_directive("explorer", ExplorerDirective)
    app.connect("html-page-context", _add_assets)
    app.connect("build-finished", _copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
