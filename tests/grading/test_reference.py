"""The reference solutions score full marks, and the checks themselves are well formed.

With ``--submission PATH`` the scoring tests grade that file instead (see conftest.py).
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from grading import (
    EXERCISES, SubmissionError, grade_callable, load_checks, local_call, missing_call,
)
from grading.report import format_report, score

SEEDS = [0, 1, 2, 3, 20240601]


@pytest.mark.parametrize("seed", SEEDS)
def test_full_marks(call_for_function, seed):
    results = grade_callable(call_for_function, load_checks(include_hidden=True, seed=seed))
    earned, possible = score(results)
    assert earned == possible == 100, format_report(results)


def test_full_marks_on_public_checks(call_for_function):
    results = grade_callable(call_for_function, load_checks(include_hidden=False))
    assert all(r.passed for _, r in results), format_report(results)


def test_check_names_unique_and_points_add_up():
    checks = load_checks(seed=0)
    names = [c.name for c in checks]
    assert len(names) == len(set(names))
    for exercise in EXERCISES:
        mine = [c for c in checks if c.exercise == exercise.id]
        assert all(c.name.startswith(exercise.id + "_") for c in mine)
        assert all(c.function == exercise.function for c in mine)
        assert math.isclose(sum(c.points for c in mine), exercise.max_points)
        hidden = sum(c.points for c in mine if c.hidden)
        assert 0.25 <= hidden / exercise.max_points <= 0.35, exercise.id
    # Exercise 4's 40 points: 15 for part (a), the first estimate, 25 for part (b), per axis.
    assert [e.max_points for e in EXERCISES] == [10, 20, 30, 15, 25]
    assert sum(e.max_points for e in EXERCISES) == 100


def _hidden_args(seed):
    """The hidden checks' arguments, read back through a recording call."""
    seen = []

    def recording(name):
        def call(*args):
            seen.append((name, repr(args)))
            raise SubmissionError("recording only", kind="missing")
        return call

    grade_callable(recording, [c for c in load_checks(seed=seed) if c.hidden])
    return seen


def test_hidden_inputs_follow_the_seed():
    assert _hidden_args(7) == _hidden_args(7)
    assert _hidden_args(7) != _hidden_args(8)
    assert not any(c.hidden for c in load_checks(include_hidden=False))


def test_public_checks_do_not_depend_on_the_seed():
    a = [(c.name, c.points) for c in load_checks(include_hidden=False, seed=1)]
    b = [(c.name, c.points) for c in load_checks(include_hidden=False, seed=2)]
    assert a == b


