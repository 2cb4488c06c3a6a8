"""The grading vocabulary: exercises, checks, results, and how a check calls a submission.

A check never touches a student's function directly. It calls ``call(*args)``, where the
arguments are JSON-able (floats, ints, strings, lists of floats) and the answer comes back as
plain data (float, nested lists of floats, str; see :mod:`sandbox.plain`) or as a
:class:`SubmissionError`. The same check therefore runs in-process (the notebook's
self-check, :func:`local_call`) and against a sandboxed submission (the autograder).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from sandbox.confined.calling import call_by_names
from sandbox.plain import NotPlainData, SubmissionError, to_plain
from sandbox.results import Check, Part, Result  # noqa: F401 (the checks' vocabulary, re-exported)


@dataclass(frozen=True)
class Exercise(Part):
    """One graded exercise: the registry every part of the grader reads (the checks, the
    reports' columns, the release's stubs), so that no list of exercises is written twice.

    ``id``: the report's key; ``title``: "Exercise N (...): ...", as the notebook heads it;
    ``function``: what the student writes; ``reference``: the file of ``solutions/`` that
    holds the course's own answer (stubbed in the student release)."""

    reference: str

    @property
    def number(self) -> str:
        """How the course names it: "1" for "Exercise 1 (easy): ..."."""
        return self.title.split(":")[0].split()[1]


EXERCISES = [
    Exercise("ex1", "Exercise 1 (easy): Chinchilla loss calculator", "chinchilla_loss", 10,
             "solutions/scaling.py"),
    Exercise("ex2", "Exercise 2 (medium): compute-optimal allocation", "compute_optimal", 20,
             "solutions/scaling.py"),
    Exercise("ex3", "Exercise 3 (medium): parallelism memory footprint", "memory_per_gpu", 30,
             "solutions/memory.py"),
    # Exercise 4 has two parts, graded apart: (a) the first estimate, under its original id
    # and function; (b) the estimate per axis that sections 5-7 teach. Together 40 points.
    Exercise("ex4", "Exercise 4(a) (hard): communication cost, the first estimate",
             "communication_time_per_step", 15, "solutions/communication.py"),
    Exercise("ex4b", "Exercise 4(b) (hard): communication cost per axis, as sections 5-7 teach",
             "communication_time_per_step_by_axis", 25, "solutions/communication.py"),
]
EXERCISE_BY_ID = {e.id: e for e in EXERCISES}


@dataclass(frozen=True)
class Regrade:
    """A grader's policy for grading one exercise's checks a second time, with code of the
    grader's run after the submission's own, keeping test by test what ``merge`` decides.
    The front end (:func:`autograde.grade.grade_submission`) runs every grader's regrades
    without knowing what they are for; Exercise 2's is :data:`grading.ex2.REGRADE`.

    ``needed(results)``: from the first grading's ``[(check, result)]``, whether to regrade;
    ``source()``: the code appended to the submission; ``merge(results, again)``: the results
    to keep, from the first grading's and ``again`` (``{check name: result}`` of the second),
    and whether the second changed any; ``note``: the report's note, said once, when it did."""

    exercise: str
    needed: Callable[[list], bool]
    source: Callable[[], str]
    merge: Callable[[list, dict], tuple]
    note: str


def to_student_args(args) -> list:
    """JSON-able arguments as the student's function receives them: lists become float arrays."""
    return [np.asarray(a, dtype=np.float64) if isinstance(a, list) else a for a in args]


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip()
    if len(text) > 300:
        text = text[:300] + "..."
    return f"raised {type(exc).__name__}" + (f": {text}" if text else "")


def _raised_inside(exc: BaseException, function) -> str | None:
    """The student's other function in which ``exc`` was raised (the innermost frame of the
    same file as ``function``), or None."""
    code = getattr(function, "__code__", None)
    tb, inside = exc.__traceback__, None
    while tb is not None:
        frame_code = tb.tb_frame.f_code
        if code is not None and frame_code.co_filename == code.co_filename \
                and frame_code.co_name not in ("<module>", "<lambda>"):
            inside = frame_code.co_name
        tb = tb.tb_next
    return inside if inside and inside != getattr(function, "__name__", None) else None


def handout_parameters(function: str) -> tuple | None:
    """The parameter names the hand-out gives an exercise's ``function``: those of its
    reference in ``solutions/`` (:attr:`Exercise.reference`; the student release keeps the
    signature of what it stubs). None for a function that is no exercise's, or where
    ``solutions/`` cannot be imported (then the function is called by position)."""
    import importlib
    import inspect

    exercise = next((e for e in EXERCISES if e.function == function), None)
    if exercise is None:
        return None
    try:
        module = importlib.import_module(exercise.reference.removesuffix(".py").replace("/", "."))
        return tuple(inspect.signature(getattr(module, function)).parameters)
    except (ImportError, AttributeError, ValueError, TypeError):  # no solutions/ here: by position
        return None


def local_call(function: Callable[..., Any], names=None) -> Callable[..., Any]:
    """A ``call`` that runs ``function`` in this process (no sandbox, no timeout), by the
    hand-out's parameter ``names`` where its signature takes them, as the sandbox calls it
    (:func:`sandbox.confined.calling.call_by_names`).

    Used by the notebook's self-check and by the grading tests against the reference.
    """

    def call(*args):
        try:
            value = call_by_names(function, to_student_args(args), names)
        except Exception as exc:  # the student's code may raise anything
            text = describe_exception(exc)
            inside = _raised_inside(exc, function)
            if inside:
                text += f", inside your `{inside}`, which `{function.__name__}` calls"
            raise SubmissionError(text, kind="raised",
                                  exception_type=type(exc).__name__) from None
        try:
            return to_plain(value)
        except NotPlainData as exc:
            hint = " (did you forget `return`?)" if value is None else ""
            raise SubmissionError(str(exc) + hint, kind="not_plain") from None

    return call


def missing_call(function_name: str) -> Callable[..., Any]:
    """A ``call`` for a function the submission does not define."""

    def call(*args):
        raise SubmissionError(f"no function `{function_name}` found: define it with exactly "
                              "this name", kind="missing")

    return call
