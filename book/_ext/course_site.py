"""Small site fixes for the book, kept in one local Sphinx extension.

1. Serve MathJax 3 from the built site instead of a CDN, and only the parts a page needs.
   Sphinx points ``mathjax_path`` at a CDN by default, so a book built or read offline shows
   raw TeX. The ``django-static-mathjax`` wheel ships MathJax 3's components; we copy the
   loader (``startup.js``) and its core, the TeX input, the CommonHTML output with its web
   fonts (a page fetches only the fonts its maths uses), the TeX extensions that ``autoload``
   fetches when a page uses one, and the assistive MathML that screen readers read, into
   ``_static/mathjax`` (:data:`MATHJAX_COMPONENTS`). A page with maths downloads about a
   third of what the all-in-one SVG bundle weighed (``benchmarks/page_weight.py``).
2. Emit each inline script once. With Jupyter Book 1.0.4, sphinx-thebe's configuration script
   (``const THEBE_JS_URL = ...``) is registered twice, and the second ``const`` throws in the
   browser on every page.
3. Give the theme a valid colour mode ("auto": follow the reader's system setting); left
   empty, pydata-sphinx-theme logs a console error on every page.
4. Build one of two editions from the same sources (``course_edition``; the environment
   variable ``COURSE_EDITION`` overrides it, which is how ``make book-instructor`` asks):

   * ``public`` (the default, what ``make book`` builds and the site publishes): every code
     cell that holds a worked solution (lines between ``### BEGIN SOLUTION`` and
     ``### END SOLUTION``) shows the student's stub instead, made by the same function that
     writes the student notebook (``instructor/student_notebook.py``), and none of its outputs;
     cells that call an exercise function or ``self_check`` lose their printed outputs (what
     the reference prints is the answer) but keep figures. A cell whose code was collapsed
     and that has nothing left to show is shown open, so no toggle opens onto nothing. The
     page's downloadable sources (``_sources/``) are replaced by the student notebook.
   * ``instructor``: everything, with each worked solution behind a toggle labelled
     "Solution".

   The execution cache is shared: both editions render the same executed notebooks.
5. Add the course's styles (``book/_static/course.css``): wide tables, long equations and
   printed logs scroll inside their own box, so no page scrolls sideways at 390 px.
6. Make the site usable on a phone and by keyboard and screen reader (``book/_static/course.js``):
   the header's sidebar toggles work (see the script), the bibliography's entries are list
   items, and a click on a figure shows it full screen.
7. Show the labs' PNG figures at the scale of the chapters' SVGs. A browser shows a PNG at one
   CSS px per image pixel, so a 400-dpi figure (``coursefig.PNG_DPI``) would fill the whole
   column, its text half again as large as the prose, while an SVG figure is shown at its
   size in inches (96 CSS px an inch). Each PNG figure that carries coursefig's record gets
   that width too (``max-width: 100%`` still shrinks it to a phone's column).
8. No icon font and no icon script: pydata-sphinx-theme loads Font Awesome's JavaScript (1.5 MB)
   on every page, which turns each ``<i class="fa-...">`` into an SVG, and its style sheet
   would fetch two icon fonts. The script tag is taken out of every page
   (:func:`_drop_icon_script`), and ``book/_static/course-icons.css`` draws the few icons the
   theme uses with small SVGs of the course's own, as CSS masks in the text colour.
9. Offer no launch, repository or issues button while ``repository.url`` in ``_config.yml``
   is still the placeholder (:data:`PLACEHOLDER_REPOSITORY`): those buttons, and the labs'
   "Open in Colab" and "Open in Kaggle" badges, would lead to a repository that does not
   exist yet. Each badge is replaced by a line that says where the buttons will be and how to
   run the notebook meanwhile. Setting the real address brings all of them back.
10. Number each lab's figures and tables by lab (Fig. L2.1 is Lab 2's first figure) rather
   than with one counter for every page outside the numbered sections; the other unnumbered
   pages keep one counter between them (:func:`_number_lab_figures`).
11. Let inline code break where a reader would (:func:`_code_breaks`): at its spaces, after a
   dot, an underscore or a slash, and at a hyphen between two letters or digits, never inside a
   word or an option's leading dashes. Sphinx writes each space-separated word of inline code
   as a ``span.pre``; each is split at those places into spans that do not wrap, with a
   ``<wbr>`` between them. On a phone ``python -m labs.collectives --nproc N`` then wraps as
   ``python -m labs.`` / ``collectives --nproc N``, where a rule that let code break anywhere
   had cut it into ``labs.colle`` / ``ctives --`` / ``nproc N``. Copying the text is unchanged.
12. Keep a table cell's figure on one line with its unit (:func:`_figures_keep_units`): a cell
   that holds only a figure and a unit (``1,120.0 GB``, ``0.054 s``, ``2.12 GB/s``) has them
   wrapped in a ``span.course-figure`` that does not wrap (``book/_static/course.css``), so a
   narrow column never shows ``1,120.0`` over ``GB``, as section 6's table of layouts did
   even at a desktop's width. The cell's text is unchanged.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from docutils import nodes
from sphinx.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # instructor.student_notebook, for the public edition's stubs
    sys.path.insert(0, str(ROOT))

EDITIONS = ("public", "instructor")

#: MathJax 3 components copied into the site (paths under the wheel's ``es5`` folder). The
#: loader fetches ``MATHJAX_LOAD`` itself; ``autoload`` fetches an extension when a page uses it.
MATHJAX_COMPONENTS = ("startup.js", "core.js", "input/tex.js", "input/tex/extensions", "output/chtml.js",
                      "output/chtml/fonts/tex.js", "output/chtml/fonts/woff-v2", "a11y/assistive-mml.js")
MATHJAX_LOAD = ["input/tex", "output/chtml", "a11y/assistive-mml"]


def _mathjax_root() -> Path:
    import mathjax  # the django-static-mathjax distribution installs this package

    root = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    missing = [c for c in MATHJAX_COMPONENTS if not (root / c).exists()]
    if missing:
        raise RuntimeError(f"MathJax components {missing} not found in {root}")
    return root


#: ``repository.url`` in ``_config.yml`` until the course has a public home (item 9).
PLACEHOLDER_REPOSITORY = "https://github.com/llm-course/scaling-distributed-training"
#: Where launch badges point (a notebook on Colab or Kaggle, fetched from the repository).
LAUNCH_SITES = ("https://colab.research.google.com/", "https://kaggle.com/kernels/welcome")


def repository_is_placeholder(config) -> bool:
    url = (config.html_theme_options or {}).get("repository_url") or ""
    return not url or url.rstrip("/") == PLACEHOLDER_REPOSITORY


def _configure(app, config):
    config.mathjax_path = "mathjax/startup.js"
    config.mathjax3_config = {**(config.mathjax3_config or {}), "loader": {"load": MATHJAX_LOAD}}
    config.html_context.setdefault("default_mode", "auto")
    config.course_edition = os.environ.get("COURSE_EDITION") or config.course_edition
    if config.course_edition not in EDITIONS:
        raise ConfigError(f"course_edition (or COURSE_EDITION) must be one of {', '.join(EDITIONS)}, "
                          f"not {config.course_edition!r}")
    config.html_context["course_edition"] = config.course_edition
    if repository_is_placeholder(config):  # item 9: nothing to launch from yet
        options = dict(config.html_theme_options or {})
        options.update(launch_buttons={}, use_repository_button=False, use_issues_button=False,
                       use_edit_page_button=False)
        config.html_theme_options = options
    static = str(Path(__file__).resolve().parents[1] / "_static")
    if static not in config.html_static_path:
        config.html_static_path.append(static)


def _code_cells(doctree):
    return list(doctree.findall(
        lambda n: isinstance(n, nodes.container) and n.get("nb_element") == "cell_code"))


def _part(cell, element):
    return next((c for c in cell.children if c.get("nb_element") == element), None)


def _is_figure(node) -> bool:
    return bool(list(node.findall(nodes.image)))


def _apply_edition(app, doctree):
    """Turn each worked solution into the student's stub (public) or label it (instructor)."""
    from instructor.student_notebook import BEGIN, EXERCISE_FUNCTIONS, strip_solutions

    calls = re.compile(r"(?<!def )\b(" + "|".join(EXERCISE_FUNCTIONS + ("self_check",)) + r")\s*\(")
    public = app.config.course_edition == "public"
    cells = []
    for cell in _code_cells(doctree):
        source_part = _part(cell, "cell_code_source")
        block = next(iter(source_part.findall(nodes.literal_block)), None) if source_part else None
        if block is not None:
            source = block.astext()
            cells.append((cell, block, source, any(line.strip() == BEGIN for line in source.splitlines())))
    if not any(has_solution for *_, has_solution in cells):
        return  # a page without exercises is the same in both editions
    for cell, block, source, has_solution in cells:
        if not public:
            if has_solution:
                cell["hide_mode"] = "input"
                cell["prompt_show"] = "Solution (try the exercise first)"
                cell["prompt_hide"] = "Hide the solution"
            continue
        output = _part(cell, "cell_code_output")
        if has_solution:
            stub, _, _ = strip_solutions(source, f"{app.env.docname}, a solution cell")
            new = nodes.literal_block(stub, stub, **{k: v for k, v in block.attributes.items()
                                                     if k not in ("ids", "names")})
            block.replace_self(new)
            if output is not None:
                cell.remove(output)
            cell.attributes.pop("hide_mode", None)
        elif output is not None and calls.search(source):
            for child in list(output.children):
                if not _is_figure(child):
                    output.remove(child)
            if not output.children:
                cell.remove(output)
        if cell.get("hide_mode") == "input" and _part(cell, "cell_code_output") is None:
            cell.attributes.pop("hide_mode", None)  # nothing to show under the toggle: show the code


