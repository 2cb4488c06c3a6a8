"""The course's figure house style, set once for every chapter and lab figure.

    import coursefig
    coursefig.use()                     # rcParams + vector (SVG) output in notebooks
    fig, ax = plt.subplots(figsize=coursefig.size())          # one column wide
    ax.bar(..., color=coursefig.COLORS["optimizer"], label=coursefig.NAMES["optimizer"])

Colours come from the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), which
stays distinguishable under the common forms of colour-blindness. Each concept keeps one
colour (and one name) across the whole book, so that "optimizer state", "tensor parallel" or
"the Epoch AI refit" looks the same in every section, lab and explorer: :data:`COLORS` and
:data:`NAMES` are that table, and ``tests/book/test_figure_style.py`` reads every stored figure's
series back and holds them to it.

Legible on a phone: a phone's text column is about 342 CSS px wide, so a figure ``WIDTH``
inches wide (``WIDTH * 96`` px at its natural size) is shown at ``342 / (96 WIDTH)`` of it. Its
smallest text, :data:`MIN_FONT_PT`, is then ``MIN_FONT_PT * 4/3 * 342 / (96 WIDTH)`` px: 11.3 px
for the defaults below (room for labels that stick out of the axes and widen the saved
figure by up to 10%), and 13.3 px on a desktop, where the figure keeps its natural size.
Multi-panel figures stack their panels (one per row) at the same width rather than widen.
Log axes are labelled "100M", "1B", "1e21" in full-size type (matplotlib's default
:math:`10^{21}` sets the exponent at 0.7 of the size, too small on a phone).

Every figure the notebooks show is written by :func:`render`, which records in the file the
figure's smallest font size and the colour of each named series (SVG: ``dc:description``;
PNG: text chunks), so the book's tests can measure them without re-running the notebooks.
"""
from __future__ import annotations

import json
import math
import re

#: Okabe-Ito, in its usual order (black first).
OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}

#: One colour per concept, everywhere in the book (figures, labs and explorers).
COLORS = {
    # what a GPU holds
    "weights": OKABE_ITO["blue"],
    "gradients": OKABE_ITO["orange"],
    "optimizer": OKABE_ITO["green"],
    "activations": OKABE_ITO["purple"],
    # parallelism axes
    "dp": OKABE_ITO["blue"],
    "tp": OKABE_ITO["vermillion"],
    "pp": OKABE_ITO["green"],
    "fsdp": OKABE_ITO["sky"],
    "cp": OKABE_ITO["purple"],
    "ep": OKABE_ITO["yellow"],
    "3d": OKABE_ITO["black"],
    # a pipeline's passes
    "forward": OKABE_ITO["sky"],
    "backward": OKABE_ITO["green"],
    "idle": "#D9D9D9",
    # the three fits of Chinchilla's parametric law (solutions.scaling.CONSTANT_SETS)
    "hoffmann_rounded": OKABE_ITO["vermillion"],
    "hoffmann_precise": OKABE_ITO["orange"],
    "epoch_2024": OKABE_ITO["blue"],
    "kaplan": OKABE_ITO["purple"],
    # fits and references
    "measured": OKABE_ITO["black"],
    "predicted": OKABE_ITO["vermillion"],
    "reference": "#595959",  # annotations, limits and reference lines (7:1 on white)
}

#: The name each concept goes by in legends (figures start their labels with it).
NAMES = {
    "weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
    "activations": "activations",
    "dp": "data parallel", "tp": "tensor parallel", "pp": "pipeline parallel", "fsdp": "FSDP",
    "cp": "context parallel", "ep": "expert parallel", "3d": "3D",
    "forward": "forward", "backward": "backward", "idle": "idle",
    "hoffmann_rounded": "Hoffmann et al., rounded",
    "hoffmann_precise": "Hoffmann et al., unrounded",
    "epoch_2024": "Epoch AI refit",
    "kaplan": "Kaplan",
}

