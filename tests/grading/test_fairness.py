"""Grading that is fair: one exercise's slip costs only that exercise, wrong answers never
score full marks at any seed, properties pay only right values, feedback names the cause."""
from __future__ import annotations

import numpy as np
import pytest

from grading import grade_callable, independent, load_checks, local_call
from grading.report import score

EXERCISE_CHECKS = {}


def grade(functions: dict, exercise: str | None = None, seed: int = 0, hidden: bool = True):
    checks = [c for c in load_checks(include_hidden=hidden, seed=seed)
              if exercise is None or c.exercise == exercise]
    results = grade_callable(lambda name: local_call(functions[name]), checks)
    return results, score(results)


def reference_functions(**replaced):
    functions = dict(independent.FUNCTIONS)
    functions.update(replaced)
    return functions


# ---------------------------------------------------------------- a student's off-by-one loop

def off_by_one(C, ratios=None):
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for i in range(len(ratios) - 1):  # never looks at the last ratio
        r = ratios[i]
        N = np.sqrt(C / (6 * r))
        D = r * N
        loss = independent.chinchilla_loss(N, D)
        if best is None or loss < best[3]:
            best = (N, D, r, loss)
    return best


def test_the_off_by_one_loop_loses_points_at_every_seed():
    functions = reference_functions(compute_optimal=off_by_one)
    for seed in range(60):
        results, (earned, possible) = grade(functions, "ex2", seed)
        assert earned < possible, seed
    # ...and already in the public tests, with the reason said.
    results, (earned, possible) = grade(functions, "ex2", hidden=False)
    assert earned < possible
    text = "\n".join(r.feedback for _, r in results if not r.passed)
    assert "last" in text


# ---------------------------------------------------------------- each exercise on its own

def swapped_exponents(N, D):
    return 1.69 + 406.0 / N**0.28 + 410.0 / D**0.34


def student_compute_optimal(loss):
    def compute_optimal(C, ratios=None):
        if ratios is None:
            ratios = np.logspace(-1, 3.3, 200)
        ratios = np.asarray(ratios, dtype=float)
        N = np.sqrt(C / (6 * ratios))
        D = ratios * N
        losses = loss(N, D)
        i = int(np.argmin(losses))
        return N[i], D[i], ratios[i], losses[i]
    return compute_optimal


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_swapped_exponent_in_exercise_1_costs_nothing_in_exercise_2(seed):
    functions = reference_functions(chinchilla_loss=swapped_exponents,
                                    compute_optimal=student_compute_optimal(swapped_exponents))
    results, (earned, possible) = grade(functions, "ex2", seed)
    assert earned == possible == 20
    notes = "\n".join(r.feedback for _, r in results)
    assert "your own chinchilla_loss" in notes and "Fixing Exercise 1" in notes
    _, (ex1, _) = grade(functions, "ex1", seed)
    assert ex1 < 10


def test_an_unvectorised_exercise_1_is_named_when_exercise_2_fails_because_of_it():
    import math

    def math_pow_loss(N, D):
        return 1.69 + 406.0 / math.pow(N, 0.34) + 410.0 / math.pow(D, 0.28)

    functions = reference_functions(chinchilla_loss=math_pow_loss,
                                    compute_optimal=student_compute_optimal(math_pow_loss))
    results, _ = grade(functions, "ex2", hidden=False)
    failed = [r.feedback for _, r in results if not r.passed]
    assert failed and all("chinchilla_loss" in f for f in failed), failed


# ---------------------------------------------------------------- properties pay right values only

def constant(*args):
    return 1.0


def echo(first, *args):
    return first


@pytest.mark.parametrize("impostor", [constant, echo], ids=["constant", "echo"])
def test_a_constant_or_an_echo_scores_zero(impostor):
    functions = {name: impostor for name in independent.FUNCTIONS}
    results, (earned, _) = grade(functions)
    assert earned == 0, [c.name for c, r in results if r.passed]
    four_ones = {name: (lambda *a: (1.0, 1.0, 1.0, 1.0)) for name in independent.FUNCTIONS}
    assert grade(four_ones, "ex2")[1][0] == 0


# ---------------------------------------------------------------- feedback names the real cause

def test_a_one_element_array_is_a_shape_message_not_a_constants_hint():
    def one_element(N, D):
        return np.atleast_1d(independent.chinchilla_loss(N, D))
    results, _ = grade(reference_functions(chinchilla_loss=one_element), "ex1", hidden=False)
    text = {c.name: r.feedback for c, r in results}["ex1_gpt3"]
    assert "1-element array" in text and "the value inside is right" in text
    assert "constant" not in text.lower() and "Hint" not in text