def _student_sources(app, exception):
    """Public edition: the page's downloadable sources (``_sources/<page>.md`` and ``.ipynb``,
    behind the download button) are the student notebook, not the master."""
    if exception is not None or app.builder.format != "html" or app.config.course_edition != "public":
        return
    import jupytext
    import nbformat
    from instructor.student_notebook import BEGIN, student_notebook

    for docname in app.env.found_docs:
        source = Path(app.env.doc2path(docname))
        if source.suffix not in (".md", ".ipynb") or BEGIN not in source.read_text(encoding="utf-8"):
            continue
        student = student_notebook(jupytext.read(source))
        for target in (Path(app.outdir) / "_sources" / docname).parent.glob(Path(docname).name + ".*"):
            if target.suffix == ".ipynb":
                nbformat.write(student, target)
            elif target.suffix in (".md", ".txt"):
                jupytext.write(student, target, fmt="md:myst")


def _png_figure_widths(app, doctree, docname):
    """Give each coursefig PNG its width in inches as CSS px (item 7 of the module's list)."""
    from PIL import Image

    from tools.figure_text import PNG_KEY

    for image in doctree.findall(nodes.image):
        uri = image.get("candidates", {}).get("image/png") or image.get("uri", "")
        if image.get("width") or not uri.endswith(".png"):
            continue
        path = Path(uri) if Path(uri).is_absolute() else Path(app.srcdir) / uri
        if not path.is_file():
            continue
        with Image.open(path) as png:
            dpi, natural, recorded = png.info.get("dpi", (0, 0))[0], png.width, PNG_KEY in png.info
        if recorded and dpi > 0:
            image["width"] = f"{round(natural / dpi * 96)}px"


