"""Check one exercise from inside the notebook, exactly as the grader will (public tests):

    from autograde.selfcheck import self_check
    self_check("ex1", chinchilla_loss)      # or self_check("ex1", globals())

The self-check is the grader: it runs your code in the grader's sandbox (only numpy and the
standard library importable, the same time limit per test, a fresh process), with the
same checks, and prints the same report. In Jupyter it grades what the grader will grade:
the saved notebook (found from the kernel's session, else beside it), with its cell
numbers; where the cells run in this kernel differ from it (a function renamed since, a
helper whose cell was deleted, an edit not saved yet) it names each difference and gives the
kernel's score too. Without a saved notebook it grades the cells run so far, in order (the
kernel's history); from a ``.py`` file it is that file. The hidden tests are not run here:
the report names them and their points.

Where the sandbox cannot be used (a function defined inside another function, or a system
where the sandbox cannot start) it falls back to calling your function in this process,
and says so.
"""
from __future__ import annotations

import inspect
import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

from grading import grade_callable, load_checks
from grading.core import EXERCISE_BY_ID, handout_parameters, local_call, missing_call
from grading.report import fmt_points, format_report, score

#: Seconds per test: the grader's default (``python -m autograde --timeout``).
TIMEOUT = 10.0
#: What submitted code may import when graded (besides matplotlib, which is a silent stub).
ALLOWED_IMPORTS = "numpy and the Python standard library"


def _resolve(function_name: str, namespace_or_function: Any):
    if callable(namespace_or_function) and not isinstance(namespace_or_function, Mapping):
        return namespace_or_function
    if isinstance(namespace_or_function, Mapping):
        return namespace_or_function.get(function_name)
    return getattr(namespace_or_function, function_name, None)


class Points(float):
    """The points earned: a float that a notebook does not echo under the printed report."""

    def _ipython_display_(self):
        pass


def kernel_history() -> list[str] | None:
    """The raw source of every cell run so far in this IPython kernel, or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "history_manager"):
        return None
    cells = [c for c in shell.history_manager.input_hist_raw[1:] if c.strip()]
    if not cells:  # cells run without history (e.g. by nbval): IPython still caches each one
        import linecache

        cells = ["".join(entry[2]) for name, entry in list(linecache.cache.items())
                 if ("ipykernel_" in name or name.startswith("<ipython-input-"))
                 and len(entry) == 4 and "".join(entry[2]).strip()]
    return cells or None


def source_file(function) -> Path | None:
    """The .py file that defines ``function`` at its top level (what the grader would see)."""
    if not callable(function) or getattr(function, "__qualname__", "") != getattr(function, "__name__", None):
        return None
    try:
        path = Path(inspect.getsourcefile(function) or "")
    except TypeError:
        return None
    return path if path.suffix == ".py" and path.is_file() else None


def write_notebook(cells: list[str], folder: Path) -> Path:
    """The cells as a minimal notebook file, for the grader's sandbox."""
    path = Path(folder) / "self-check.ipynb"
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": cell, "outputs": [],
                           "execution_count": None} for cell in cells],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def grade_in_sandbox(path: Path, checks, timeout: float = TIMEOUT):
    """Grade a file as the grader does (``autograde.grade``); the SubmissionReport, or None
    where the sandbox cannot run here."""
    try:
        from autograde.grade import grade_submission
    except ImportError:
        return None
    report = grade_submission(path, checks, timeout=timeout)
    if report.grader_errors:
        return None
    return report


def check_code(exercise_ids, *, cells: list[str] | None = None, path: Path | None = None,
               timeout: float = TIMEOUT):
    """Grade ``cells`` (a notebook's code, in order) or the file ``path`` with the public
    checks of ``exercise_ids``, in the grader's sandbox: the SubmissionReport, or None where
    the sandbox cannot run here."""
    checks = [c for c in load_checks(include_hidden=False) if c.exercise in exercise_ids]
    with tempfile.TemporaryDirectory(prefix="self-check-") as tmp:
        if cells is not None:
            path = write_notebook(cells, Path(tmp))
        return grade_in_sandbox(path, checks, timeout)


#: Names the grader's sandbox provides to a notebook (its check cells call self_check).
PROVIDED = frozenset({"self_check"})