def test_one_element_arrays_in_the_tuple_are_a_shape_message():
    reference = student_compute_optimal(independent.chinchilla_loss)

    def wrapped(C, ratios=None):
        return tuple(np.atleast_1d(x) for x in reference(C, ratios))
    results, _ = grade(reference_functions(compute_optimal=wrapped), "ex2", hidden=False)
    text = {c.name: r.feedback for c, r in results}["ex2_grid_minimum"]
    assert "1-element arrays" in text and "values inside are right" in text
    assert "Hint" not in text


def test_a_grid_of_201_points_is_named():
    def grid_201(C, ratios=None):
        return student_compute_optimal(independent.chinchilla_loss)(
            C, np.logspace(-1, 3.3, 201) if ratios is None else ratios)
    results, _ = grade(reference_functions(compute_optimal=grid_201), "ex2", hidden=False)
    failed = "\n".join(r.feedback for _, r in results if not r.passed)
    assert "your grid has 201 points, and the exercise's grid has 200" in failed


def test_through_the_grader_an_exercise_1_that_raises_costs_nothing_in_exercise_2(tmp_path):
    """compute_optimal calls the student's chinchilla_loss with arrays, and math.pow raises:
    the grader grades Exercise 2 again with the exercise's loss and keeps the better."""
    from pathlib import Path

    from autograde.grade import grade_submission

    reference = (Path(__file__).resolve().parents[1] / "redteam" / "reference_submission.py").read_text()
    source = reference.replace(
        "return E + A / N**ALPHA + B / D**BETA",
        "import math\n    return E + A / math.pow(N, ALPHA) + B / math.pow(D, BETA)").replace(
        "loss = 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28", "loss = chinchilla_loss(N, D)")
    path = tmp_path / "math_pow.py"
    path.write_text(source)
    report = grade_submission(path, load_checks(seed=4), timeout=5)
    by_exercise = {e["id"]: e["score"] for e in report.exercises()}
    assert by_exercise["ex2"] == 20 and by_exercise["ex1"] < 10
    assert any("Exercise 1 costs points in Exercise 1 only" in n for n in report.notes)


def test_numbers_of_any_plain_numeric_type_earn_full_marks():
    """0-d arrays, numpy scalars, a list instead of a tuple: the same numbers, the same points."""
    search = student_compute_optimal(independent.chinchilla_loss)
    functions = reference_functions(
        chinchilla_loss=lambda N, D: np.asarray(independent.chinchilla_loss_vectorised(N, D)),
        compute_optimal=lambda C, ratios=None: [np.float32(1) * 0 + np.float64(x)
                                                for x in search(C, ratios)],
        memory_per_gpu=lambda *a: np.array(independent.memory_per_gpu(*a)),  # 0-d array
        communication_time_per_step=lambda *a: np.float64(independent.communication_time_per_step(*a)),
        communication_time_per_step_by_axis=lambda *a: np.array(  # an array, not a tuple
            independent.communication_time_per_step_by_axis(*a)))
    for exercise in ("ex1", "ex2", "ex3", "ex4", "ex4b"):
        results, (earned, possible) = grade(functions, exercise, seed=9)
        assert earned == possible, [r.feedback for _, r in results if not r.passed]


def test_an_error_in_another_function_is_placed_in_that_function(tmp_path):
    from autograde.grade import function_at
    from sandbox.submission import read_submission

    path = tmp_path / "s.py"
    path.write_text("import math\n\n\ndef chinchilla_loss(N, D):\n    return math.pow(N, 0.34)\n\n\n"
                    "def compute_optimal(C, ratios=None):\n    return chinchilla_loss(C, C)\n")
    submission = read_submission(path)
    assert function_at(submission, "raised TypeError: only 0-dimensional arrays (line 5)") == "chinchilla_loss"
    assert function_at(submission, "raised NameError (line 9).") == "compute_optimal"
    assert function_at(submission, "raised ValueError") is None


# ------------------------------------- the "own loss" fallback cannot be told the answer (red team)

_DEFAULT_GRID = [float(r) for r in np.logspace(-1, 3.3, 200)]


