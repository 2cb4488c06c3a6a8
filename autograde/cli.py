"""Command line: ``python -m autograde SUBMISSION... [options]``.

Each SUBMISSION is a notebook (``.ipynb``), a Jupytext-paired MyST ``.md``, a ``.py`` file,
or a folder (a class: every submission inside it, recursively; with one sub-folder per
student, the sub-folder's name is the student id). ``--roster CSV`` names the students
instead. Prints the report for one submission, or a table for several; ``--json``,
``--csv`` (grades for an LMS), ``--class-report`` (HTML) and ``--gradescope`` write files.
Exits 0 whenever grading finished, whatever the scores; 2 for bad arguments; 3 when the
grader itself failed (a check crashed, or a sandbox could not be started).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from pathlib import Path

from .sandbox import ISOLATION_MODES
from .submission import SUFFIXES


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m autograde",
        description="Grade exercise submissions (.ipynb, paired .md, .py, or folders of them) "
                    "in a sandbox, with the public and hidden tests.")
    parser.add_argument("submissions", nargs="*", metavar="SUBMISSION",
                        help="a file or a folder of files (a class; with one sub-folder per "
                             "student, the sub-folder's name is the student id)")
    parser.add_argument("--roster", metavar="CSV",
                        help="the class list: columns student_id, name, file (a submission "
                             "or a student's folder, relative to the roster); students "
                             "without a submission are listed as missing")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--csv", metavar="PATH",
                        help="write the grades, one row per student, for an LMS: student_id, "
                             "name, score, max_score, one column per exercise, status, "
                             "submission (see autograde/reports.py)")
    parser.add_argument("--class-report", metavar="HTML",
                        help="write a class report: score distributions per exercise and how "
                             "many students made each known mistake")
    parser.add_argument("--gradescope", metavar="PATH",
                        help="write Gradescope's results.json (one submission only)")
    parser.add_argument("--hidden-visibility", default="after_published",
                        choices=("visible", "hidden", "after_due_date", "after_published"),
                        help="Gradescope visibility of hidden tests (default: after_published)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="grade N submissions at once (default 1)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds allowed per test, and per notebook cell (default 10)")
    parser.add_argument("--memory", type=int, default=1024, metavar="MB",
                        help="address-space limit of the student's process (default 1024)")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed of the hidden tests' random inputs (default: a fresh one, "
                             "recorded in the JSON report)")
    parser.add_argument("--public-only", action="store_true",
                        help="run only the public tests (what students can run themselves)")
    parser.add_argument("--isolation", default="auto", choices=ISOLATION_MODES,
                        help="sandbox strength; auto takes the strongest the system allows")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    args = parser.parse_args(argv)
    if not args.submissions and not args.roster:
        parser.error("give at least one SUBMISSION (a file or a folder), or --roster")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.memory < 256:
        parser.error(f"--memory must be at least 256 (MB), got {args.memory}")
    return parser, args


def expand(parser, items) -> tuple[list, list, list]:
    """(paths, labels, student ids): files as given; a folder's files labelled relative to
    the folder, each student identified by their sub-folder (or file name)."""
    from .classrun import find_submissions, student_id_for

    paths, labels, ids = [], [], {}
    for item in items:
        path = Path(item)
        if path.is_dir():
            for found in find_submissions(path):
                paths.append(found)
                labels.append(str(path / found.relative_to(path)))
                ids[found.resolve()] = student_id_for(found, path)
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                parser.error(f"{item}: unsupported file type {path.suffix or '(none)'!r}; "
                             f"expected one of {', '.join(SUFFIXES)} or a folder")
            paths.append(path)
            labels.append(str(path))
            ids[path.resolve()] = student_id_for(path, None)
        else:
            parser.error(f"{item}: no such file or folder")
    seen, unique = set(), []
    for p, label in zip(paths, labels):
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((p, label))
    return ([p for p, _ in unique], [label for _, label in unique],
            [ids[p.resolve()] for p, _ in unique])


def from_roster(parser, roster) -> tuple[list, list, list, list, list]:
    """(paths, labels, ids, names, missing) for the roster's students; ``missing`` holds
    (id, name, why) of those without a submission."""
    from .classrun import pick_from_folder, read_roster

    try:
        rows = read_roster(roster)
    except ValueError as exc:
        parser.error(str(exc))
    paths, labels, ids, names, missing = [], [], [], [], []
    for sid, name, target in rows:
        path = pick_from_folder(target) if target is not None and target.is_dir() else target
        if path is None or not path.is_file() or path.suffix.lower() not in SUFFIXES:
            where = target if target is not None else "(no file given)"
            missing.append((sid, name, f"no submission at {where}"))
            continue
        paths.append(path)
        labels.append(str(path))
        ids.append(sid)
        names.append(name)
    return paths, labels, ids, names, missing


def main(argv=None) -> int:
    parser, args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = []
    if args.roster:
        if args.submissions:
            parser.error("give either --roster or SUBMISSION paths, not both (the roster "
                         "names each student's file or folder)")
        paths, labels, ids, names, missing = from_roster(parser, args.roster)
    else:
        paths, labels, ids = expand(parser, args.submissions)
        names = [""] * len(paths)
    if args.gradescope and len(paths) != 1:
        parser.error(f"--gradescope grades exactly one submission, got {len(paths)}")

    from .sandbox import prestart, protect_grader_memory

    prestart(args.isolation)  # the sandbox's template process starts while we import
    from tests.grading import load_checks

    from . import reports, textsafe
    from .classrun import grade_many

    protect_grader_memory()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    checks = load_checks(include_hidden=not args.public_only, seed=seed)
    lock, done = threading.Lock(), [0]
    started = time.monotonic()

    def progress(report):
        if len(paths) > 1 and not args.quiet and sys.stderr.isatty():
            with lock:
                done[0] += 1
                print(f"[{done[0]}/{len(paths)}] {report.submission}: "
                      f"{reports.fmt_points(report.score)}/{reports.fmt_points(report.max_score)}",
                      file=sys.stderr)

    results = grade_many(paths, checks, jobs=args.jobs, progress=progress, labels=labels,
                         timeout=args.timeout, isolation=args.isolation, memory_mb=args.memory)
    for report, sid, name in zip(results, ids, names):
        report.student_id, report.name = sid, name
    results += [reports.missing_report(sid, name, why, checks) for sid, name, why in missing]
    try:
        if not args.quiet:
            print_results(args, results, seed, started)
    except BrokenPipeError:  # e.g. piped into `head`: the reports below still get written
        sys.stdout = open(os.devnull, "w")
    if args.json:
        reports.write_json(args.json, results, seed)
    if args.csv:
        reports.write_csv(args.csv, results)
    if args.class_report:
        reports.write_class_report(args.class_report, results, seed)
    if args.gradescope:
        reports.write_gradescope(args.gradescope, results[0], args.hidden_visibility)
    errors = [(r.submission, e) for r in results for e in r.grader_errors]
    for submission, error in errors:
        print(f"autograde: grader error on {submission}: {textsafe.printable(error)}",
              file=sys.stderr)
    return 3 if errors else 0


def print_results(args, results, seed, started) -> None:
    from . import reports, textsafe
    from .sandbox import readable_by_others

    if len(results) == 1:
        report = results[0]
        sandbox = report.isolation or ("failed" if report.grader_errors else "not needed")
        print(f"{report.submission} (sandbox: {sandbox}, "
              f"{report.seconds:.2f} s)\n")
        print(textsafe.console(reports.student_text(report)))
    else:
        print(textsafe.console(reports.table(results)))
        print(f"\nGraded {len(results)} submissions in {time.monotonic() - started:.1f} s "
              f"(hidden-test seed {seed}).")
    if any(r.isolation == "uid" for r in results) and readable_by_others():
        print("Warning: namespaces are unavailable, so submissions ran as an unprivileged "
              "uid, and this course folder is readable by other users: a submission could "
              "read the tests and solutions. Run 'chmod 700' on it (run_autograder does "
              "this on Gradescope).", file=sys.stderr)
    if results and results[0].isolation == "rlimits":
        print("Warning: this system allows no namespaces and the grader is not root, so "
              "student code ran with resource limits only (see book/instructors.md).",
              file=sys.stderr)
