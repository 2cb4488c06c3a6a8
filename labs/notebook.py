"""Small helpers for the lab notebooks, so that they run the same in the book, in Jupyter,
on Colab and on Kaggle."""
from __future__ import annotations

import contextlib
import html
import io
import os
import shlex
from pathlib import Path

from solutions._format import plural

from . import launch
from .launch import REPO_ROOT
from .report import run_html, table_html, table_text

__all__ = ["LabRun", "Table", "glue", "show_table", "measured_or_skipped", "report_path", "run_lab", "style", "reference_runs", "show_reference"]

REFERENCE_DIR = REPO_ROOT / "labs" / "reference"


class _Text:
    """Text a notebook shows as it is (the command, and the lab's log while it runs), its long
    lines wrapped rather than wider than the page."""

    def __init__(self, text: str):
        self.text = text

    def _repr_html_(self) -> str:
        return f'<pre class="lab-live" style="white-space: pre-wrap">{html.escape(self.text)}</pre>'

    def __repr__(self) -> str:
        return self.text


class _LiveLog(io.TextIOBase):
    """Collects what the lab prints and shows it, line by line, in one updated cell output."""

    def __init__(self, handle):
        self.handle, self.text = handle, ""

    def write(self, text):
        self.text += text
        if "\n" in text:
            self.handle.update(_Text(self.text.rstrip("\n")))
        return len(text)


class LabRun:
    """A finished lab run as a notebook shows it: the checks as an HTML table with the log
    folded under it (``labs.report.run_html``); as text, the log as the lab printed it."""

    def __init__(self, report: dict, log: str):
        self.report, self.log = report, log

    def _repr_html_(self) -> str:
        return run_html(self.report, self.log)

    def __repr__(self) -> str:
        return self.log.rstrip("\n")


def _in_a_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def run_lab(lab: str, *args, timeout: float | None = None) -> dict:
    """Run ``python -m labs.<lab> *args`` from a notebook cell (:func:`labs.launch.run_lab`) and
    return its report. Outside a notebook the log is printed, as from a shell. In a notebook the
    cell shows the command and, while the lab runs, its log as it comes; when the lab is done the
    log folds away under a table of the checks (predicted, measured, ratio, verdict). If the lab
    fails, the log stays in view and the error is raised.

    The live log is one display that is updated in place and ends as it began (the command), so
    that a notebook run by any front end, nbval's included, stores the same outputs."""
    if not _in_a_kernel():
        return launch.run_lab(lab, *args, timeout=timeout)
    from IPython.display import display

    command = "$ python -m labs.%s %s" % (lab, shlex.join(str(a) for a in args))  # as launch.run_lab prints it
    handle = display(_Text(command), display_id=True)
    live = _LiveLog(handle)
    with contextlib.redirect_stdout(live):
        report = launch.run_lab(lab, *args, timeout=timeout)
    handle.update(_Text(command))
    display(LabRun(report, live.text))
    return report


class Table:
    """A small table for a notebook: HTML in Jupyter and the book, aligned text elsewhere."""

    def __init__(self, header, rows, caption: str | None = None):
        self.header, self.rows, self.caption = list(header), [list(r) for r in rows], caption

    def _repr_html_(self) -> str:
        return table_html(self.header, self.rows, self.caption)

    def __repr__(self) -> str:
        text = table_text(self.header, self.rows)
        return f"{self.caption}\n{text}" if self.caption else text


def show_table(header, rows, caption: str | None = None) -> None:
    """Show rows of cells as a table (:class:`Table`): displayed in a notebook, printed elsewhere."""
    table = Table(header, rows, caption)
    if _in_a_kernel():
        from IPython.display import display

        display(table)
    else:
        print(repr(table))


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
    ``labs/reference/`` (``python -m labs.gpu_check`` writes them); empty when none was recorded."""
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
              "On a machine with a GPU, `python -m labs.gpu_check` measures it.")
        return
    for device, run in runs:
        ok = sum(c["ok"] for c in run["checks"])
        print(f"{device}, {plural(run['world_size'], 'rank')}, {run.get('dtype', '?')}: "
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