def saved_notebook(namespace: Mapping | None = None) -> Path | None:
    """The notebook file this kernel runs, as saved: from the session (Jupyter's
    ``__session__`` / ``JPY_SESSION_NAME``, VS Code's ``__vsc_ipynb_file__``), else the one
    notebook beside the kernel that has check cells (``09-exercises.ipynb`` first)."""
    import os

    namespace = namespace or {}
    named = [namespace.get("__session__"), namespace.get("__vsc_ipynb_file__"),
             os.environ.get("JPY_SESSION_NAME")]
    here = Path.cwd()
    for name in named:
        if isinstance(name, str) and name:
            for path in (Path(name), here / Path(name).name):  # the server's path may be relative
                if path.suffix in (".ipynb", ".md") and path.is_file():
                    return path

    def has_checks(path: Path) -> bool:
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                return "self_check(" in f.read(4_000_000)
        except OSError:
            return False

    if has_checks(here / "09-exercises.ipynb"):
        return here / "09-exercises.ipynb"
    found = [p for p in sorted(here.glob("*.ipynb")) if has_checks(p)] or \
        [p for p in sorted(here.glob("*.md")) if has_checks(p)]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _defs(sources) -> dict:
    """``{function name: ast.dump of its latest top-level definition}`` over ``sources``."""
    import ast

    out = {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[node.name] = ast.dump(node)
    return out


def _used_names(sources) -> set:
    import ast

    used = set()
    for source in sources:
        try:
            used |= {n.id for n in ast.walk(ast.parse(source))
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return used


def differences(function: str, cells: list[str], saved: Path) -> list[str]:
    """What the grader will see differently in the saved notebook ``saved`` from the cells run
    in this kernel (``cells``), one sentence each, for the exercise's ``function``: it is not
    in the saved file (renamed, not saved yet); a name the saved code uses is defined only
    by a cell that is no longer there (deleted); the kernel's latest ``function`` is not the
    one saved (an edit not saved yet)."""
    import builtins
    import difflib

    from sandbox.submission import names_defined, read_submission

    submission = read_submission(saved)
    if submission.problem:
        return [f"the grader cannot run the saved {saved.name}: {submission.problem}"]
    saved_sources = [u.source for u in submission.units]
    in_saved = set().union(*(u.defines for u in submission.units)) | PROVIDED
    in_kernel = set().union(*(names_defined(c) for c in cells)) if cells else set()
    out = []
    if function not in in_saved:
        near = difflib.get_close_matches(function, sorted(n for n in in_saved if n not in PROVIDED),
                                         n=1, cutoff=0.6)
        out.append(f"the saved {saved.name} defines no `{function}`, so the grader will not find "
                   "it (renamed, or not saved yet?)" + (f"; it defines `{near[0]}`" if near else ""))
    for name in sorted((_used_names(saved_sources) & in_kernel) - in_saved - set(dir(builtins))):
        out.append(f"`{name}` is defined only by a cell that is not in the saved {saved.name} "
                   "(deleted, or not saved yet): the grader will not find it")
    kernel_def, saved_def = _defs(cells).get(function), _defs(saved_sources).get(function)
    if kernel_def and saved_def and kernel_def != saved_def:
        out.append(f"the `{function}` this kernel runs is not the one in the saved "
                   f"{saved.name}: save the notebook (the grader grades the saved file)")
    return out


def self_check(exercise_id: str, namespace_or_function: Any, *, timeout: float = TIMEOUT,
               cells: list[str] | None = None, saved: Path | None = None) -> float:
    """Run exercise ``exercise_id``'s public tests the way the grader does, print the
    report, and return the points earned. ``cells``: the code run so far (default: this
    kernel's history, or the file defining the function); ``saved``: the saved notebook
    (default: :func:`saved_notebook` when in a kernel). With a saved notebook, that file is
    graded, as the grader will, and any difference from ``cells`` is named."""
    if exercise_id not in EXERCISE_BY_ID:
        raise ValueError(f"exercise_id must be one of {sorted(EXERCISE_BY_ID)}, got {exercise_id!r}")
    exercise = EXERCISE_BY_ID[exercise_id]
    function = _resolve(exercise.function, namespace_or_function)
    checks = [c for c in load_checks(include_hidden=False) if c.exercise == exercise_id]
    name = getattr(function, "__name__", exercise.function)
    if callable(function) and name != exercise.function:
        print(f"Note: checking `{name}` as `{exercise.function}`.")
        cells = None  # the grader looks for the exercise's name: check this function directly

    report = None
    warnings: list[str] = []
    kernel_report = None
    if name == exercise.function:
        if cells is None:
            cells = kernel_history()
            if cells is not None and saved is None:
                namespace = namespace_or_function if isinstance(namespace_or_function, Mapping) \
                    else getattr(function, "__globals__", None)
                saved = saved_notebook(namespace)
        if cells is not None and saved is not None:
            warnings = differences(exercise.function, cells, Path(saved))
            report = check_code([exercise_id], path=Path(saved), timeout=timeout)
            if report is not None and warnings:
                kernel_report = check_code([exercise_id], cells=cells, timeout=timeout)
        elif cells is not None:
            report = check_code([exercise_id], cells=cells, timeout=timeout)
        elif source_file(function) is not None:
            report = check_code([exercise_id], path=source_file(function), timeout=timeout)
    if report is not None:
        from autograde.reports import student_text

        for warning in warnings:
            print(f"Warning: {warning}.")
        if warnings:
            print(f"Below: the saved {Path(saved).name}, as the grader will grade it.\n")
        # The notebook's own set-up cells are skipped by design: not worth a note here.
        report.notes = [n for n in report.notes if "set up the self-check" not in n]
        print(student_text(report))
        if kernel_report is not None:
            print(f"\nThe cells run in this kernel score {fmt_points(kernel_report.score)} / "
                  f"{fmt_points(kernel_report.max_score)} public points; the grader grades the "
                  "saved notebook.")
        return Points(report.score)

    def lookup(other: str):  # Exercise 2 also calls the same code's chinchilla_loss
        found = function if other == exercise.function else (
            _resolve(other, namespace_or_function) if isinstance(namespace_or_function, Mapping)
            else getattr(function, "__globals__", {}).get(other))
        return local_call(found, handout_parameters(other)) if callable(found) else missing_call(other)

    results = grade_callable(lookup, checks)
    print(f"(Checked in this Python process, not in the grader's sandbox: the grader allows "
          f"only {ALLOWED_IMPORTS} and {timeout:g} s per test.)")
    print(format_report(results))
    earned, _ = score(results)
    return Points(earned)
