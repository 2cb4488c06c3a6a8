"""Small site fixes for the book, kept in one local Sphinx extension.

1. Serve MathJax 3 from the built site instead of a CDN. Sphinx points ``mathjax_path`` at a
   CDN by default, so a book built or read offline shows raw TeX. The
   ``django-static-mathjax`` wheel ships MathJax 3's browser bundles; we copy the
   self-contained SVG bundle (no web fonts to fetch) into ``_static/mathjax`` and load it from
   there. Readers online and offline get the same typeset maths.
2. Emit each inline script once. With Jupyter Book 1.0.4, sphinx-thebe's configuration script
   (``const THEBE_JS_URL = ...``) is registered twice, and the second ``const`` throws in the
   browser on every page.
3. Give the theme a valid colour mode ("auto": follow the reader's system setting); left
   empty, pydata-sphinx-theme logs a console error on every page.
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


def _configure(app, config):
    config.mathjax_path = f"mathjax/{BUNDLE}"
    config.html_context.setdefault("default_mode", "auto")


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (str(getattr(script, "filename", script) or ""),
               tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # In place and early: html-page-context stops at the first handler that returns a value.
    context["script_files"][:] = unique


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
    app.connect("config-inited", _configure, priority=900)
    app.connect("html-page-context", _dedupe_scripts, priority=1)
    app.connect("build-finished", _copy_bundle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
