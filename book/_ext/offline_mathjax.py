"""Serve MathJax 3 from the built site instead of a CDN.

Sphinx points ``mathjax_path`` at a CDN by default, so a book built or read offline shows raw
TeX. The ``django-static-mathjax`` wheel ships MathJax 3's browser bundles; we copy the
self-contained SVG bundle (no web fonts to fetch) into ``_static/mathjax`` and load it from
there. Readers online and offline get the same typeset maths.
"""
from __future__ import annotations

import shutil
from pathlib import Path

BUNDLE = "tex-svg-full.js"


def _bundle_path() -> Path:
    import mathjax  # the django-static-mathjax distribution installs this package

    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / BUNDLE
    if not path.is_file():
        raise RuntimeError(f"MathJax bundle {BUNDLE} not found in {path.parent}")
    return path


def _use_local_mathjax(app, config):
    config.mathjax_path = f"mathjax/{BUNDLE}"


def _copy_bundle(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax" / BUNDLE
    source = _bundle_path()
    if not target.exists() or target.stat().st_size != source.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def setup(app):
    _bundle_path()  # fail early, with a clear message, when the wheel is missing
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("build-finished", _copy_bundle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