#: Legend labels that name a concept, whatever follows the name ("FSDP over 8 GPUs"). The
#: figure test holds every series whose label matches one of these to the concept's colour.
SERIES = {concept: re.compile(rf"^{re.escape(name)}(?![\w-])", re.I) for concept, name in NAMES.items()
          if concept not in ("measured", "predicted")}
SERIES["gradients"] = re.compile(r"^(gradients|grads)(?![\w-])", re.I)  # not "gradient all-reduce"
SERIES["optimizer"] = re.compile(r"^optimi[sz]er( state)?(?![\w-])", re.I)
SERIES["tp"] = re.compile(r"^(tensor parallel|TP(?![\w-]))", re.I)
SERIES["dp"] = re.compile(r"^(data parallel|DP(?![\w-]))", re.I)

#: A cycle for lines that are not one of the concepts above.
CYCLE = [OKABE_ITO[k] for k in ("blue", "orange", "green", "vermillion", "purple", "sky", "yellow", "black")]

#: A figure's width in inches: one column on a phone (342 CSS px) at 0.85 of its natural size.
WIDTH = 4.2
#: The smallest font size any figure uses (pt); see the module's docstring for the px it gives.
MIN_FONT_PT = 10.0
#: Resolution of raster (PNG) figures: at least twice the pixels they are shown with (a
#: 4.2-inch figure is 1,680 px, the desktop column 672 px).
PNG_DPI = 400
#: PNG text chunk holding the smallest font size (pt) of the figure; read by tools.figure_text.
PNG_KEY = "coursefig:smallest-text-pt"
#: matplotlib's scale for mathtext sub- and superscripts (``_mathtext.SHRINK_FACTOR``).
MATH_SHRINK = 0.7
_vector = True  # the format chosen by the last explicit use(vector=...)


def size(height: float = 3.1, width: float = WIDTH) -> tuple[float, float]:
    """A figure size in inches, one column wide by default; give panels stacked one per row
    ``height`` = rows x their height."""
    return (width, height)


def count_label(x: float) -> str:
    """A tick label for a count in full-size type: 1000 -> "1K", 3e8 -> "300M", 1e9 -> "1B",
    2e12 -> "2T"; beyond a quadrillion, or below 0.0001, "1e21" (ML papers' own notation)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    ax = abs(x)
    if 1e-4 <= ax < 1e3:
        return f"{x:g}"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if scale <= ax < 1e3 * scale:
            return f"{x / scale:.3g}{unit}"
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def bytes_label(x: float) -> str:
    """A tick label for a size in bytes on a base-2 axis: 512 -> "512 B", 65536 -> "64 KiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= scale:
            return f"{x / scale:g} {unit}"
    return f"{x:g} B"


