"""Gradescope's entry point: grade the one submission in a folder, write ``results.json``.

    python -m autograde.gradescope /autograder/submission /autograder/results/results.json

``run_autograder`` (see ``autograde/bundle/``) calls this on Gradescope's machines, with the
hidden tests. A student may upload several files: the exercises notebook is preferred, then
any notebook, then a ``.py`` file, then a paired MyST ``.md``. Always writes results.json;
exits 0 whatever the score, 3 if the grader itself failed (results.json then says so), so
that Gradescope reports an autograder failure instead of a silent zero.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from .grade import NOT_SUBMISSIONS, grade_submission, is_notebook_markdown
from .reports import VISIBILITIES, write_atomically, write_gradescope
from .textsafe import file_name

PREFERENCE = (".ipynb", ".py", ".md")


def pick_submission(folder: Path):
    """(path or None, a note for the student about what was chosen)."""
    candidates = [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()
                  and p.suffix.lower() in PREFERENCE and p.name not in NOT_SUBMISSIONS
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                  and (p.suffix.lower() != ".md" or is_notebook_markdown(p))]
    if not candidates:
        return None, ""

    def rank(p: Path):
        return (PREFERENCE.index(p.suffix.lower()), "exercise" not in p.name.lower(),
                -p.stat().st_size, str(p))

    chosen = min(candidates, key=rank)
    note = ""
    if len(candidates) > 1:
        note = (f"Graded {file_name(chosen.relative_to(folder))}; also uploaded: "
                + ", ".join(file_name(p.relative_to(folder)) for p in candidates if p != chosen)
                + ".")
    return chosen, note


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograde.gradescope",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("submission_dir", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--hidden-visibility", default="after_published", choices=VISIBILITIES)
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


def grade(args) -> int:
    from .sandbox import prestart, protect_grader_memory

    prestart()
    from tests.grading import load_checks

    protect_grader_memory()
    path, note = pick_submission(args.submission_dir)
    if path is None:
        import json

        write_atomically(args.results, json.dumps({
            "score": 0.0, "tests": [], "output_format": "text",
            "output": "No notebook (.ipynb), .py file or paired .md was found in your "
                      "submission. Upload your exercises notebook (09-exercises.ipynb)."}) + "\n")
        print("no submission found", file=sys.stderr)
        return 0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    checks = load_checks(include_hidden=True, seed=seed)
    report = grade_submission(path, checks, timeout=args.timeout,
                              label=file_name(path.relative_to(args.submission_dir)))
    if note:
        report.notes.insert(0, note.rstrip("."))
    write_gradescope(args.results, report, args.hidden_visibility, extra={"seed": seed})
    if report.grader_errors:
        for error in report.grader_errors:
            print(f"autograde: grader error: {error}", file=sys.stderr)
        return 3
    print(f"{report.submission}: {report.score:g}/{report.max_score:g} "
          f"(sandbox: {report.isolation}, {report.seconds:.2f} s, seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
