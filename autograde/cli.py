"""Command line: ``python -m autograde SUBMISSION... [options]``.

Each SUBMISSION is a notebook (``.ipynb``), a Jupytext-paired MyST ``.md``, a ``.py`` file,
or a folder (a class, in any layout :mod:`autograde.classrun` recognises: Canvas's flat
download, Moodle's folders, one folder per student). ``--roster CSV`` names the students
(the course's own roster, or the LMS's export beside its download). Prints the report for
one submission, or a table for several; ``--json``, ``--csv``, ``--canvas-csv``,
``--moodle-csv``, ``--feedback``, ``--class-report`` (HTML) and ``--gradescope`` write files.
A class run appends each finished student to a journal; SIGINT or SIGTERM stops it and
writes what is done, and ``--resume`` grades the rest.
Exits 0 whenever grading finished, whatever the scores; 2 for bad arguments; 3 when the
grader itself failed (a check crashed, or a sandbox could not be started).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from grading import EXERCISES
from sandbox.handle import ISOLATION_MODES
from sandbox.results import Result, SubmissionReport
from sandbox.submission import SUFFIXES
from solutions._format import plural
from solutions._validate import terse_argparse_errors

from . import classrun
from .classrun import Student


def parse_args(argv):
    parser = terse_argparse_errors(argparse.ArgumentParser(
        prog="python -m autograde",
        description="Grade exercise submissions (.ipynb, paired .md, .py, or folders of them) "
                    "in a sandbox, with the public and hidden tests."))
    parser.add_argument("submissions", nargs="*", metavar="SUBMISSION",
                        help="a file or a folder of files (a class; with one sub-folder per "
                             "student, the sub-folder's name is the student id)")
    parser.add_argument("--roster", metavar="CSV",
                        help="the class list: Canvas's gradebook export, Moodle's grading "
                             "worksheet or participants export (with the submissions folder "
                             "as SUBMISSION), or a CSV with the columns student_id, name, file "
                             "(a submission or a student's folder, relative to the roster); "
                             "students without a submission are listed as missing")
    parser.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--csv", metavar="PATH",
                        help="write the grades, one row per student, for an LMS: student_id, "
                             "name, score, max_score, one column per exercise, status, "
                             "submission (see autograde/reports.py)")
    parser.add_argument("--class-report", metavar="HTML",
                        help="write a class report: score distributions per exercise and how "
                             "many students made each known mistake")
    parser.add_argument("--canvas-csv", metavar="PATH",
                        help="write the grades as Canvas's gradebook import file")
    parser.add_argument("--canvas-assignment", default="Exercises", metavar="NAME",
                        help="the Canvas column: the assignment's name, or 'Name (12345)' "
                             "with its id from the gradebook export (default: Exercises)")
    parser.add_argument("--canvas-per-exercise", action="store_true",
                        help="also one Canvas column (a new assignment) per exercise")
    parser.add_argument("--moodle-csv", metavar="PATH",
                        help="write the grades as Moodle's grading worksheet (upload it, or "
                             "import it in the gradebook by email address)")
    parser.add_argument("--feedback", metavar="FOLDER",
                        help="write each student's feedback as FOLDER/<student id>.md")
    parser.add_argument("--journal", metavar="PATH",
                        help="where each finished student's result is appended at once "
                             "(default: beside the first output file, with .journal added)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the journal of an interrupted run: grade only students "
                             "whose file is new or changed (same seed as that run)")
    parser.add_argument("--similarity", action="store_true",
                        help="with --class-report: list the pairs of students whose code is "
                             "likely copied (identifiers ignored, the template left out), the "
                             "evidence side by side")
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
                        help="memory limit for the submission's whole process group: its "
                             "processes' private memory together, checked every 0.25 s "
                             "(each one's address space is also capped at MB; default 1024)")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed of the hidden tests' random inputs (default: a fresh one, "
                             "recorded in the JSON report)")
    parser.add_argument("--public-only", action="store_true",
                        help="run only the public tests (what students can run themselves)")
    parser.add_argument("--isolation", default="auto", choices=ISOLATION_MODES,
                        help="sandbox strength; auto takes the strongest the system allows")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument("--assignment", metavar="ID", default=None,
                        help="grade the submissions as this assignment (a1, ...: "
                             "assignments.ASSIGNMENTS) instead of the exercises")
    args = parser.parse_args(argv)
    if args.assignment is not None:
        from assignments import ASSIGNMENTS

        if args.assignment not in ASSIGNMENTS:
            parser.error(f"--assignment: no assignment {args.assignment!r} (the course has "
                         f"{', '.join(sorted(ASSIGNMENTS))})")
    if not args.submissions and not args.roster:
        parser.error("give at least one SUBMISSION (a file or a folder), or --roster")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.memory < 256:
        parser.error(f"--memory must be at least 256 (MB), got {args.memory}")
    if args.canvas_per_exercise and args.assignment is not None:
        parser.error("--canvas-per-exercise adds a column per exercise, and an assignment has none: "
                     "its grade is the one column --canvas-assignment names (drop --canvas-per-exercise)")
    if args.canvas_per_exercise and not args.canvas_csv:
        parser.error("--canvas-per-exercise adds columns to the Canvas file: add --canvas-csv PATH")
    if args.similarity and not args.class_report:
        parser.error("--similarity lists the likely copies in the class report: add --class-report HTML")
    if args.similarity:
        import importlib.util

        if importlib.util.find_spec(f"{__package__}.similarity") is None:  # the student release
            parser.error("--similarity: the copy check is not part of this copy of the course "
                         "(the student release leaves it out)")
    return parser, args


def collect(parser, args) -> list:
    """Every student of the run, each once (a :class:`~autograde.classrun.Student` with all
    the files they sent): from the SUBMISSION files and folders, the roster, or both."""
    found: dict = {}
    for item in args.submissions:
        path = Path(item)
        if path.is_dir():
            try:
                students = classrun.students_in(path)
            except ValueError as exc:
                parser.error(str(exc))
            for sid, student in students.items():
                if sid in found:
                    found[sid].files += student.files
                    found[sid].cut_short |= student.cut_short
                else:
                    found[sid] = student
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                parser.error(f"{item}: unsupported file type {path.suffix or '(none)'!r}; "
                             f"expected one of {', '.join(SUFFIXES)} or a folder")
            sid = classrun.student_id_for(path, None)
            student = found.setdefault(sid, Student(sid))
            if all(p.resolve() != path.resolve() for p, _ in student.files):
                student.files.append((path, classrun.display(path.name)))
        else:
            parser.error(f"{item}: no such file or folder")
    if not args.roster:
        return [found[sid] for sid in sorted(found)]
    try:
        roster = classrun.read_roster(args.roster)
        own = classrun.roster_has_files(args.roster)
    except ValueError as exc:
        parser.error(str(exc))
    if own:
        if args.submissions:
            parser.error("give either --roster or SUBMISSION paths, not both (the roster "
                         "names each student's file or folder)")
        return roster
    if not args.submissions:
        parser.error(f"{args.roster} is an LMS roster: give the submissions folder too")
    lms_worth(parser, args)
    students, strangers = classrun.match_roster(roster, found)
    return students + strangers


def lms_worth(parser, args) -> None:
    """Stop, before grading, where the LMS's roster says the assignment is worth other points
    than the grades are out of: Canvas imports a score as points (87 of 100 on an assignment
    worth 10 is 870%), and Moodle skips every grade above the assignment's maximum without a
    word and takes the others as they are."""
    from sandbox import textsafe

    possible = (classrun.assignment_part(args.assignment).max_points if args.assignment
                else sum(e.max_points for e in EXERCISES))
    roster = textsafe.printable(args.roster)
    if args.canvas_csv:
        worth = classrun.roster_maximum(args.roster, args.canvas_assignment)
        if worth is not None and abs(worth - possible) > 1e-9:
            parser.error(f"--canvas-assignment: {args.canvas_assignment!r} is worth {worth:g} points in "
                         f"Canvas ({roster}, Points Possible) but the grades are out of {possible:g}, and "
                         f"Canvas imports them as points: make the assignment worth {possible:g} points "
                         "in Canvas and export the gradebook again")
    if args.moodle_csv:
        worth = classrun.roster_maximum(args.roster)
        if worth is not None and abs(worth - possible) > 1e-9:
            parser.error(f"--moodle-csv: the assignment's maximum grade in Moodle is {worth:g} ({roster}, "
                         f"Maximum Grade) but the grades are out of {possible:g}, and Moodle skips every "
                         f"grade above its maximum without a word: set its maximum grade to {possible:g} "
                         "and download the grading worksheet again")


#: How many students' files to look at before grading, to tell a forgotten --assignment.
LOOK_AT = 25


def forgotten_assignment(students) -> str | None:
    """One line when every file looked at holds an assignment's work and none the exercises'
    (``--assignment`` left out: a ring all-reduce would be graded as Exercise 1 and score
    0); None otherwise. Reads text only, a few files."""
    from assignments.common import grader

    files = [p for s in students[:LOOK_AT] for p, _ in s.files if classrun.gradable(p)][:LOOK_AT]
    guesses = {classrun.guess_assignment(p) for p in files}
    if not files or len(guesses) != 1 or None in guesses:
        return None
    assignment = guesses.pop()
    number, _, title = grader(assignment).NAME.partition(":")
    what = "this file holds" if len(files) == 1 else "these files hold"
    return f"{what} work for {number} ({title.strip()}), not the exercises: add --assignment {assignment}"


def missing_report(student: Student, checks, parts):
    """The report of a student with nothing gradable: zero, and why."""
    from . import reports

    why = ("nothing was submitted" if not student.sent_anything else
           classrun.status(reports.SubmissionReport(""), student))
    report = reports.missing_report(student.student_id, student.name, why, checks, parts)
    report.missing = not student.sent_anything
    return report


class Run:
    """One grading run over a class: worker threads, the journal, and a stop on SIGINT or
    SIGTERM that keeps what is done."""

    def __init__(self, students, checks, args, seed, journal=None, done=None):
        self.students, self.checks, self.args, self.seed = students, checks, args, seed
        self.parts = [classrun.assignment_part(args.assignment)] if args.assignment else list(EXERCISES)
        self.wanted = classrun.wanted_for(args.assignment)
        self.journal, self.done = journal, done or {}
        self.reports: dict = {}  # index -> report, only of students finished before a stop
        self.stop = threading.Event()
        self.signal: int | None = None
        self.lock = threading.Lock()
        self.queue = list(range(len(students)))[::-1]
        self.finished = 0

    def options(self) -> dict:
        a = self.args
        return {"timeout": a.timeout, "isolation": a.isolation, "memory_mb": a.memory}

    def grade(self, student: Student):
        """One student's report; never raises (a failure of the grader is that row's)."""

        try:
            classrun.pick(student, self.wanted)
            if student.chosen is None:
                report = missing_report(student, self.checks, self.parts)
            else:
                digest = classrun.content_hash(
                    student.chosen, self.seed, self.args.public_only, self.args.timeout,
                    self.args.memory, student.shown)
                old = self.done.get(student.student_id)
                report = None
                if old and old[0] == digest and not old[1].get("grader_errors"):
                    report = classrun.report_from_record(old[1], self.checks, self.parts)
                reused = report is not None
                if not reused and self.args.assignment:
                    report = classrun.grade_assignment(student.chosen, self.args.assignment,
                                                       label=student.shown)
                elif not reused:
                    report = classrun.grade_student(student.chosen, self.checks,
                                                    student.student_id, label=student.shown,
                                                    **self.options())
                report.submission = student.shown
                if self.journal is not None and not self.stop.is_set() and not reused:
                    self.journal.add(student.student_id, digest, report)
        except Exception as exc:
            report = SubmissionReport(submission=student.shown, parts=self.parts)
            report.grader_errors = [f"{type(exc).__name__} while reading this student's files"]
            report.results = [(c, Result(False, "Not graded: the grader failed on this file. "
                                                "Please tell your instructor.")) for c in self.checks]
        report.student_id, report.name = student.student_id, student.name
        report.student = student
        try:
            report.status_text = classrun.status(report, student)
        except Exception:
            report.status_text = "grader error"
        return report

    def work(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                if not self.queue:
                    return
                i = self.queue.pop()
            report = self.grade(self.students[i])
            if self.stop.is_set():
                return  # interrupted meanwhile: its sandbox was stopped, the result is not kept
            with self.lock:
                self.reports[i] = report
                self.finished += 1
            self.progress(report)

    def progress(self, report) -> None:
        from . import reports
        from sandbox import textsafe

        if len(self.students) > 1 and not self.args.quiet and sys.stderr.isatty():
            print(textsafe.console(
                f"[{self.finished}/{len(self.students)}] {report.student_id}: "
                f"{reports.fmt_points(report.score)}/{reports.fmt_points(report.max_score)}"),
                file=sys.stderr)

    def on_signal(self, signum, frame) -> None:
        self.signal = signum
        self.stop.set()

    def run(self) -> list:
        threads = [threading.Thread(target=self.work, daemon=True, name=f"autograde-{k}")
                   for k in range(min(self.args.jobs, max(1, len(self.students))))]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and not self.stop.is_set():
            for t in threads:
                t.join(timeout=0.05)
        if self.stop.is_set():
            from sandbox.handle import stop_all

            stop_all()  # every worker dies with its zygote; grading threads return soon
            until = time.monotonic() + 1.0
            for t in threads:
                t.join(timeout=max(0.0, until - time.monotonic()))
        return [self.reports[i] for i in sorted(self.reports)]


def default_journal(args) -> Path | None:
    if args.journal:
        return Path(args.journal)
    for out in (args.csv, args.json, args.canvas_csv, args.moodle_csv, args.class_report):
        if out:
            return Path(out).with_name(Path(out).name + ".journal")
    return None


RUN_FOLDER = re.compile(r"^autograde-run-(\d+)-")


def run_folder() -> Path:
    """A private temporary folder for everything this run creates (sandboxes, zygotes),
    removed when it ends, even by SIGINT or SIGTERM; one left by a SIGKILLed run is removed
    by the next run (its process id is in the name)."""
    base = Path(tempfile.gettempdir())
    try:
        entries = list(os.scandir(base))
    except OSError:
        entries = []
    for entry in entries:
        match = RUN_FOLDER.match(entry.name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not entry.is_dir(
                    follow_symlinks=False):
                continue
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass
    folder = Path(tempfile.mkdtemp(prefix=f"autograde-run-{os.getpid()}-", dir=base))
    os.chmod(folder, 0o711)
    return folder


def main(argv=None) -> int:
    with contextlib.suppress(ValueError):  # honour Ctrl-C even if started with it ignored
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    parser, args = parse_args(sys.argv[1:] if argv is None else argv)
    students = collect(parser, args)
    if args.gradescope and len(students) != 1:
        parser.error(f"--gradescope grades exactly one submission, got {len(students)}")
    single = (len(students) == 1 and not args.roster and len(args.submissions) == 1
              and Path(args.submissions[0]).is_file())
    if args.assignment is None:
        forgotten = forgotten_assignment(students)
        if forgotten:
            parser.error(forgotten)
    journal_path = None if single else default_journal(args)
    header_seed, done = None, {}
    if args.resume:
        if journal_path is None or not journal_path.exists():
            parser.error("--resume needs the journal of an earlier run "
                         f"({journal_path or 'give --journal or an output file'}: not found)")
        try:
            header, done = classrun.read_journal(journal_path)
        except ValueError as exc:
            parser.error(str(exc))
        header_seed = header.get("seed")
        if args.seed is not None and args.seed != header_seed:
            parser.error(f"--resume: the journal was graded with --seed {header_seed}, "
                         f"not {args.seed}")
    seed = (args.seed if args.seed is not None else header_seed if header_seed is not None
            else random.SystemRandom().randrange(2**31))

    from . import reports

    previous_tmp = tempfile.tempdir
    folder = run_folder()
    tempfile.tempdir = str(folder)
    reports.PRIVATE_ROOTS[:] = [folder, Path.cwd().resolve(), Path(previous_tmp or
                                tempfile.gettempprefix()).resolve(), Path.home()] + [
        Path(p).resolve() for p in args.submissions] + (
        [Path(args.roster).resolve().parent] if args.roster else [])
    handlers = {}
    run = None
    try:
        from sandbox.handle import prestart, protect_grader_memory, stop_all

        stop_all(False)
        if args.assignment:  # graded by its own multi-rank sandbox: no exercise checks
            from sandbox.multirank import prestart as prestart_ranks

            prestart_ranks()  # the rank zygote imports torch on another core meanwhile
            checks = classrun.assignment_checks(args.assignment)
        else:
            prestart(args.isolation)  # the sandbox's template process starts while we import
            from grading import load_checks

            protect_grader_memory()
            checks = load_checks(include_hidden=not args.public_only, seed=seed)
        journal = None
        if journal_path is not None:
            journal = classrun.Journal(journal_path, {"seed": seed}, keep=done if args.resume else None)
        run = Run(students, checks, args, seed, journal, done)
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:  # SIGINT too when inherited as ignored (a script started us with `&`)
                handlers[signum] = signal.signal(signum, run.on_signal)
            except (ValueError, OSError):  # not the main thread
                pass
        started = time.monotonic()
        results = run.run()
        if journal is not None:
            journal.close()
        return finish(args, results, run, seed, started, single, journal_path)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        from sandbox.handle import stop_all

        stop_all(False)
        tempfile.tempdir = previous_tmp
        shutil.rmtree(folder, ignore_errors=True)


def first_names(names, shown: int = 3) -> str:
    """The first ``shown`` of ``names``, printable, then ", ..." when there are more: enough
    for the instructor to find the rest in the files, in one line."""
    from sandbox import textsafe

    head = ", ".join(textsafe.printable(str(name)) for name in names[:shown])
    return head + (", ..." if len(names) > shown else "")


def finish(args, results, run, seed, started, single, journal_path) -> int:
    """Print and write what was graded (all of it, or what was done before a stop)."""
    from sandbox import textsafe

    from . import lms, reports

    try:
        if not args.quiet:
            print_results(args, results, seed, started)
    except BrokenPipeError:  # e.g. piped into `head`: the reports below still get written
        sys.stdout = open(os.devnull, "w")
    rows = [(r, getattr(r, "student", None)) for r in sorted(results, key=lambda r: r.student_id)]
    if args.json:
        reports.write_json(args.json, results, seed, single=single)
    if args.csv:
        reports.write_csv(args.csv, results)
    if args.class_report:
        pairs = None
        if args.similarity:
            from . import similarity

            began = time.monotonic()
            pairs = similarity.similar({
                r.student_id: similarity.student_code(r.student.chosen) for r in results
                if getattr(r, "student", None) is not None and r.student.chosen is not None},
                template=similarity.template_code(args.assignment),
                keep=classrun.wanted_for(args.assignment).names)
            if not args.quiet:
                groups, flagged = pairs
                print(f"Similarity: {len(groups)} groups with the same code and {len(flagged)} pairs "
                      f"flagged in {time.monotonic() - began:.1f} s.", file=sys.stderr)
        reports.write_class_report(args.class_report, results, seed, pairs)
    lms_rows = rows
    if args.roster and (args.canvas_csv or args.moodle_csv):
        # the LMS knows only the students on its roster: a file from anyone else (Canvas's test
        # student, a student who dropped) is graded for you and left out of the LMS's file
        lms_rows = [(r, s) for r, s in rows if s is None or s.on_roster]
        strangers = [r.student_id for r, s in rows if s is not None and not s.on_roster]
        if strangers:
            shown = first_names(strangers)
            lms_files = " and ".join(textsafe.printable(f) for f in (args.canvas_csv, args.moodle_csv) if f)
            print(f"autograde: {plural(len(strangers), 'submitting student')} {'is' if len(strangers) == 1 else 'are'} "
                  f"not on the roster ({shown}): graded, "
                  f"and left out of {lms_files}, which the LMS could not match them in", file=sys.stderr)
    if args.canvas_csv:
        reports.write_atomically(args.canvas_csv, lms.canvas_csv(
            lms_rows, args.canvas_assignment, args.canvas_per_exercise))
    if args.moodle_csv:
        reports.write_atomically(args.moodle_csv, lms.moodle_csv(lms_rows))
        unmatched = lms.moodle_unmatched(lms_rows)
        if unmatched:
            shown = first_names(unmatched)
            print(f"autograde: {len(unmatched)} of {len(lms_rows)} rows of {textsafe.printable(args.moodle_csv)} have no "
                  f"Identifier ({shown}), and Moodle skips such rows without a word: grade the folder of Moodle's "
                  "\"Download all submissions\", or give its grading worksheet as --roster", file=sys.stderr)
    if args.feedback:
        reports.write_feedback(args.feedback, results)
    if args.gradescope and results:
        reports.write_gradescope(args.gradescope, results[0], args.hidden_visibility)
    if run.signal is not None:
        name = signal.Signals(run.signal).name
        again = (" Run the same command with --resume to grade the rest." if journal_path
                 else "")
        print(f"autograde: interrupted ({name}): {len(results)} of {len(run.students)} "
              f"students graded, and written.{again}", file=sys.stderr)
        return 128 + run.signal
    errors = [(r.student_id or r.submission, e) for r in results for e in r.grader_errors]
    for who, error in errors:
        print(f"autograde: grader error on {textsafe.printable(who)}: "
              f"{textsafe.printable(reports.scrub(error))}", file=sys.stderr)
    return 3 if errors else 0


def print_results(args, results, seed, started) -> None:
    from sandbox import textsafe
    from sandbox.handle import readable_by_others

    from . import reports

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
              "student code ran with resource limits only (the instructors' guide, \"The sandbox\", "
              "says what that leaves open).",
              file=sys.stderr)
