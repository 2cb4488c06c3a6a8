"""Reports written by the grader (never by the sandbox): console text, JSON, the grades
CSV, the HTML class report and Gradescope's ``results.json``.

The grades CSV (``--csv``) has one row per student, in this column order:

``student_id``
    from the roster (``--roster``), else the student's sub-folder in a class folder
    (``class/alice/09-exercises.ipynb`` -> ``alice``), else the file name without suffix;
``name``
    from the roster (empty without one);
``score``, ``max_score``
    points earned and possible (public and hidden tests);
``ex1`` ... ``ex4``
    points per exercise;
``status``
    what happened (:func:`autograde.classrun.status`): ``graded``, ``missing`` (nothing
    submitted), ``unreadable: submitted a .pdf (...)``, ``several files: graded final.ipynb
    (the newest notebook); also sent scratch.py``, ``too large``, ``timed out``, ``not
    attempted (still the stub)`` (the untouched template: it ran, every function still raises
    NotImplementedError), ``empty (nothing to grade)`` (no code at all), ``not run (syntax
    error)``, ``not run`` (nothing in the file could run) or ``grader error``;
``submission``
    the graded file, as the student named it (relative to the class folder, never an
    absolute path).

It is UTF-8 with a header row and a dot as decimal mark. It is for the instructor; the files
that Canvas and Moodle import as they are come from ``--canvas-csv`` and ``--moodle-csv``
(:mod:`autograde.lms`).

Gradescope's format (https://gradescope-autograders.readthedocs.io, "Specifications"):
top-level ``score``, ``execution_time``, ``output``, and ``tests``, each with ``name``,
``score``, ``max_score``, ``status``, ``output`` and ``visibility`` (``visible``,
``hidden``, ``after_due_date`` or ``after_published``).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

from grading import EXERCISES
from sandbox import textsafe

from sandbox.results import Result, SubmissionReport

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


def fmt_points(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


#: Absolute folders of the grading machine (the class folder, the working directory, the
#: temporary folder) that no written report may show: :func:`scrub` removes them.
PRIVATE_ROOTS: list = []


def scrub(text: str) -> str:
    """``text`` without the grading machine's absolute folders (:data:`PRIVATE_ROOTS`)."""
    for root in sorted({str(r).rstrip("/") for r in PRIVATE_ROOTS if str(r) not in ("", "/")},
                       key=len, reverse=True):
        text = text.replace(root + "/", "").replace(root, ".")
    return text


def csv_cell(value) -> str:
    """A CSV cell a spreadsheet shows as text (:func:`sandbox.textsafe.csv_cell`), with the
    machine's folders scrubbed first: scrubbing the finished file could otherwise uncover a
    formula (``/home/me/=HYPERLINK(...)`` becoming ``=HYPERLINK(...)``)."""
    return textsafe.csv_cell(scrub(str(value)))


