"""Grading checks for the course's exercises (Exercise 4 in two parts, ``ex4`` and ``ex4b``).

    from grading import load_checks, grade_callable, local_call
    checks = load_checks(include_hidden=True, seed=1234)
    results = grade_callable(lambda name: local_call(my_functions[name]), checks)

Public checks use fixed inputs and the expected outcomes stored in ``public_expected.json``,
so they run in the student release (no reference code). Hidden checks draw random inputs
from ``random.Random(seed)`` and compute what to expect when they run, from
:mod:`grading.independent` (the exercises written out plainly), never from
``solutions/``: ``test_independent.py`` checks that the two agree.
Every check calls the student's function only through ``call(*args)`` (see
:mod:`grading.core`), so the same checks grade a notebook in-process or a submission
in a sandbox.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Iterable

from . import ex1, ex2, ex3, ex4, ex4b
from .core import (
    EXERCISE_BY_ID, EXERCISES, Check, Exercise, Regrade, Result, SubmissionError, local_call,
    missing_call, to_student_args,
)

__all__ = [
    "Exercise", "EXERCISES", "EXERCISE_BY_ID", "Result", "Check", "SubmissionError", "Regrade",
    "REGRADES",
    "load_checks", "grade_callable", "local_call", "missing_call", "to_student_args",
    "STUDENT_RELEASE_FILES", "CheckList", "student_seed", "for_student",
]

_MODULES = {"ex1": ex1, "ex2": ex2, "ex3": ex3, "ex4": ex4, "ex4b": ex4b}

#: Every exercise's regrade policy (:class:`Regrade`), which the front end runs generically.
REGRADES = tuple(m.REGRADE for m in _MODULES.values() if getattr(m, "REGRADE", None))

#: The files of this package that the student release needs for the self-check (public
#: checks only). The rest (mistakes.py, public_expected.py, the tests) needs solutions/.
STUDENT_RELEASE_FILES = (
    "__init__.py", "core.py", "framework.py", "explain.py", "ex1.py", "ex2.py", "ex3.py",
    "ex4.py", "ex4b.py", "report.py", "public_expected.json",
)


def with_others(call):
    """``call`` as a plain function object, so that a check can reach the submission's other
    functions through ``call.other(name)`` (Exercise 2 uses the student's own loss)."""
    def bound(*args):
        return call(*args)

    return bound


class CheckList(list):
    """What :func:`load_checks` returns: the checks, and the ``seed`` their hidden inputs
    came from (so that :func:`for_student` can derive a student's own)."""

    seed: int | None = None


def load_checks(include_hidden: bool = True, seed: int | None = None) -> CheckList:
    """Every exercise's checks, public first, in exercise order.

    Hidden inputs come from ``random.Random(seed)``: the same seed gives the same inputs;
    ``seed=None`` draws a fresh seed (kept as the list's ``seed``). Each exercise gets its
    own stream, so adding a check to one exercise leaves the others' inputs unchanged.
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2**63)
    master = random.Random(seed)
    streams = {e.id: random.Random(master.getrandbits(64)) for e in EXERCISES}
    checks = CheckList()
    checks.seed = seed
    for exercise in EXERCISES:
        module = _MODULES[exercise.id]
        checks += module.public_checks()
        if include_hidden:
            checks += module.hidden_checks(streams[exercise.id])
    return checks


def student_seed(seed: int, student: str) -> int:
    """The seed of one student's hidden inputs: 63 bits of SHA-256 over the class seed and the
    student id. The same for the same two (a resumed run gives the same results); another
    student's hidden inputs are other numbers, so answers passed between students (or read
    off a classmate's sandbox) are for the wrong inputs."""
    import hashlib

    digest = hashlib.sha256(f"{int(seed)}\0{student}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def for_student(checks, student: str | None):
    """``checks`` with every hidden check replaced by the same check on ``student``'s own
    inputs (:func:`student_seed`); public checks (and their stored answers) unchanged.
    ``checks`` as they are where there is no student, no hidden check, or no seed."""
    seed = getattr(checks, "seed", None)
    if not student or seed is None or not any(c.hidden for c in checks):
        return checks
    own = student_seed(seed, student)
    mine = {c.name: c for c in load_checks(include_hidden=True, seed=own) if c.hidden}
    out = CheckList(mine.get(c.name, c) if c.hidden else c for c in checks)
    out.seed = own
    return out


def grade_callable(call_for_function: Callable[[str], Callable[..., Any]],
                   checks: Iterable[Check]) -> list[tuple[Check, Result]]:
    """Run ``checks`` in this process; ``call_for_function(name)`` gives each check its ``call``.

    Never raises: a failure to obtain a call (e.g. a missing function) fails that check.
    """
    results = []
    calls: dict[str, Any] = {}

    def get(function: str):
        if function not in calls:
            try:
                calls[function] = with_others(call_for_function(function))
            except SubmissionError as err:
                calls[function] = err
            except Exception as exc:
                calls[function] = SubmissionError(
                    f"could not load `{function}`: {type(exc).__name__}: {exc}", kind="crashed")
        return calls[function]

    def other(function: str):
        found = get(function)
        return None if isinstance(found, SubmissionError) else found

    for check in checks:
        call = get(check.function)
        if not isinstance(call, SubmissionError):
            call.other = other
        if isinstance(call, SubmissionError):
            message = call.message if call.message.endswith(".") else call.message + "."
            results.append((check, Result(False, message, call.not_implemented)))
            continue
        try:
            result = check.run(call)
            if not isinstance(result, Result):
                raise TypeError(f"check returned {type(result).__name__}")
        except Exception as exc:  # checks do not raise; this is a last line of defence
            result = Result(False, f"The grader could not run this test ({type(exc).__name__}: "
                                   f"{exc}). Please tell your instructor.")
        results.append((check, result))
    return results
