"""Mutation test of the grading checks: every plausible wrong variant of an exercise must lose
points (see tests/grading/mutants.py). The mutation score per exercise is printed at the end
of the test run; the suite fails if any wrong variant scores full marks at any seed tried."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from grading import EXERCISES, grade_callable, independent, load_checks, local_call
from tests.grading import mutants as M
from grading.report import score

SEEDS = (0, 1, 2)
MIN_SCORE = 0.95


_CHECKS: dict = {}  # seed -> checks; a check computes its probes once and keeps them


def grade_mutant(mutant: M.Mutant, seed: int) -> tuple[float, float]:
    wrong = mutant.build()
    if seed not in _CHECKS:
        _CHECKS[seed] = load_checks(seed=seed)
    checks = [c for c in _CHECKS[seed] if c.exercise == mutant.exercise]
    functions = dict(independent.FUNCTIONS, **{mutant.function: wrong})
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        results = grade_callable(lambda name: local_call(functions[name]), checks)
    return score(results)


@pytest.mark.parametrize("exercise", [e.id for e in EXERCISES])
def test_every_wrong_variant_loses_points(exercise):
    generated = M.mutants(exercise)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        wrong = [m for m in generated if not M.is_equivalent(m)]
    assert len(wrong) >= 30, f"only {len(wrong)} mutants of {exercise}: the generator broke"
    full_marks = []
    for mutant in wrong:
        for seed in SEEDS:
            earned, possible = grade_mutant(mutant, seed)
            if earned >= possible:
                full_marks.append(f"{mutant.what} (seed {seed})")
                break
    caught = len(wrong) - len(full_marks)
    M.SCORES[exercise] = (caught, len(wrong), len(generated) - len(wrong), full_marks)
    assert caught / len(wrong) >= MIN_SCORE
    assert not full_marks, "wrong variants with full marks:\n" + "\n".join(full_marks)


def test_the_generator_makes_the_mistakes_students_make():
    whats = {m.what for e in M.TEMPLATES for m in M.mutants(e)}
    for kind in ("off-by-one", "swapped operands", "dropped the", "constant", "unit slip",
                 "integer division", "early return", "swapped constants"):
        assert any(kind in w for w in whats), kind
    off_by_one = [m for m in M.mutants("ex2") if "off-by-one" in m.what]
    assert off_by_one and not M.is_equivalent(off_by_one[0])
    assert off_by_one[0].build()(1e22, [4.0, 15.0, 60.0])[2] == 15.0  # the example
