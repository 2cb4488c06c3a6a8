"""Reports written by the grader (never by the sandbox): console text, JSON, CSV and
Gradescope's ``results.json``.

Gradescope's format (https://gradescope-autograders.readthedocs.io, "Specifications"):
top-level ``score``, ``execution_time``, ``output``, and ``tests``, each with ``name``,
``score``, ``max_score``, ``status``, ``output`` and ``visibility`` (``visible``,
``hidden``, ``after_due_date`` or ``after_published``).
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

from .grade import SubmissionReport

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


def fmt_points(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def write_atomically(path, text: str) -> None:
    """Write a report in one step: a reader never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- console

def student_text(report: SubmissionReport, include_hidden: bool = True) -> str:
    """The per-test report of :func:`tests.grading.report.format_report` (the same text the
    notebook's self-check prints), preceded by what did not run."""
    from tests.grading.report import format_report

    results = [(c, r) for c, r in report.results if include_hidden or not c.hidden]
    lines = []
    problems = [explain_problem(p) for p in report.problems]
    if problems:
        lines.append("Parts of your submission that did not run:")
        lines += [f"  - {p}" for p in problems]
        lines.append("")
    if report.notes:
        lines += [f"Note: {n}." for n in report.notes]
        lines.append("")
    first = problems[0] if problems and any(not r.passed for _, r in results) else None
    lines.append(format_report(results, first_problem=first))
    if not include_hidden and any(c.hidden for c, _ in report.results):
        lines.append("Hidden tests are graded too; their results appear when grades are published.")
    return "\n".join(lines)


#: What the sandbox lets submitted code import (autograde.sandbox.ALLOWED_PACKAGES).
ALLOWED_IMPORTS = "numpy and the Python standard library"


def explain_problem(problem: str) -> str:
    """A problem line, with what to do where the cause is a package the grader lacks."""
    if "ModuleNotFoundError" in problem or "No module named" in problem:
        return (problem.rstrip(".") + f": only {ALLOWED_IMPORTS} can be imported when "
                "grading; remove the import and write that part with numpy.")
    return problem


def table(reports) -> str:
    """One line per submission: total and per-exercise points."""
    if not reports:
        return "No submissions found."
    exercises = [(e["id"], e["max_score"]) for e in reports[0].exercises()]
    width = max(10, min(48, max(len(r.submission) for r in reports)))
    head = f"{'submission':<{width}}  {'score':>9}  " + "  ".join(f"{i:>7}" for i, _ in exercises)
    lines = [head + "  seconds", "-" * (len(head) + 9)]
    for r in reports:
        by_id = {e["id"]: e for e in r.exercises()}
        cells = "  ".join(
            f"{fmt_points(by_id[i]['score']) + '/' + fmt_points(by_id[i]['max_score']):>7}"
            if i in by_id else f"{'-':>7}" for i, _ in exercises)
        name = r.submission if len(r.submission) <= width else "..." + r.submission[-width + 3:]
        flag = "  GRADER ERROR" if r.grader_errors else ""
        total = f"{fmt_points(r.score)}/{fmt_points(r.max_score)}"
        lines.append(f"{name:<{width}}  {total:>9}  {cells}  {r.seconds:7.2f}{flag}")
    if len(reports) > 1:
        scores = sorted(r.score for r in reports)
        mid = len(scores) // 2
        median = scores[mid] if len(scores) % 2 else (scores[mid - 1] + scores[mid]) / 2
        lines.append("-" * (len(head) + 9))
        lines.append(f"{len(reports)} submissions; mean {sum(scores) / len(scores):.1f}, "
                     f"median {fmt_points(median)}, full marks: "
                     f"{sum(r.score == r.max_score for r in reports)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- files

def json_report(reports, seed: int | None) -> dict:
    """One submission: its report object. Several: ``{"seed", "submissions": {path: report}}``."""
    if len(reports) == 1:
        return {**reports[0].to_json(), "seed": seed}
    return {"seed": seed, "submissions": {r.submission: r.to_json() for r in reports}}


def write_json(path, reports, seed: int | None) -> None:
    write_atomically(path, json.dumps(json_report(reports, seed), indent=2, allow_nan=False) + "\n")


def write_csv(path, reports) -> None:
    """One row per submission: file, total, maximum, then one column per exercise function."""
    import csv  # only here: not worth its import on every run

    functions = [(e["id"], e["function"]) for e in reports[0].exercises()] if reports else []
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["submission", "score", "max_score"] + [f for _, f in functions] + ["status"])
    for r in reports:
        by_id = {e["id"]: e["score"] for e in r.exercises()}
        status = "grader error" if r.grader_errors else ("not run" if r.problems and
                                                         r.score == 0 else "graded")
        writer.writerow([r.submission, fmt_points(r.score), fmt_points(r.max_score)]
                        + [fmt_points(by_id.get(i, 0.0)) for i, _ in functions] + [status])
    write_atomically(path, buffer.getvalue())


def gradescope_results(report: SubmissionReport, hidden_visibility: str = "after_published",
                       extra: dict | None = None) -> dict:
    """Gradescope's results.json for one submission. Hidden tests get ``hidden_visibility``;
    the top-level ``output`` (shown at once) covers the public tests only."""
    if hidden_visibility not in VISIBILITIES:
        raise ValueError(f"hidden_visibility must be one of {VISIBILITIES}, got {hidden_visibility!r}")
    tests = []
    for number, exercise in enumerate(report.exercises(), start=1):
        for k, test in enumerate(exercise["tests"], start=1):
            tests.append({
                "name": f"{exercise['name'].split(':')[0]}: {test['name']}",
                "number": f"{number}.{k}",
                "score": test["points"], "max_score": test["max_points"],
                "status": "passed" if test["passed"] else "failed",
                "output": test["feedback"],
                "visibility": hidden_visibility if test["hidden"] else "visible",
            })
    results = {"score": report.score, "execution_time": round(report.seconds, 3),
               "output": student_text(report, include_hidden=False), "output_format": "text",
               "stdout_visibility": "hidden", "tests": tests}
    if extra:
        results["extra_data"] = extra
    return results


def write_gradescope(path, report: SubmissionReport, hidden_visibility: str = "after_published",
                     extra: dict | None = None) -> None:
    write_atomically(path, json.dumps(gradescope_results(report, hidden_visibility, extra),
                                      indent=2, allow_nan=False) + "\n")