def _recognises_the_grid(N, D):
    """Exact everywhere, except that it reports the grid's first point as the minimum."""
    if isinstance(N, (list, np.ndarray)):
        return [_recognises_the_grid(n, d) for n, d in zip(N, D)]
    if abs(D / N - _DEFAULT_GRID[0]) <= 1e-9 * _DEFAULT_GRID[0]:
        return 0.5
    return independent.chinchilla_loss(N, D)


def _search_with(loss):
    def compute_optimal(C, ratios=None):
        best = None
        for r in (_DEFAULT_GRID if ratios is None else ratios):
            N = float(np.sqrt(C / (6 * r)))
            value = float(loss(N, r * N))
            if best is None or value < best[3]:
                best = (N, r * N, float(r), value)
        return best
    return compute_optimal


def _first_ratio(C, ratios=None):
    r = float((_DEFAULT_GRID if ratios is None else ratios)[0])
    N = float(np.sqrt(C / (6 * r)))
    return (N, r * N, r, 1.0)


SEARCH_CHECKS = ("ex2_grid_minimum", "ex2_custom_ratios", "ex2_several_budgets",
                 "ex2_hidden_budgets", "ex2_hidden_ratios")


@pytest.mark.parametrize("attack", ["recognises the grid", "constant loss, first ratio"])
def test_a_loss_that_dictates_the_answer_earns_no_search_points(attack):
    if attack == "recognises the grid":
        functions = reference_functions(chinchilla_loss=_recognises_the_grid,
                                        compute_optimal=_search_with(_recognises_the_grid))
        searched = ("ex2_grid_minimum", "ex2_several_budgets", "ex2_hidden_budgets")  # its search
    else:  # is right on custom ratios, which its loss does not recognise
        functions = reference_functions(chinchilla_loss=lambda N, D: 1.0, compute_optimal=_first_ratio)
        searched = SEARCH_CHECKS
    results, _ = grade(functions, "ex2")
    paid = [c.name for c, r in results if r.passed and c.name in searched]
    assert paid == []


def test_a_mistyped_loss_still_earns_the_search_through_the_fallback():
    """The fallback still pays a right search under a loss that is wrong everywhere."""
    def mistyped(N, D):
        return 1.69 + 406.0 / N ** 0.34 + 410.0 / D ** 0.27
    functions = reference_functions(chinchilla_loss=mistyped, compute_optimal=_search_with(mistyped))
    results, _ = grade(functions, "ex2")
    assert all(r.passed for c, r in results if c.name in SEARCH_CHECKS), \
        [r.feedback for c, r in results if not r.passed]


def test_functions_that_know_nothing_score_only_the_fair_properties():
    """No constant, formula or unit of the exercises: only refusing an unknown strategy and
    honouring 6ND = C may pay (issue: ex4_bandwidth_units paid for 1 / bandwidth)."""

    fair = {"ex2_on_budget"}  # compute_optimal is a stub here: Exercise 2 pays nothing
    for memory in (lambda model_params, strategy, num_gpus: 1.0,
                   lambda model_params, strategy, num_gpus: 1.0 / num_gpus):
        def memory_per_gpu(model_params, strategy, num_gpus, _m=memory):
            if strategy not in ("dp", "tp", "pp", "fsdp"):
                raise ValueError(f"unknown strategy {strategy!r}")
            return _m(model_params, strategy, num_gpus)

        def chinchilla_loss(N, D):
            return 1 / N + 1 / D

        def compute_optimal(C, ratios=None):  # not attempted
            raise NotImplementedError

        def communication_time_per_step(*args, bandwidth_tb_s=None, **kwargs):
            return 1.0 / (bandwidth_tb_s if bandwidth_tb_s is not None else args[-1])

        def communication_time_per_step_by_axis(*args):  # each axis: 1 / its link, 0 at degree 1
            dp, tp, pp, intra, inter = args[1], args[2], args[3], args[-2], args[-1]
            return ((dp > 1) / inter, (tp > 1) / intra, (pp > 1) / inter)

        functions = reference_functions(chinchilla_loss=chinchilla_loss, compute_optimal=compute_optimal,
                                        memory_per_gpu=memory_per_gpu,
                                        communication_time_per_step=communication_time_per_step,
                                        communication_time_per_step_by_axis=communication_time_per_step_by_axis)
        results, _ = grade(functions)
        paid = {c.name for c, r in results if r.passed}
        assert all(name in fair or "strategy" in name or "unknown" in name for name in paid), paid
        assert "ex4_bandwidth_units" not in paid and "ex4b_bandwidth_units" not in paid