def _unpublished_badges(app, doctree, docname):
    """Replace each paragraph of launch badges by a line saying they come with the repository
    (item 9), while ``repository.url`` is the placeholder."""
    if not repository_is_placeholder(app.config):
        return
    for paragraph in list(doctree.findall(nodes.paragraph)):
        links = [r for r in paragraph.findall(nodes.reference) if r.get("refuri", "").startswith(LAUNCH_SITES)]
        words = any(t.astext().strip() for t in paragraph.findall(nodes.Text))
        if not links or words:  # badges only: images inside links, no words
            continue
        note = nodes.paragraph(classes=["launch-unpublished"])
        note += nodes.Text("Buttons to open this notebook on Colab or Kaggle appear here once the course's "
                           "repository is published. Until then, run it from your own copy of the course: ")
        howto = "labs/00-running-the-labs"
        if docname != howto and howto in app.env.found_docs:
            note += nodes.reference("", "Running the labs", internal=True,
                                    refuri=app.builder.get_relative_uri(docname, howto))
            note += nodes.Text(" says how.")
        else:
            note += nodes.Text("this page says how.")
        paragraph.replace_self(note)


LAB_DOC = re.compile(r"^labs/(\d+)-")


def _number_lab_figures(app, env):
    """Item 10: figures (and tables, code listings) of ``labs/NN-*`` are numbered per lab, as
    ("L2", 1) -> "Fig. L2.1"; the other pages outside the numbered sections share one counter.
    Runs after Sphinx has numbered everything (``env-get-updated``) and renumbers only what has
    no section number, in the order Sphinx found it."""
    changed = set()
    for figtype in {t for per_doc in env.toc_fignumbers.values() for t in per_doc}:
        found = sorted((number, docname, figure)
                       for docname, per_doc in env.toc_fignumbers.items()
                       for figure, number in per_doc.get(figtype, {}).items()
                       if len(number) == 1)
        shared, per_lab = 0, {}
        for old, docname, figure in found:
            lab = LAB_DOC.match(docname)
            if lab:
                per_lab[docname] = per_lab.get(docname, 0) + 1
                number = (f"L{int(lab.group(1))}", per_lab[docname])
            else:
                shared += 1
                number = (shared,)
            if number != old:
                env.toc_fignumbers[docname][figtype][figure] = number
                changed.add(docname)
    return sorted(changed)  # to be written again: Sphinx compared its own numbers, not these


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