def _install_log_scale() -> None:
    """Make every log axis label its ticks with :func:`count_label` (same ticks, full-size type)."""
    import matplotlib.scale as mscale
    import matplotlib.ticker as mticker

    class CountLogFormatter(mticker.LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return count_label(x)

    class CourseLogScale(mscale.LogScale):
        name = "log"

        def __init__(self, *args, **kwargs):  # no named *axis*: matplotlib >= 3.11 passes none,
            super().__init__(*args, **kwargs)  # older ones pass it first (forwarded as it comes)

        def set_default_locators_and_formatters(self, axis):
            super().set_default_locators_and_formatters(axis)
            if self.base == 10:
                axis.set_major_formatter(CountLogFormatter(self.base))
                axis.set_minor_formatter(CountLogFormatter(self.base, labelOnlyBase=(self.subs is not None)))

    mscale.register_scale(CourseLogScale)


def _has_script(text: str) -> bool:
    """Does the text hold mathtext with a sub- or superscript (drawn at MATH_SHRINK)?"""
    return text.count("$") >= 2 and bool(re.search(r"\$[^$]*[_^][^$]*\$", text))


def smallest_font_pt(fig) -> float:
    """The smallest font size (pt) of the visible text of ``fig``, scripts included."""
    from matplotlib.text import Text

    fig.draw_without_rendering()  # creates the tick labels
    sizes = [t.get_fontsize() * (MATH_SHRINK if _has_script(t.get_text()) else 1)
             for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
             and not (t.axes is not None and not t.get_in_layout() and t.get_alpha() == 0)]
    return min(sizes) if sizes else float("inf")


def series(fig) -> list[list[str]]:
    """[label, colour] of every legend entry of ``fig`` (the axes' legends and the figure's)."""
    from matplotlib.colors import to_hex

    pairs = []
    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    for legend in filter(None, legends):
        for handle, text in zip(legend.legend_handles, legend.texts):
            colour = None
            for getter in ("get_color", "get_facecolor", "get_edgecolor"):
                try:
                    value = getattr(handle, getter)()
                except AttributeError:
                    continue
                if hasattr(value, "ndim") and value.ndim == 2:
                    value = value[0] if len(value) else None
                if value is not None and not (getattr(value, "__len__", None) and len(value) == 4 and value[3] == 0):
                    colour = value
                    break
            if colour is not None:
                pairs.append([text.get_text(), to_hex(colour, keep_alpha=False).upper()])
    return pairs


def render(fig, fmt: str):
    """The figure as the notebook stores it: SVG text or base64 PNG, with coursefig's record
    (smallest font size, named series) written into the file."""
    from IPython.core.pylabtools import print_figure

    record = json.dumps({"smallest_pt": round(smallest_font_pt(fig), 2), "series": series(fig)},
                        ensure_ascii=True)
    if fmt == "svg":
        return print_figure(fig, "svg", metadata={"Date": None, "Description": record})
    return print_figure(fig, "png", base64=True, dpi=PNG_DPI,
                        metadata={"Software": None, "Description": record,
                                  PNG_KEY: f"{smallest_font_pt(fig):.2f}"})


def record_of(data: str | bytes) -> dict | None:
    """coursefig's record read back from a figure file (SVG text or PNG bytes); None if absent."""
    if isinstance(data, str):
        import html

        m = re.search(r"<dc:description>(.*?)</dc:description>", data, re.S)
        return json.loads(html.unescape(m.group(1))) if m else None
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        text = image.info.get("Description")
    return json.loads(text) if text else None


def use(vector: bool | None = None) -> None:
    """Apply the house style to matplotlib and ask Jupyter for SVG figures.

    ``vector=False`` asks for PNG at ``PNG_DPI`` instead (400 dpi: a 4.2-inch figure is
    1,680 px, more than twice the width of the book's text column). The labs use it: their
    figures plot measured timings, which change from run to run, and a PNG keeps the stored
    notebook's diff small and is left out of nbval's output comparison, where an SVG's every
    coordinate would be compared. ``vector=None`` (the default) keeps the choice of an earlier
    call in the same session (SVG if there was none), so a notebook's setup cell decides.
    """
    global _vector
    if vector is not None:
        _vector = vector
    vector = _vector
    import matplotlib as mpl
    from cycler import cycler

    _install_log_scale()
    mpl.rcParams.update({
        "figure.figsize": size(),
        "figure.dpi": 100,
        "savefig.dpi": 200,
        "font.size": 10.5,
        "axes.titlesize": 10.5,
        "axes.titlelocation": "left",
        "axes.labelsize": 10.5,
        "legend.fontsize": MIN_FONT_PT,
        "legend.title_fontsize": MIN_FONT_PT,
        "xtick.labelsize": MIN_FONT_PT,
        "ytick.labelsize": MIN_FONT_PT,
        "figure.titlesize": 11,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.formatter.useoffset": False,   # no "+1e11" offset text in a corner
        "axes.formatter.limits": (-3, 5),
        "axes.prop_cycle": cycler(color=CYCLE),
        "svg.fonttype": "path",
        "svg.hashsalt": "coursefig",  # stable ids: re-executing a notebook gives the same SVG
    })
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside Jupyter nothing is displayed inline
        return
    fmt = "svg" if vector else "png"
    set_matplotlib_formats(fmt)  # the inline backend's set-up (close figures after each cell)
    shell = get_ipython()
    if shell is not None:
        mime = "image/svg+xml" if vector else "image/png"
        shell.display_formatter.formatters[mime].for_type(Figure, lambda fig: render(fig, fmt))