def write_atomically(path, text: str) -> None:
    """Write a report in one step: a reader never sees half of it, and nothing is left
    behind if writing fails. Text that is not valid UTF-8 (a lone surrogate from a file
    name) is written escaped."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
            f.write(scrub(text))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- console

def student_text(report: SubmissionReport, include_hidden: bool = True) -> str:
    """The per-test report of :func:`grading.report.format_report` (the same text the
    notebook's self-check prints), preceded by what did not run."""
    from grading.report import format_report

    results = [(c, r) for c, r in report.results if include_hidden or not c.hidden]
    lines = []
    problems = [explain_problem(p) for p in report.problems]
    if problems:
        lines.append("Parts of your submission that did not run:")
        lines += [f"  - {p}" for p in _stubs_in_one_line(problems)]
        lines.append("")
    if report.notes:
        lines += [f"Note: {n}." for n in report.notes]
        lines.append("")
    lines.append(format_report(results, first_problem=_fix_first(report, results, problems),
                               parts=report.parts or EXERCISES))
    if not include_hidden and any(c.hidden for c, _ in report.results):
        lines.append("Hidden tests are graded too; their results appear when grades are published.")
    return "\n".join(lines)


#: A cell (a line of a .py file) stopped by a hand-out stub:
#: ``cell 14 (`...`) raised NotImplementedError: Implement `memory_per_gpu`: ...``.
_STUB_STOPPED = re.compile(r"^(cell|line) (\d+) \(.*?\) raised NotImplementedError: Implement `(\w+)`")


def _stubs_in_one_line(problems: list) -> list:
    """``problems`` with the cells stopped by exercises not written yet (their hand-out stub's
    ``NotImplementedError``) said in one line where there are two or more, so that a student
    checking Exercise 1 does not read a line per later cell that calls Exercises 2 to 4."""
    stopped = [(p, _STUB_STOPPED.match(p)) for p in problems]
    stubbed = [m for _, m in stopped if m]
    if len(stubbed) < 2:
        return problems
    cells = [m.group(2) for m in stubbed]
    names = list(dict.fromkeys(f"`{m.group(3)}`" for m in stubbed))
    unit = "cells" if all(m.group(1) == "cell" for m in stubbed) else "lines"  # a notebook, or a .py file
    what = "exercises" if len(names) > 1 else "an exercise"
    line = (f"{unit} {', '.join(cells[:-1])} and {cells[-1]} call {what} not written yet "
            f"({', '.join(names)}: still the hand-out's stub), so they stopped there")
    first = next(i for i, (_, m) in enumerate(stopped) if m)
    rest = [p for p, m in stopped if not m]
    return rest[:first] + [line] + rest[first:]


def _fix_first(report: SubmissionReport, results, problems) -> str | None:
    """What to fix first where something did not run: the first cell that did not run, unless
    its error was raised inside one of the exercise functions that fails a test (a plot cell
    calling a broken ``chinchilla_loss``): then that test, the cause, naming the cell too.
    Cells stopped by a stub that is still the hand-out's (``NotImplementedError``), or by an
    exercise function that fails no test here (another exercise's, in a one-exercise
    self-check), are passed over: the report says what is not implemented yet, and a student
    working top to bottom is not sent to a later exercise before the one that lost points.
    None when no cell that did not run is the thing to fix."""
    from grading.report import _short

    if not problems or all(r.passed for _, r in results):
        return None
    graded = {e.function for e in EXERCISES} | {getattr(c, "function", None) for c, _ in results}
    for raw, shown in zip(report.problems, problems):
        inside = report.problem_causes.get(raw)
        failed = [(c, r) for c, r in results if not r.passed and c.function == inside]
        if failed and not all(r.not_implemented for _, r in failed):
            check, result = next((c, r) for c, r in failed if not r.not_implemented)
            place = raw.split(" (`")[0].split(" raised")[0]  # "cell 2"
            lines = result.feedback.splitlines() or [""]
            why = [line for line in lines[1:] if line.startswith("Why:")]
            return (f"{_short(report.part(check.exercise).title)}, {check.name}: "
                    + "\n  ".join(lines[:1] + why)
                    + f"\n  (The same error in `{inside}` stopped {place}: fix `{inside}` first.)")
        if failed or inside in graded or "raised NotImplementedError" in raw:
            continue  # a stub not written yet, or a function whose own tests say what is wrong
        return shown
    return None


#: What the sandbox lets submitted code import (sandbox.handle.ALLOWED_PACKAGES).
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
    def label(r):  # the file graded, with the student's id where the file does not name it
        if not r.submission:
            return f"{r.student_id} (no submission)"
        return r.submission if r.student_id in r.submission else f"{r.student_id}: {r.submission}"

    width = max(10, min(48, max(len(label(r)) for r in reports)))
    head = f"{'student':<{width}}  {'score':>9}  " + "  ".join(f"{i:>7}" for i, _ in exercises)
    lines = [head + "  seconds", "-" * (len(head) + 9)]
    for r in reports:
        by_id = {e["id"]: e for e in r.exercises()}
        cells = "  ".join(
            f"{fmt_points(by_id[i]['score']) + '/' + fmt_points(by_id[i]['max_score']):>7}"
            if i in by_id else f"{'-':>7}" for i, _ in exercises)
        name = label(r) if len(label(r)) <= width else "..." + label(r)[-width + 3:]
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

def _row_json(report) -> dict:
    return {**report.to_json(), "status": status(report)}


def json_report(reports, seed: int | None, single: bool | None = None) -> dict:
    """One submission: its report object. A class: ``{"seed", "submissions": {student id:
    report}}``, every student once, keyed by id (never by path; the report's
    ``submission`` names the file graded, relative to the class folder)."""
    if single if single is not None else len(reports) == 1:
        return {**_row_json(reports[0]), "seed": seed}
    return {"seed": seed, "submissions": {r.student_id: _row_json(r)
                                       for r in sorted(reports, key=lambda r: r.student_id)}}


def write_json(path, reports, seed: int | None, single: bool | None = None) -> None:
    write_atomically(path, json.dumps(json_report(reports, seed, single), indent=2,
                                      allow_nan=False) + "\n")


def status(report: SubmissionReport) -> str:
    """The row's status: what the class run set (:func:`autograde.classrun.status`), else
    from the report alone."""
    if getattr(report, "status_text", ""):
        return report.status_text
    if report.missing:
        return "missing"
    if report.grader_errors:
        return "grader error"
    if is_stub(report):
        return STUB_STATUS
    return nothing_ran(report) or "graded"


#: The status of a file with no code at all (empty, or a notebook without code cells): like
#: a missing one, nothing to grade (the class report counts it with the missing).
EMPTY_STATUS = "empty (nothing to grade)"


def nothing_ran(report: SubmissionReport) -> str | None:
    """The status of a report in which nothing earned a point because nothing could run: an
    empty file (:data:`EMPTY_STATUS`), ``not run (syntax error)``, ``not run`` (every cell
    failed); None otherwise."""
    if not report.problems or report.score != 0:
        return None
    said = " ".join(report.problems)
    if "the file is empty" in said or "no code cells" in said:
        return EMPTY_STATUS
    if "syntax error" in said and "none of it could run" in said:
        return "not run (syntax error)"
    return "not run"


#: The status of the untouched template: it ran, and every function still raises
#: NotImplementedError (not "not run", which is for a file of which nothing could run).
STUB_STATUS = "not attempted (still the stub)"


def missing_report(student_id: str, name: str, why: str, checks, parts=()) -> SubmissionReport:
    """The report of a student on the roster who submitted nothing: zero, and why."""
    report = SubmissionReport(submission="", student_id=student_id, name=name, missing=True,
                              parts=list(parts))
    report.results = [(c, Result(False, f"No submission: {why}.")) for c in checks]
    return report


def write_csv(path, reports) -> None:
    """The grades, one row per student (columns in this module's docstring)."""
    import csv  # only here: not worth its import on every run

    exercises = [e["id"] for e in reports[0].exercises()] if reports else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student_id", "name", "score", "max_score"] + exercises + ["status", "submission"])
    for r in sorted(reports, key=lambda r: r.student_id or r.submission):
        by_id = {e["id"]: e["score"] for e in r.exercises()}
        writer.writerow([csv_cell(r.student_id or Path(r.submission).stem),
                         csv_cell(r.name), fmt_points(r.score), fmt_points(r.max_score)]
                        + [fmt_points(by_id.get(i, 0.0)) for i in exercises]
                        + [csv_cell(status(r)), csv_cell(r.submission)])
    write_atomically(path, buffer.getvalue())


# ----------------------------------------------------------------------------- class report

def misconceptions(report: SubmissionReport) -> set:
    """The known mistakes (ids of grading.explain.WHY) that the feedback explained, from
    each failed test's structured ``mistake`` field (never from the feedback's text); for an
    assignment's report, the ids of its own ``known_mistakes`` whose words its feedback holds."""
    found = {r.mistake for _, r in report.results if not r.passed and getattr(r, "mistake", None)}
    table = getattr(report, "known_mistakes", None) or {}
    if table:
        feedback = "\n".join(r.feedback for _, r in report.results if not r.passed)
        found |= {mistake for mistake, why in table.items() if why in feedback}
    return found


def wrong_answers(reports) -> dict:
    """Per test, every wrong answer classified: ``{test: {"check", "failed", "known":
    {mistake: count}, "other": count, "values": [(answer, count), ...]}}``, where a wrong
    answer is a failed test that is not an untouched stub, ``known`` counts those the
    feedback explained as a known mistake, ``other`` the rest, and ``values`` lists the five
    most common of the other answers (``Result.got``: the call and what it gave)."""
    out: dict = {}
    for report in reports:
        for check, result in report.results:
            if result.passed or result.not_implemented:
                continue
            row = out.setdefault(check.name, {"check": check, "failed": 0, "known": {},
                                              "other": 0, "values": {}})
            row["failed"] += 1
            if result.mistake:
                row["known"][result.mistake] = row["known"].get(result.mistake, 0) + 1
            else:
                row["other"] += 1
                got = result.got or "(no answer: the function could not be called)"
                row["values"][got] = row["values"].get(got, 0) + 1
    for row in out.values():
        row["values"] = sorted(row["values"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return out


def wrong_answers_html(reports) -> list:
    """The class report's table of :func:`wrong_answers`, most failed test first."""
    from html import escape

    rows = wrong_answers(reports)
    if not rows:
        return []
    out = ['<h2>Wrong answers, classified</h2><p>Every wrong answer (a failed test, not an '
           'untouched stub): a known mistake that the feedback explained, or other, with the '
           'five most common other answers.</p><div class="wide" tabindex="0" role="region" '
           'aria-label="Wrong answers, classified"><table id="wrong-answers">'
           '<tr><th>test</th><th>wrong</th><th>known mistakes</th><th>other: most common '
           'answers</th></tr>']
    for name, row in sorted(rows.items(), key=lambda kv: (-kv[1]["failed"], kv[0])):
        known = "<br>".join(f"{escape(_title(m))}: {k}" for m, k in
                            sorted(row["known"].items(), key=lambda kv: (-kv[1], kv[0])))
        values = "".join(f"<li><code>{escape(v)}</code>: {k}</li>" for v, k in row["values"])
        other = f"{row['other']}" + (f"<ol>{values}</ol>" if values else "")
        out.append(f"<tr><td>{escape(name)}{' (hidden)' if row['check'].hidden else ''}</td>"
                   f"<td>{row['failed']}</td><td>{known or '-'}</td><td>{other}</td></tr>")
    out.append("</table></div>")
    return out


def other_troubles(report: SubmissionReport) -> set:
    """Causes that are not a known mistake but worth counting."""
    found = set()
    failed = [r for _, r in report.results if not r.passed]
    if report.missing:
        return {"no submission"}
    if any(r.not_implemented for r in failed):
        found.add("an exercise not attempted (NotImplementedError)")
    if any("took too long" in r.feedback for r in failed):
        found.add("a function ran out of time (an endless loop?)")
    if any("ModuleNotFoundError" in p or "No module named" in p for p in report.problems):
        found.add("imported a package the grader does not have")
    if any("1-element array" in r.feedback or "not a string" in r.feedback for r in failed):
        found.add("returned the right number in the wrong type or shape")
    if report.problems:
        found.add("part of the file did not run")
    return found


def _explain(mistake: str, table: dict | None = None) -> str:
    """What the feedback told a student about this mistake: its "Why:" paragraph (from
    ``table``, an assignment's mistakes, first), or what a mistake recognised by its form means
    (grading.explain.PATTERNS)."""
    from grading.explain import WHY, pattern_text

    return (table or {}).get(mistake) or WHY.get(mistake) or pattern_text(mistake) or ""


def known_mistakes(reports) -> dict:
    """Mistake id -> the words its feedback holds: the exercises' (grading.explain.WHY)
    and those of the assignments graded (a report's ``known_mistakes``)."""
    from grading.explain import WHY

    table = dict(WHY)
    for r in reports:
        table.update(getattr(r, "known_mistakes", None) or {})
    return table


def sections(reports) -> list:
    """``(id, title, max points)`` of what the reports grade, from their parts (the exercises,
    or an assignment); the exercises when no report names any."""
    found = {}
    for r in reports:
        for p in r.parts:
            found.setdefault(p.id, (p.id, p.title, p.max_points))
        for e in r.exercises():
            found.setdefault(e["id"], (e["id"], e["name"], e["max_score"]))
    return list(found.values()) or [(e.id, e.title, e.max_points) for e in EXERCISES]


def _title(mistake: str) -> str:
    if not (mistake[:2] == "ex" and mistake[2:3].isdigit()):
        return mistake  # an assignment's mistakes are named in words
    exercise, _, rest = mistake.partition("_")
    return f"Exercise {exercise[2:]}: {rest.replace('_', ' ')}"


def _histogram_svg(scores, maximum: float, width: int = 360, height: int = 120, label: str = "") -> str:
    """Bars of how many students earned each band of points (ten bands, 0 to maximum), named
    ``label`` for screen readers (what the bars' own titles say, in one line)."""
    from html import escape

    bands = 10
    counts = [0] * bands
    for score in scores:
        counts[min(bands - 1, int(bands * score / maximum))] += 1 if maximum else 0
    top = max(counts) or 1
    bar = width / bands
    pad = 16  # room above the tallest bar for its count
    spoken = "; ".join(f"{fmt_points(maximum * i / bands)}-{fmt_points(maximum * (i + 1) / bands)} "
                       f"points: {count}" for i, count in enumerate(counts) if count)
    name = escape(f"{label}: " if label else "") + escape(f"students per band of points, {spoken or 'none'}")
    parts = [f'<svg class="hist" role="img" aria-label="{name}" width="{width}" height="{height + 30}" '
             f'viewBox="0 {-pad} {width} {height + 30 + pad}" xmlns="http://www.w3.org/2000/svg">']
    for i, count in enumerate(counts):
        h = height * count / top
        low, high = maximum * i / bands, maximum * (i + 1) / bands
        label = escape(f"{fmt_points(low)}-{fmt_points(high)} points: {count} students")
        parts.append(f'<rect x="{i * bar + 2:.1f}" y="{height - h:.1f}" width="{bar - 4:.1f}" '
                     f'height="{h:.1f}" fill="#0072B2"><title>{label}</title></rect>')
        if count:
            parts.append(f'<text x="{i * bar + bar / 2:.1f}" y="{height - h - 3:.1f}" '
                         f'font-size="11" text-anchor="middle">{count}</text>')
    parts.append(f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" stroke="#333"/>')
    parts.append(f'<text x="0" y="{height + 16}" font-size="11">0</text>')
    parts.append(f'<text x="{width}" y="{height + 16}" font-size="11" text-anchor="end">'
                 f'{fmt_points(maximum)} points</text></svg>')
    return "".join(parts)


def class_report_html(reports, seed: int | None = None, pairs=None) -> str:
    """A self-contained HTML page: scores per exercise as histograms, and how many students
    made each known mistake, most common first (what to re-teach)."""
    from html import escape

    from types import SimpleNamespace

    EXERCISES = [SimpleNamespace(id=i, title=t, max_points=m) for i, t, m in sections(reports)]
    WHY = known_mistakes(reports)

    n = len(reports)
    absent = [r for r in reports if status(r).startswith(("missing", "unreadable", EMPTY_STATUS))]
    stubs = [r for r in reports if r not in absent and is_stub(r)]
    worked = [r for r in reports if r not in absent and r not in stubs]
    counts: dict = {}
    who: dict = {}
    for r in reports:
        for m in misconceptions(r) | {f"other:{t}" for t in other_troubles(r)}:
            counts[m] = counts.get(m, 0) + 1
            who.setdefault(m, []).append(r.student_id or r.submission)
    known = sorted((m for m in counts if not m.startswith("other:")), key=lambda m: (-counts[m], m))
    others = sorted((m for m in counts if m.startswith("other:")), key=lambda m: (-counts[m], m))
    scores = sorted(r.score for r in worked)
    mean = sum(scores) / len(scores) if scores else 0.0
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>Class report</title><style>",
           "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}",
           "table{border-collapse:collapse;margin:1rem 0}td,th{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left;vertical-align:top}",
           ".exercises{display:flex;flex-wrap:wrap;gap:1.5rem}.exercise{flex:1 1 20rem}",
           ".lead{font-size:1.15rem;background:#fff4d6;padding:.7rem 1rem;border-left:4px solid #E69F00}",
           ".side{display:flex;flex-wrap:wrap;gap:.5rem}.side pre{flex:1 1 18rem;overflow-x:auto;font-size:.8rem;background:#f6f6f6;padding:.4rem;margin:0}",
           ".wide{overflow-x:auto;max-width:100%}svg.hist{max-width:100%;height:auto}",
           "@media (max-width:30rem){body{margin:1rem auto;padding:0 .5rem}.exercise{flex-basis:100%}td,th{padding:.25rem .3rem}}",
           ".who,details{overflow-wrap:anywhere}.who{min-width:6rem}",
           "</style></head><body><main>",
           f"<h1>Class report</h1><p id=\"summary\">{n} students; {len(worked)} submitted work "
           f"(mean {mean:.1f} of {fmt_points(reports[0].max_score) if reports else 0} points over "
           f"them); {len(absent)} sent nothing gradable (missing or unreadable) and {len(stubs)} "
           f"only the untouched template, counted apart"
           + (f"; hidden-test seed {seed}" if seed is not None else "")
           + f"; full marks: {sum(r.score == r.max_score for r in reports)}.</p>"]
    if known:
        top = known[0]
        out.append(f'<p class="lead" id="most-common">Most common misconception: '
                   f"<strong>{escape(_title(top))}</strong>, made by {counts[top]} of {n} "
                   f"students. The feedback told them: {escape(_explain(top, WHY))}</p>")
    else:
        out.append('<p class="lead" id="most-common">No known misconception was recognised.</p>')
    # over the students who submitted work, as the summary's mean (the rest are counted apart)
    out.append('<h2>Scores per exercise</h2><p>Over the students who submitted work.</p><div class="exercises">')
    for exercise in EXERCISES:
        got = [next((e["score"] for e in r.exercises() if e["id"] == exercise.id), 0.0)
               for r in worked]
        if not got:
            continue
        full = sum(g == exercise.max_points for g in got)
        out.append(f'<div class="exercise"><h3>{escape(exercise.title)}</h3>'
                   + _histogram_svg(got, exercise.max_points, label=exercise.title)
                   + f"<p>mean {sum(got) / len(got):.1f} / {fmt_points(exercise.max_points)}; "
                     f"full marks: {full} of {len(got)}</p></div>")
    out.append("</div>")
    out += failure_rates_html(worked)
    out += wrong_answers_html(worked)
    out.append("<h2>Known mistakes: how many students made each</h2>")
    out.append("<table id=\"misconceptions\"><tr><th>mistake</th><th>students</th><th>what the "
               "feedback told them</th></tr>")
    for m in known:
        names = ", ".join(escape(x) for x in sorted(who[m]))
        out.append(f"<tr><td>{escape(_title(m))}</td><td>{counts[m]}</td>"
                   f"<td>{escape(_explain(m, WHY))}<details><summary>who</summary>{names}</details></td></tr>")
    out.append("</table><h2>Other difficulties</h2><table><tr><th>what</th><th>students</th></tr>")
    for m in others:
        names = ", ".join(escape(x) for x in sorted(who[m]))
        out.append(f"<tr><td>{escape(m[6:])}<details><summary>who</summary>{names}</details></td>"
                   f"<td>{counts[m]}</td></tr>")
    out.append("</table><h2>Students</h2><div class=\"wide\" tabindex=\"0\" role=\"region\" "
               "aria-label=\"Students\"><table id=\"students\"><tr><th>student</th><th>score</th>"
               + "".join(f"<th>{e.id}</th>" for e in EXERCISES) + "<th>status</th></tr>")
    for r in sorted(reports, key=lambda r: r.student_id or r.submission):
        by_id = {e["id"]: e["score"] for e in r.exercises()}
        who_name = f"{r.name} ({r.student_id})" if r.name else (r.student_id or r.submission)
        out.append(f"<tr><td class=\"who\">{escape(who_name)}</td>"
                   f"<td>{fmt_points(r.score)}/{fmt_points(r.max_score)}</td>"
                   + "".join(f"<td>{fmt_points(by_id.get(e.id, 0.0))}</td>" for e in EXERCISES)
                   + f"<td>{escape(status(r))}</td></tr>")
    out.append("</table></div>")
    if pairs is not None:
        from .similarity import pairs_html

        out += pairs_html(pairs)
    out.append("</main></body></html>\n")
    return "\n".join(out)


#: The longest feedback file name's stem, in UTF-8 bytes: a file system takes 255 in all, and
#: the name gets ``.md``, a hash if it clashes, and a temporary suffix while it is written.
FEEDBACK_NAME_BYTES = 120


def feedback_file_name(student_id: str) -> str:
    """``<student id>.md``, with anything but letters, digits, ``.``, ``-``, ``_`` and ``@``
    replaced, so that no id can name a path outside the folder. An id longer than
    :data:`FEEDBACK_NAME_BYTES` (a file at the top of a class folder is named by its student, and
    may be named 250 characters long) is cut, and the first eight hex digits of its SHA-256
    added, so that two long ids that differ only at their end keep two files."""
    import hashlib

    safe = "".join(c if c.isalnum() or c in ".-_@" else "_" for c in student_id).lstrip(".") or "student"
    raw = safe.encode("utf-8", "surrogatepass")
    if len(raw) > FEEDBACK_NAME_BYTES:
        digest = hashlib.sha256(student_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = raw[:FEEDBACK_NAME_BYTES - 9].decode("utf-8", "ignore") + "-" + digest
    return safe + ".md"


def feedback_markdown(report: SubmissionReport) -> str:
    """One student's feedback: who, which file was graded (and which not), the score, and the
    per-test report (hidden tests included: it goes back once grades are published)."""
    import re

    md = textsafe.markdown  # every name and file name is the student's: literal text only
    body = textsafe.console(student_text(report))
    # A fence longer than any run of tildes or backticks in the text, which cannot close it.
    fence = "~" * max(4, 1 + max((len(run) for run in re.findall(r"~+", body)), default=0))
    lines = [f"# Feedback: {md(report.name or report.student_id)}", "",
             f"- Student: {md(report.student_id)}",
             f"- File graded: {md(report.submission or '(none)')}",
             f"- Status: {md(status(report))}",
             f"- Score: {fmt_points(report.score)} / {fmt_points(report.max_score)}", "",
             fence + "text", body, fence, ""]
    return "\n".join(lines)


def write_feedback(folder, reports) -> None:
    """``folder/<student id>.md`` for every student (:func:`feedback_markdown`). Ids that make
    the same file name (``ann lee`` and ``ann_lee``, or ``Ann`` and ``ann`` on a file system
    that ignores case) get the first eight hex digits of their id's SHA-256 added, so that no
    student's feedback overwrites another's."""
    import hashlib
    from collections import Counter

    folder = Path(folder)
    ids = [report.student_id or report.submission for report in reports]
    base = [feedback_file_name(i) for i in ids]
    clashing = {b for b, n in Counter(b.lower() for b in base).items() if n > 1}
    used = set()
    for report, sid, name in zip(reports, ids, base):
        if name.lower() in clashing:
            name = f"{name[:-3]}-{hashlib.sha256(sid.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}.md"
        while name.lower() in used:  # the same id twice: the later one numbered
            name = f"{name[:-3]}-again.md"
        used.add(name.lower())
        write_atomically(folder / name, feedback_markdown(report))


def is_stub(report: SubmissionReport) -> bool:
    """The untouched template: every failed test says the function is not implemented, and
    nothing passed."""
    return bool(report.results) and report.score == 0 and all(
        r.not_implemented for _, r in report.results)


def failure_rates_html(reports) -> list:
    """Per exercise and per test, the share of students (of those who submitted work) who
    failed it, worst first: where the class is stuck."""
    from html import escape

    if not reports:
        return []
    failed: dict = {}
    order: list = []
    for r in reports:
        for c, result in r.results:
            if c.name not in failed:
                failed[c.name] = [c, 0]
                order.append(c.name)
            failed[c.name][1] += 0 if result.passed else 1
    n = len(reports)
    out = ['<h2>Failure rates</h2><p>Of the students who submitted work.</p>',
           '<div class="wide" tabindex="0" role="region" aria-label="Failure rates">'
           '<table id="failure-rates"><tr><th>exercise</th><th>failed '
           '(all tests passed: no)</th></tr>']
    for exercise in sorted({failed[k][0].exercise for k in order}):
        bad = sum(any(not res.passed for c, res in r.results if c.exercise == exercise)
                  for r in reports)
        title = next((p.title for r in reports for p in r.parts if p.id == exercise), exercise)
        out.append(f"<tr><td>{escape(title)}</td><td>{bad} of {n} ({100 * bad / n:.0f}%)</td></tr>")
    out.append('</table><table id="test-failure-rates"><tr><th>test</th><th>failed</th></tr>')
    for name in sorted(order, key=lambda k: (-failed[k][1], order.index(k))):
        check, count = failed[name]
        out.append(f"<tr><td>{escape(name)}{' (hidden)' if check.hidden else ''}</td>"
                   f"<td>{count} of {n} ({100 * count / n:.0f}%)</td></tr>")
    out.append("</table></div>")
    return out


def write_class_report(path, reports, seed: int | None = None, pairs=None) -> None:
    write_atomically(path, class_report_html(reports, seed, pairs))


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
