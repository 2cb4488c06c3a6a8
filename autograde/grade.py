"""Grade submissions: run the exercise checks against sandboxed submissions.

The checks (``grading``) and every expected value stay in this process; a check talks
to the submission only through ``call(*args)``, which :class:`sandbox.handle.Sandbox`
turns into a request to the confined worker. Points come only from the checks' own
comparisons: nothing the submission prints, returns as an exit code or writes to a file
takes part.
"""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

from grading import EXERCISES, REGRADES
from grading.core import handout_parameters
from sandbox import textsafe
from sandbox.handle import Sandbox
from sandbox.results import SubmissionReport

__all__ = ["SubmissionReport", "grade_submission", "function_at"]


def grade_submission(path, checks, *, timeout: float = 10.0, isolation: str = "auto",
                     memory_mb: int = 1024, label: str | None = None, student: str | None = None,
                     _second_pass: bool = False) -> SubmissionReport:
    """Grade one file with ``checks``; never raises for anything the submission does.

    ``student``: the student's id. The hidden checks then run on this student's own inputs,
    derived from the checks' seed and the id (:func:`grading.for_student`): the same
    for every grading of this student, other numbers for every classmate."""
    from grading import Result, SubmissionError, for_student

    checks = for_student(checks, student)

    started = time.monotonic()
    report = SubmissionReport(submission=textsafe.file_name(label or str(path)), parts=list(EXERCISES))
    has_code = False  # a file refused unread (too large, not text) has nothing to regrade
    try:
        with Sandbox(path, timeout=timeout, isolation=isolation, memory_mb=memory_mb) as sandbox:
            report.isolation = sandbox.isolation
            has_code = bool(sandbox.submission.units)  # (and set below: False where the file ran out of time)
            report.notes = list(sandbox.submission.notes)
            if sandbox.submission.problem:
                report.problems.append(f"{textsafe.file_name(Path(path).name)}: "
                                       f"{sandbox.submission.problem}.")
            for check in checks:
                try:
                    with sandbox.deadline(timeout):
                        result = check.run(_bound(sandbox, check.function))
                    if not isinstance(result, Result):
                        raise TypeError(f"the check returned {type(result).__name__}")
                except SubmissionError as err:  # a check may let one through
                    result = Result(False, err.message, err.not_implemented)
                except Exception as exc:
                    result = Result(False, "The grader could not run this test "
                                           f"({type(exc).__name__}). Please tell your instructor.")
                    report.grader_errors.append(f"{check.name}: {type(exc).__name__}: {exc}")
                report.results.append((check, result))
            report.problems += sandbox.problems
            for problem in sandbox.problems:
                inside = function_at(sandbox.submission, problem)
                if inside:
                    report.problem_causes[problem] = inside
            if sandbox.gave_up:
                report.problems.append(sandbox.gave_up)
            # a regrade appends code to the file: where the file ran past its time, that would not run either
            has_code = has_code and not sandbox.ran_out_of_time
    except Exception as exc:  # the sandbox could not be built, or worse: this file's row says so
        report.grader_errors.append(str(exc) if isinstance(exc, RuntimeError) else
                                    f"{type(exc).__name__}: {textsafe.printable(exc)}")
        report.results = [(c, Result(False, "Not graded: the grader failed to start. Please "
                                            "tell your instructor.")) for c in checks]
    for regrade in REGRADES if not _second_pass and has_code else ():
        mine = [c for c in checks if c.exercise == regrade.exercise]  # already this student's
        if not mine or report.grader_errors or not regrade.needed(report.results):
            continue
        try:
            _regrade(path, mine, regrade, report, timeout=timeout, isolation=isolation, memory_mb=memory_mb)
        except Exception as exc:  # this file's "grader error", never the class run's end
            report.grader_errors.append(f"{regrade.exercise} regrade: {type(exc).__name__}: "
                                        f"{textsafe.printable(exc)}")
    report.seconds = time.monotonic() - started
    return report


def _with_cell(path: Path, source: str, folder: Path) -> Path | None:
    """A copy of the submission with ``source`` run after everything else; None when the
    file has no place for it (a notebook whose cells are not a list)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    target = Path(folder) / path.name
    if path.suffix.lower() == ".ipynb":
        import json

        notebook = json.loads(text)
        if not isinstance(notebook, dict) or not isinstance(notebook.get("cells", []), list):
            return None
        notebook.setdefault("cells", []).append(
            {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
             "execution_count": None})
        target.write_text(json.dumps(notebook), encoding="utf-8")
    elif path.suffix.lower() == ".md":
        target.write_text(text.rstrip("\n") + "\n\n```{code-cell} ipython3\n" + source + "```\n",
                          encoding="utf-8")
    else:
        target.write_text(text.rstrip("\n") + "\n\n\n" + source, encoding="utf-8")
    return target


def _regrade(path, checks, regrade, report, **options) -> None:
    """Run one grader's :class:`~grading.core.Regrade`: grade its exercise's ``checks`` again
    with the regrade's code appended to the submission, and keep what its ``merge`` decides.
    The same in the student release (the check cells, ``python -m autograde``) as for the
    instructor, so both report the same public points."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autograde-regrade-") as tmp:
        try:
            derived = _with_cell(path, regrade.source(), Path(tmp))
        except (OSError, ValueError):
            derived = None
        if derived is None:
            return
        again = grade_submission(derived, checks, _second_pass=True, label=report.submission, **options)
    report.results, changed = regrade.merge(report.results, {c.name: r for c, r in again.results})
    if changed:
        report.notes.append(regrade.note.rstrip("."))


_PLACE = re.compile(r"\((?:(cell \d+), )?line (\d+)\)\.?$")


def _function_spans(submission) -> list:
    """(unit label, function name, first line, last line) of every function in the
    submission's units; parsed once per submission (text only, nothing runs)."""
    cached = getattr(submission, "_function_spans", None)
    if cached is not None:
        return cached
    spans = []
    for unit in submission.units:
        try:
            tree = ast.parse(unit.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        shift = getattr(unit, "line", 1) - 1  # a unit's source starts at this line of the file
        spans += [(unit.label, node.name, node.lineno + shift, (node.end_lineno or node.lineno) + shift)
                  for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    try:
        submission._function_spans = spans
    except AttributeError:
        pass
    return spans


def function_at(submission, message: str) -> str | None:
    """The student's function in which an error happened, from the place at the end of a
    sandbox message ("... (cell 4, line 2)" or "... (line 12)"); None if unknown."""
    match = _PLACE.search(message or "")
    if not match or submission is None:
        return None
    cell, line = match.group(1), int(match.group(2))
    inside = [(first, name) for label, name, first, last in _function_spans(submission)
              if (label == cell if cell else label.startswith("line")) and first <= line <= last]
    return max(inside)[1] if inside else None  # the innermost: the latest to start


def _bound(sandbox, function: str):
    """The ``call(*args)`` a check receives: this function, in this submission's sandbox, by
    the hand-out's parameter names where its signature takes them. An error raised inside
    another of the student's functions names that function."""
    names = handout_parameters(function)

    def call(*args):
        try:
            return sandbox.call(function, *args, names=names)
        except Exception as err:
            if getattr(err, "kind", None) != "raised":
                raise
            inside = function_at(getattr(sandbox, "submission", None), err.message)
            if inside is None or inside == function:
                raise
            raise type(err)(f"{err.message.rstrip('.')}, inside your `{inside}`, which "
                            f"`{function}` calls", kind=err.kind,
                            exception_type=err.exception_type) from None

    call.other = lambda name: _bound(sandbox, name)  # the same submission's other functions
    return call