HOSTILE = {
    "nan": lambda *a: float("nan"),
    "inf": lambda *a: float("inf"),
    "negative": lambda *a: -1.0,
    "string": lambda *a: "2.002",
    "empty list": lambda *a: [],
    "nested": lambda *a: [[1.0, 2.0], [3.0]],
    "list of nan": lambda *a: [float("nan")] * 4,
    "zero": lambda *a: 0.0,
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_wrong_types_and_values_fail_without_crashing(kind):
    results = grade_callable(lambda name: HOSTILE[kind], load_checks(seed=3))
    for check, result in results:
        assert not result.passed, (check.name, result.feedback)
        assert result.feedback and "grader could not run" not in result.feedback, (check.name, result)


def test_errors_are_reported_per_check():
    def raising(name):
        def call(*args):
            raise SubmissionError("raised ZeroDivisionError: division by zero",
                                  kind="raised", exception_type="ZeroDivisionError")
        return call

    results = grade_callable(raising, load_checks(seed=1))
    assert not any(r.passed for _, r in results)
    assert all("ZeroDivisionError" in r.feedback for _, r in results)

    timeouts = grade_callable(
        lambda name: (lambda *a: (_ for _ in ()).throw(SubmissionError("timed out after 10 s", kind="timeout"))),
        load_checks(seed=1))
    assert all("took too long" in r.feedback for _, r in timeouts)


def test_a_call_wrapper_that_crashes_does_not_crash_the_grader():
    def broken(name):
        def call(*args):
            raise RuntimeError("sandbox pipe closed")
        return call

    results = grade_callable(broken, load_checks(seed=1))
    assert not any(r.passed for _, r in results)

    def unloadable(name):
        raise OSError("cannot start sandbox")

    results = grade_callable(unloadable, load_checks(seed=1))
    assert not any(r.passed for _, r in results)
    assert "cannot start sandbox" in results[0][1].feedback


def test_missing_and_not_implemented_functions():
    results = grade_callable(missing_call, load_checks(seed=1))
    assert all("define it with exactly this name" in r.feedback for _, r in results)

    def stub(*args):
        raise NotImplementedError("replace this line with your code")

    results = grade_callable(lambda name: local_call(stub), load_checks(seed=1))
    assert all(r.not_implemented and not r.passed for _, r in results)
    text = format_report(results)
    assert text.count("not implemented yet") == len(EXERCISES) == 5
    assert "Fix first: implement Exercise 1" in text
    assert "Total: 0 / 100 points" in text


def test_report_names_the_first_failure_of_the_earliest_exercise():
    import solutions

    def call_for(name):
        if name == "chinchilla_loss":
            return local_call(lambda N, D: 1.69 + 406.4 / N**0.34 + 410.7 / D**0.28)
        if name.startswith("communication_time_per_step"):
            def stub(*args):
                raise NotImplementedError
            return local_call(stub)
        return local_call(getattr(solutions, name))

    results = grade_callable(call_for, load_checks(seed=5))
    text = format_report(results)
    assert "Fix first: Exercise 1, ex1_gpt3:" in text
    assert "406.4" in text  # the recognised mistake is explained
    assert "Not implemented yet: Exercise 4(a), Exercise 4(b)." in text
    assert "✓ ex1_decreasing_in_n" in text and "✗ ex1_gpt3" in text
    assert f"Total: {100 - 7 - 40} / 100 points" in text


def test_local_call_passes_arrays_and_returns_plain_data():
    seen = []

    def f(x, s, n):
        seen.append((type(x), x.dtype, type(s), type(n)))
        return np.float64(2.0) * x

    call = local_call(f)
    assert call([1, 2], "dp", 3) == [2.0, 4.0]
    assert seen == [(np.ndarray, np.dtype("float64"), str, int)]
    with pytest.raises(SubmissionError) as info:
        local_call(lambda: None)()
    assert info.value.kind == "not_plain" and "return" in info.value.message
    with pytest.raises(SubmissionError) as info:
        local_call(lambda: {}["x"])()
    assert info.value.kind == "raised" and info.value.exception_type == "KeyError"


def test_a_float_subclass_cannot_pass():
    class AlwaysEqual(float):
        def __eq__(self, other):
            return True
        __hash__ = float.__hash__

    results = grade_callable(lambda name: local_call(lambda *a: AlwaysEqual(1.0)),
                             load_checks(seed=1))
    assert not any(r.passed for _, r in results)


def test_near_misses_are_caught():
    """A relative error of 1e-6 in the answer loses the value checks."""
    import solutions

    def call_for(name):
        f = getattr(solutions, name)
        if name == "chinchilla_loss":
            return local_call(lambda N, D: f(N, D) * (1 + 1e-6))
        return local_call(f)

    results = dict((c.name, r) for c, r in grade_callable(call_for, load_checks(seed=1)))
    assert not results["ex1_gpt3"].passed and not results["ex1_hidden_random"].passed
    assert "Check every constant" in results["ex1_gpt3"].feedback


def test_random_seeds_never_produce_failures_for_the_reference():
    import solutions

    rng = random.Random(99)
    for _ in range(10):
        seed = rng.getrandbits(32)
        results = grade_callable(lambda name: local_call(getattr(solutions, name)),
                                 [c for c in load_checks(seed=seed) if c.hidden])
        assert all(r.passed for _, r in results), (seed, format_report(results))



def test_fix_first_prefers_the_failure_that_explains_the_mistake():
    """Within the first failing exercise, "Fix first" quotes a test that recognised the
    mistake (a "Why:" line) over an earlier one that only says the values are off; a later
    exercise's explanation never displaces it."""
    from grading import Check, Result

    def check(exercise, name):
        return Check(exercise, name, 1.0, False, "f", run=lambda call: None)

    results = [
        (check("ex2", "ex2_a"), Result(False, "f(1) returned 3; expected 2.")),
        (check("ex2", "ex2_b"), Result(False, "f(2) returned 6; expected 4.\nWhy: the factor 6 is missing.")),
        (check("ex3", "ex3_a"), Result(False, "g(1) returned 9.\nWhy: bytes, not GiB.")),
    ]
    fix_first = format_report(results).split("Fix first: ", 1)[1]
    assert fix_first.startswith("Exercise 2, ex2_b: f(2) returned 6")
    assert "Why: the factor 6 is missing." in fix_first and "GiB" not in fix_first
    plain = format_report(results[:1] + results[2:]).split("Fix first: ", 1)[1]
    assert plain.startswith("Exercise 2, ex2_a:")  # no explanation in Exercise 2: its first failure


def test_a_property_that_holds_on_wrong_values_reads_as_a_sentence():
    """ex1_decreasing_in_d with a loss far off but falling in D: the line names the property,
    says it holds, and says why no point is paid."""
    import solutions

    def call_for(name):
        if name == "chinchilla_loss":
            return local_call(lambda N, D: 1.69 + 406.0 * N**0.34 + 410.0 / D**0.28)
        return local_call(getattr(solutions, name))

    results = grade_callable(call_for, [c for c in load_checks(seed=0) if c.name == "ex1_decreasing_in_d"])
    (_, result), = results
    assert not result.passed
    assert "The loss falls as D grows: that holds, but this test pays only when the values are right" \
        in result.feedback