def _list_items(app, pagename, templatename, context, doctree):
    """The bibliography's entries are items of its list. docutils writes ``role="list"`` on the
    citation list but ``role="doc-biblioentry"`` on each entry, a role ARIA 1.3 deprecates and
    that does not count as a list item, so a screen reader (and axe-core's
    aria-required-children rule) finds a list without items."""
    body = context.get("body")
    if body and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


#: Where a word of inline code may break (item 11), always after a letter or digit: after
#: underscores or slashes before a letter or digit (``carlosabe_`` / ``100517_``), after dots
#: before a letter (``labs.`` / ``ddp``, not ``1.`` / ``5e12``), and after a hyphen between
#: two letters or digits (``fsdp-`` / ``cpu``, not ``-`` / ``-nproc``).
CODE_BREAK_AFTER = re.compile(r"[A-Za-z0-9](?:[/_]+(?=[A-Za-z0-9])|\.+(?=[A-Za-z_])|-(?=[A-Za-z0-9]))")
_PRE_WORD = re.compile(r'<span class="pre">([^<]*)</span>')


def code_word_parts(word: str) -> list[str]:
    """``word`` (HTML-escaped text of one word of inline code) cut where it may break."""
    cuts = [0] + [m.end() for m in CODE_BREAK_AFTER.finditer(word)] + [len(word)]
    return [word[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _split_code_word(match) -> str:
    parts = code_word_parts(match.group(1))
    if len(parts) < 2:
        return match.group(0)
    return "<wbr>".join(f'<span class="pre">{p}</span>' for p in parts)


def _code_breaks(app, pagename, templatename, context, doctree):
    """Item 11 of the module's list: break opportunities inside inline code's words."""
    body = context.get("body")
    if body and '<span class="pre">' in body:
        context["body"] = _PRE_WORD.sub(_split_code_word, body)


#: A table cell that is one figure and its unit (item 12), as Sphinx writes a cell: the text,
#: maybe inside a paragraph.
FIGURE_UNITS = ("GB/s", "GFLOP/s", "TFLOP/s", "GiB", "GB", "MiB", "MB", "TB", "TiB", "bytes",
                "µs", "ms", "s", "min", "h", "days", "weeks", "years")
_FIGURE_CELL = re.compile(
    r"(<td\b[^>]*>\s*(?:<p>)?)"
    r"([-+\u2212~\u2248]?\d[\d.,]*(?:\s|&nbsp;)+(?:" + "|".join(re.escape(u) for u in FIGURE_UNITS) + r"))"
    r"(?=(?:</p>)?\s*</td>)")


def figures_keep_units(body: str) -> str:
    """``body`` with each table cell's lone figure and unit in a ``span.course-figure``."""
    return _FIGURE_CELL.sub(lambda m: f'{m.group(1)}<span class="course-figure">{m.group(2)}</span>', body)


def _figures_keep_units(app, pagename, templatename, context, doctree):
    """Item 12 of the module's list: a figure and its unit stay on one line in a table."""
    body = context.get("body")
    if body and "<td" in body:
        context["body"] = figures_keep_units(body)


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    root, target = _mathjax_root(), Path(app.outdir) / "_static" / "mathjax"
    for component in MATHJAX_COMPONENTS:
        source = root / component
        for path in sorted(source.rglob("*")) if source.is_dir() else [source]:
            copy = target / path.relative_to(root)
            if path.is_file() and (not copy.exists() or copy.stat().st_size != path.stat().st_size):
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
    stale = target / "tex-svg-full.js"  # the all-in-one bundle of earlier builds
    if stale.exists():
        stale.unlink()


#: The theme's ``<script>`` for Font Awesome (pydata-sphinx-theme's webpack-macros.html).
ICON_SCRIPT = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')


def _drop_icon_script(app, exception):
    """Take Font Awesome's script out of every page written (item 8 of the module's list)."""
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        lean = ICON_SCRIPT.sub("", text)
        if lean != text:
            page.write_text(lean, encoding="utf-8")


def setup(app):
    _mathjax_root()  # fail early, with a clear message, when the wheel is missing
    app.add_config_value("course_edition", "public", "env", [str])
    app.connect("config-inited", _configure, priority=900)
    app.connect("doctree-read", _apply_edition)
    app.connect("doctree-resolved", _png_figure_widths)
    app.connect("doctree-resolved", _unpublished_badges)
    app.connect("env-get-updated", _number_lab_figures, priority=900)
    app.add_css_file("course.css")
    app.add_css_file("course-icons.css")
    app.add_js_file("course.js", defer="defer")
    app.connect("html-page-context", _dedupe_scripts, priority=1)
    app.connect("html-page-context", _list_items, priority=2)
    app.connect("html-page-context", _code_breaks, priority=3)
    app.connect("html-page-context", _figures_keep_units, priority=4)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _drop_icon_script)
    app.connect("build-finished", _student_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
