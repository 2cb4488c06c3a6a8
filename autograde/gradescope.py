"""Gradescope's entry point: grade the one submission in a folder, write ``results.json``.

    python -m autograde.gradescope /autograder/submission /autograder/results/results.json

``run_autograder`` (see ``instructor/bundle/``) calls this on Gradescope's machines, with the
hidden tests. A student may upload several files: the one graded is chosen by the rule a
class run uses (:func:`autograde.classrun.pick`: the file that defines the most of the four
functions, then the exercises notebook by name, then the newest), and the feedback names it
and the others. Always writes results.json;
exits 0 whatever the score, 3 if the grader itself failed (results.json then says so), so
that Gradescope reports an autograder failure instead of a silent zero.

``--assignment ID`` grades the submission as that assignment (``assignments.ASSIGNMENTS``)
instead of the exercises; the bundle built with ``make gradescope ASSIGNMENT=ID`` passes it.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

from sandbox import textsafe
from solutions._validate import terse_argparse_errors

from . import classrun
from .reports import VISIBILITIES, write_atomically, write_gradescope


def pick_submission(folder: Path, assignment: str | None = None):
    """(path or None, a note for the student about what was chosen): the class run's own
    rule (:func:`autograde.classrun.pick`, for the exercises or ``assignment``), so Gradescope
    grades what a local run grades."""
    student = classrun.Student("", files=[
        (p, "/".join(classrun.display(x) for x in p.relative_to(folder).parts))
        for p in classrun.walk(folder)])
    classrun.pick(student, classrun.wanted_for(assignment))
    if student.chosen is None:
        return None, ""
    note = ""
    if student.others:
        text = textsafe.printable(classrun.several_files(student))
        note = text[:1].upper() + text[1:] + "."  # not capitalize(): it lowercases file names
    return student.chosen, note


def gradescope_student(submission_dir: Path) -> str:
    """The submitting student's Gradescope user id, from ``submission_metadata.json`` beside
    the submission folder ("users": [{"id": ...}], the first user of a group; Gradescope's
    "Submission Metadata" page), else ``GRADESCOPE_STUDENT``, else "" (no per-student inputs)."""
    import json

    try:
        meta = json.loads((Path(submission_dir).parent / "submission_metadata.json")
                          .read_text(encoding="utf-8"))
        return str(meta["users"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return os.environ.get("GRADESCOPE_STUDENT", "")


def main(argv=None) -> int:
    parser = terse_argparse_errors(argparse.ArgumentParser(prog="python -m autograde.gradescope",
                                     description=__doc__.splitlines()[0]))
    parser.add_argument("submission_dir", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--hidden-visibility", default="after_published", choices=VISIBILITIES)
    parser.add_argument("--assignment", default=None, metavar="ID")
    args = parser.parse_args(argv)
    try:
        return grade(args)
    except Exception as exc:  # whatever happened, Gradescope gets a results.json
        import json

        write_atomically(args.results, json.dumps({
            "score": 0.0, "tests": [], "output_format": "text",
            "output": "The autograder failed on this submission. Please tell your "
                      "instructor."}) + "\n")
        print(f"autograde: grader error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3


def no_submission(args, what: str) -> int:
    """A zero with what to upload, naming the files the student did send (at most five)."""
    import json

    sent = [textsafe.file_name(p.relative_to(args.submission_dir).as_posix())
            for p in classrun.walk(args.submission_dir)]
    names = ", ".join(sent[:5]) + (f" and {len(sent) - 5} more" if len(sent) > 5 else "")
    write_atomically(args.results, json.dumps({
        "score": 0.0, "tests": [], "output_format": "text",
        "output": "No notebook (.ipynb), .py file or paired .md was found in your "
                  + (f"submission (it holds {names})" if sent else "submission (it is empty)")
                  + f". Upload your {what}."}) + "\n")
    print("no submission found", file=sys.stderr)
    return 0


def finish(args, report, note, visibility: str, extra: dict, how) -> int:
    """Write a graded ``report`` as Gradescope's results.json (``note``, if any, said first;
    hidden tests at ``visibility``; ``extra`` added to it) and say the score on stdout, with
    ``how()`` in brackets. Exit status 3 where the grader itself failed (its errors on
    stderr), else 0."""
    if note:
        report.notes.insert(0, note.rstrip("."))
    write_gradescope(args.results, report, visibility, extra=extra)
    if report.grader_errors:
        for error in report.grader_errors:
            print(f"autograde: grader error: {error}", file=sys.stderr)
        return 3
    print(f"{report.submission}: {report.score:g}/{report.max_score:g} ({how()})")
    return 0


def grade_assignment(args) -> int:
    """An assignment's submission: its grader (multi-rank sandbox), every part visible."""
    from assignments.common import grader
    from sandbox.multirank import prestart

    module = grader(args.assignment)  # an unknown id fails here: results.json says so
    prestart()  # the rank zygote imports torch on another core while the submission is found
    path, note = pick_submission(args.submission_dir, args.assignment)
    if path is None:
        return no_submission(args, f"notebook for {module.NAME}")
    report = classrun.grade_assignment(path, args.assignment,
                                       label=textsafe.file_name(path.relative_to(args.submission_dir)))
    return finish(args, report, note, "visible", {"assignment": args.assignment},
                  lambda: f"{args.assignment}, ranks: {report.isolation}, {report.seconds:.2f} s")


def grade(args) -> int:
    if args.assignment:
        return grade_assignment(args)
    from sandbox.handle import prestart, protect_grader_memory

    prestart()
    from grading import load_checks

    protect_grader_memory()
    path, note = pick_submission(args.submission_dir)
    if path is None:
        return no_submission(args, "exercises notebook (09-exercises.ipynb)")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    checks = load_checks(include_hidden=True, seed=seed)
    report = classrun.grade_student(path, checks, gradescope_student(args.submission_dir),
                                    timeout=args.timeout,
                                    label=textsafe.file_name(path.relative_to(args.submission_dir)))
    return finish(args, report, note, args.hidden_visibility, {"seed": seed},
                  lambda: f"sandbox: {report.isolation}, {report.seconds:.2f} s, seed {seed}")


if __name__ == "__main__":
    sys.exit(main())
