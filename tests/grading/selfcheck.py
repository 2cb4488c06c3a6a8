"""Check one exercise from inside the notebook, with the public tests only:

    from tests.grading.selfcheck import self_check
    self_check("ex1", chinchilla_loss)      # or self_check("ex1", globals())

Runs in the student release too: the public tests need no reference solutions.
"""
from __future__ import annotations

from typing import Any, Mapping

from . import grade_callable, load_checks
from .core import EXERCISE_BY_ID, local_call, missing_call
from .report import format_report, score


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


def self_check(exercise_id: str, namespace_or_function: Any) -> float:
    """Run exercise ``exercise_id``'s public tests against the current definition, print the
    report, and return the points earned."""
    if exercise_id not in EXERCISE_BY_ID:
        raise ValueError(f"exercise_id must be one of {sorted(EXERCISE_BY_ID)}, got {exercise_id!r}")
    exercise = EXERCISE_BY_ID[exercise_id]
    function = _resolve(exercise.function, namespace_or_function)
    call = local_call(function) if callable(function) else missing_call(exercise.function)
    checks = [c for c in load_checks(include_hidden=False) if c.exercise == exercise_id]
    results = grade_callable(lambda name: call, checks)
    name = getattr(function, "__name__", exercise.function)
    if callable(function) and name != exercise.function:
        print(f"Note: checking `{name}` as `{exercise.function}`.")
    print(format_report(results))
    print("Hidden tests with random inputs run when your work is graded.")
    earned, _ = score(results)
    return Points(earned)
