"""Small helpers for the lab notebooks, so that they run the same in the book, in Jupyter,
on Colab and on Kaggle."""
from __future__ import annotations

import os
from pathlib import Path

from .launch import REPO_ROOT, run_lab

__all__ = ["glue", "measured_or_skipped", "report_path", "run_lab", "style", "reference_runs", "show_reference"]

REFERENCE_DIR = REPO_ROOT / "labs" / "reference"


def measured_or_skipped(check: dict, spec: str | None = None):
    """A check's measured value, formatted with ``spec`` when given. A skipped check (the ring
    counts in the student kit, before Assignment 1's ``ring_all_reduce`` is written) has none:
    ``"not yet measured"``, or NaN (an empty bar) without ``spec``."""
    if check.get("skipped"):
        return "not yet measured" if spec is not None else float("nan")
    return check["measured"] if spec is None else format(check["measured"], spec)


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
    """The book's figure house style (``coursefig``), for the lab notebooks' figures."""
    import coursefig

    coursefig.use()


def reference_runs(lab: str, folder=None) -> list[tuple[str, dict]]:
    """``(device, run)`` for every run of ``lab`` in the GPU-check summaries committed under
    ``labs/reference/`` (``make gpu-check`` writes them); empty when none was recorded."""
    import json

    folder = Path(folder) if folder is not None else REFERENCE_DIR
    found = []
    for summary in sorted(folder.glob("*/summary.json")):
        data = json.loads(summary.read_text(encoding="utf-8"))
        device = data["environment"]["device"]
        found += [(device, run) for run in data["runs"] if run.get("lab") == lab and not run.get("error")]
    return found


def show_reference(lab: str, folder=None) -> None:
    """Print what this lab measured on the GPUs in ``labs/reference/``, or say that no GPU run
    has been recorded. Only real runs are ever shown."""
    runs = reference_runs(lab, folder)
    if not runs:
        print("No GPU run of this lab has been recorded yet (labs/reference/ holds no summary). "
              "On a machine with a GPU, `make gpu-check` measures it.")
        return
    for device, run in runs:
        ok = sum(c["ok"] for c in run["checks"])
        print(f"{device}, {run['world_size']} rank(s), {run.get('dtype', '?')}: "
              f"{ok} of {len(run['checks'])} checks pass ({run['label']})")
        for f in run.get("figures", []):
            parts = []
            if f.get("tokens_per_s") is not None:
                parts.append(f"{f['tokens_per_s']:,.0f} tokens/s")
            if f.get("mfu") is not None:
                parts.append(f"MFU {100 * f['mfu']:.3g}%")
            if f.get("peak_allocated_gib") is not None:
                parts.append(f"peak allocated {f['peak_allocated_gib']:.3g} GiB")
            if f.get("busbw_gb_s") is not None:
                parts.append(f"{f['busbw_gb_s']:.3g} GB/s")
            print(f"    {f['what'] or lab}: " + ", ".join(parts))
