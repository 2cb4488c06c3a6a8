"""The grading expectations come from grading/independent.py, not from solutions/.

The two implementations must agree on thousands of random inputs; and a bug planted in
solutions/ must be noticed: by this agreement test and by grading the reference itself.
"""
from __future__ import annotations

import math
import random

import pytest

import solutions
from grading import grade_callable, independent, load_checks, local_call
from grading.report import score

REL = 1e-12  # closed-form arithmetic in a different order: agreement to rounding error
STRATEGIES = ("dp", "tp", "pp", "fsdp")


def _close(a, b, rel=REL):
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=0.0)


def disagreements(reference, n: int = 2000, seed: int = 0) -> list:
    """Random valid inputs on which ``reference`` (an object with the four functions) and
    the independent implementation differ; the first few of each exercise."""
    rng = random.Random(seed)
    found = []
    for _ in range(n):
        N, D = 10 ** rng.uniform(5, 14), 10 ** rng.uniform(6, 15)
        if not _close(reference.chinchilla_loss(N, D), independent.chinchilla_loss(N, D)):
            found.append(("chinchilla_loss", N, D))
        g = rng.choice([1, 2, 3, 6, 8, 12, 96, 1000, 1024])
        P = float(g * rng.randint(1, 10**11))  # the reference wants num_gpus to divide it
        s = rng.choice(STRATEGIES)
        if not _close(reference.memory_per_gpu(P, s, g), independent.memory_per_gpu(P, s, g)):
            found.append(("memory_per_gpu", P, s, g))
        args = [10 ** rng.uniform(6, 13), rng.randint(1, 4096), rng.randint(1, 64),
                rng.randint(1, 200), rng.choice([128, 1000, 2048, 4096, 32768]),
                rng.randint(1, 64), rng.randint(1, 300) * 64, rng.uniform(0.001, 5)]
        if not _close(reference.communication_time_per_step(*args),
                      independent.communication_time_per_step(*args)):
            found.append(("communication_time_per_step", *args))
        pp = rng.choice([1, 2, 3, 4, 8, 16])
        args = [10 ** rng.uniform(6, 13), rng.randint(1, 4096), rng.randint(1, 64), pp,
                pp * rng.randint(1, 40), rng.choice([128, 1000, 2048, 4096, 32768]),
                rng.randint(1, 16), rng.randint(1, 128), rng.randint(1, 300) * 64,
                rng.uniform(10, 2000), rng.uniform(1, 400)]
        ours, theirs = (independent.communication_time_per_step_by_axis(*args),
                        reference.communication_time_per_step_by_axis(*args))
        if len(ours) != len(theirs) or not all(_close(a, b) or a == b == 0 for a, b in zip(ours, theirs)):
            found.append(("communication_time_per_step_by_axis", *args))
    for _ in range(n // 10):  # the search is slower: fewer, but varied grids
        C = 10 ** rng.uniform(15, 28)
        ratios = None if rng.random() < 0.3 else \
            [10 ** rng.uniform(-2, 4) for _ in range(rng.randint(1, 40))]
        ours, theirs = independent.compute_optimal(C, ratios), reference.compute_optimal(C, ratios)
        if not all(_close(a, b, 1e-9) for a, b in zip(ours, theirs)):
            found.append(("compute_optimal", C, ratios))
    return found


def test_the_reference_and_the_independent_implementation_agree():
    found = disagreements(solutions, n=3000, seed=2024)
    assert not found, f"{len(found)} disagreements, e.g. {found[:3]}"


def test_independent_values_worked_out_by_hand():
    # 12 bytes per parameter: 7e9 parameters -> 8.4e10 bytes; FSDP over 8 GPUs -> 1.05e10
    assert independent.memory_per_gpu(7e9, "dp", 8) == 8.4e10
    assert independent.memory_per_gpu(7e9, "fsdp", 8) == 1.05e10
    with pytest.raises(ValueError, match="strategy"):
        independent.memory_per_gpu(7e9, "zero", 8)
    # (4 * 1e9 + 2 layers * 2 all-reduces * 2 bytes * 1 * 128 * 128) bytes / 1e12 bytes/s
    assert _close(independent.communication_time_per_step(1e9, 8, 4, 2, 128, 1, 128, 1.0),
                  (4e9 + 131072) / 1e12)
    # Exercise 4(b), by hand: 8e9 parameters on TP2 x PP2 x DP4, 8 layers, one 1,000-token
    # sequence of width 1,000 per micro-batch, 3 micro-batches, 200 GB/s inside a server and
    # 20 GB/s between servers. DP: 2e9 parameters' bf16 gradients, 4e9 bytes, ring 1.5: 6e9 B.
    # TP: 4 layers x 3 micro-batches x 4 all-reduces x ring 1.0 x 2e6 bytes = 9.6e7 B.
    # PP: two stages, one send per micro-batch: 3 x 2e6 = 6e6 B.
    dp, tp, pp = independent.communication_time_per_step_by_axis(8e9, 4, 2, 2, 8, 1000, 1, 3, 1000, 200, 20)
    assert _close(dp, 6e9 / 20e9) and _close(tp, 9.6e7 / 200e9) and _close(pp, 6e6 / 20e9)
    assert independent.communication_time_per_step_by_axis(8e9, 1, 1, 1, 8, 1000, 1, 3, 1000, 200, 20) \
        == (0.0, 0.0, 0.0)  # one GPU sends nothing
    assert abs(independent.chinchilla_loss(175e9, 300e9) - 2.002) < 5e-4
    # A 3-point grid worked out by hand at C = 6e20: r = 20 gives N = 2.236e9, D = 4.47e10
    N, D, r, loss = independent.compute_optimal(6e20, [1.0, 20.0, 1000.0])
    assert r == 20.0 and _close(N, math.sqrt(1e20 / 20)) and _close(D, 20 * N)


class _Planted:
    """solutions/ with one function replaced: the 16-byte ZeRO convention in Exercise 3."""

    chinchilla_loss = staticmethod(solutions.chinchilla_loss)
    compute_optimal = staticmethod(solutions.compute_optimal)
    communication_time_per_step = staticmethod(solutions.communication_time_per_step)
    communication_time_per_step_by_axis = staticmethod(solutions.communication_time_per_step_by_axis)

    @staticmethod
    def memory_per_gpu(model_params, strategy, num_gpus):
        return solutions.memory_per_gpu(model_params, strategy, num_gpus) * 16 / 12


def test_a_bug_planted_in_the_reference_is_noticed():
    assert disagreements(_Planted, n=200)
    results = grade_callable(lambda name: local_call(getattr(_Planted, name)), load_checks(seed=5))
    earned, possible = score(results)
    assert earned < possible
    assert any(c.hidden and not r.passed for c, r in results), \
        "the hidden checks must not take their expectations from solutions/"


def test_the_regrades_exercise_loss_is_the_exercise_loss():
    """The loss the grader puts in place of a wrong chinchilla_loss (ex2.exercise_loss_source)
    is this module's, to the last digit of its constants."""
    from grading import ex2
    from grading import independent

    assert ex2.EXERCISE_LOSS == (independent.E, independent.A, independent.B,
                                 independent.ALPHA, independent.BETA)
    namespace = {}
    exec(ex2.exercise_loss_source(), namespace)
    for N, D in [(1e8, 2e9), (7e10, 1.4e12), (1e6, 1e14)]:
        assert namespace["chinchilla_loss"](N, D) == pytest.approx(independent.chinchilla_loss(N, D), rel=1e-15)
