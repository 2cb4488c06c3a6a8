"""Small helpers for the lab notebooks, so that they run the same in the book, in Jupyter,
on Colab and on Kaggle."""
from __future__ import annotations

import os
from pathlib import Path

from .launch import REPO_ROOT, run_lab

__all__ = ["glue", "report_path", "run_lab", "style"]


def glue(name: str, value, display: bool = False) -> None:
    """``myst_nb.glue`` when it is installed (the book); otherwise nothing, since only the
    book renders glued values into the prose."""
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return
    _glue(name, value, display=display)


def report_path(lab: str) -> str:
    """Where a notebook asks a lab to write its report: ``reports/`` at the top of the course,
    as a path relative to the notebook's folder (so printed output names no machine's paths)."""
    return os.path.relpath(REPO_ROOT / "reports" / f"lab-{lab}.json")


def style() -> None:
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 110, "font.size": 10, "axes.titlesize": 10,
        "axes.spines.top": False, "axes.spines.right": False,
    })
