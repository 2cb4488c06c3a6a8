"""The course's figure house style, set once for every chapter and lab figure.

    import coursefig
    coursefig.use()                     # rcParams + vector (SVG) output in notebooks
    ax.bar(..., color=coursefig.COLORS["optimizer"])

Colours come from the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), which
stays distinguishable under the common forms of colour-blindness. Each concept keeps one
colour across the whole book, so that "optimizer state" or "tensor parallel" looks the same
in every section and lab.
"""
from __future__ import annotations

#: Okabe-Ito, in its usual order (black first).
OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}

#: One colour per concept, everywhere in the book.
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
    # fits and references
    "measured": OKABE_ITO["black"],
    "predicted": OKABE_ITO["vermillion"],
}

#: A cycle for lines that are not one of the concepts above.
CYCLE = [OKABE_ITO[k] for k in ("blue", "orange", "green", "vermillion", "purple", "sky", "yellow", "black")]


#: Resolution of raster (PNG) figures: at least twice the pixels they are shown with.
PNG_DPI = 300
_vector = True  # the format chosen by the last explicit use(vector=...)


def use(vector: bool | None = None) -> None:
    """Apply the house style to matplotlib and ask Jupyter for SVG figures.

    ``vector=False`` asks for PNG at ``PNG_DPI`` instead (300 dpi: a 5-inch figure is 1,500 px,
    more than twice the width of the book's text column). The labs use it: their
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

    mpl.rcParams.update({
        "figure.figsize": (7.0, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 200,
        "font.size": 11,
        "axes.titlesize": 11,
        "axes.labelsize": 11,
        "legend.fontsize": 10,
        "xtick.labelsize": 10,
        "ytick.labelsize": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.prop_cycle": cycler(color=CYCLE),
        "svg.fonttype": "path",
        "svg.hashsalt": "coursefig",  # stable ids: re-executing a notebook gives the same SVG
    })
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside Jupyter nothing is displayed inline
        return
    if vector:
        set_matplotlib_formats("svg", metadata={"Date": None})
    else:
        set_matplotlib_formats("png", dpi=PNG_DPI, metadata={"Software": None})
