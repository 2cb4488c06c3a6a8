"""Each planted mistake loses exactly the points of the checks it declares, and is explained.

A planted submission is the reference with one function replaced by a known wrong
implementation from grading/mistakes.py.
"""
from __future__ import annotations

import pytest

import solutions
from grading import load_checks, grade_callable, local_call
from grading.explain import WHY
from grading.mistakes import MISTAKES, MISTAKE_BY_ID
from grading.report import format_report, score

SEEDS = [0, 1, 2]


def grade_with(mistake, seed):
    def call_for(name):
        return local_call(mistake.impl if name == mistake.function else getattr(solutions, name))
    return grade_callable(call_for, load_checks(seed=seed))


def test_every_mistake_is_declared_sensibly():
    names = {c.name for c in load_checks(seed=0)}
    assert len(MISTAKE_BY_ID) == len(MISTAKES)
    assert set(WHY) == set(MISTAKE_BY_ID)
    for m in MISTAKES:
        assert m.fails, m.id
        assert m.fails <= names, (m.id, m.fails - names)
        assert all(name.startswith(m.exercise + "_") for name in m.fails), m.id
    # Every check is failed by at least one mistake: no check is untested.
    assert set().union(*(m.fails for m in MISTAKES)) == names


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mistake_id", sorted(MISTAKE_BY_ID))
def test_mistake_loses_exactly_its_declared_points(mistake_id, seed):
    mistake = MISTAKE_BY_ID[mistake_id]
    results = grade_with(mistake, seed)
    failed = {c.name for c, r in results if not r.passed}
    assert failed == set(mistake.fails), format_report(results)
    earned, possible = score(results)
    lost = sum(c.points for c, _ in results if c.name in mistake.fails)
    assert earned == possible - lost


@pytest.mark.parametrize("mistake_id", sorted(MISTAKE_BY_ID))
def test_mistake_is_explained(mistake_id):
    mistake = MISTAKE_BY_ID[mistake_id]
    results = grade_with(mistake, 0)
    feedback = [r.feedback for c, r in results if not r.passed]
    # Every failing public check shows what was called and the explanation...
    public = [r.feedback for c, r in results if not r.passed and not c.hidden]
    assert public, mistake_id
    assert all(mistake.function in f or "Your" in f or "your" in f for f in public)
    assert any(mistake.why in f for f in public), "\n\n".join(feedback)
    # ...and so does the hidden check when it fails.
    for c, r in results:
        if c.hidden and not r.passed:
            assert mistake.why in r.feedback, r.feedback
    # No explanation of a different mistake is given.
    others = [m.why for m in MISTAKES if m.id != mistake_id]
    assert not any(w in f for w in others for f in feedback)


def test_two_returns_four_numbers_failures():
    """The only check no planted mistake fails: returning the wrong shape fails it."""
    results = grade_callable(
        lambda name: local_call((lambda C, ratios=None: solutions.compute_optimal(C)[:2])
                                if name == "compute_optimal" else getattr(solutions, name)),
        [c for c in load_checks(seed=0) if c.exercise == "ex2"])
    by_name = {c.name: r for c, r in results}
    assert not by_name["ex2_returns_four_numbers"].passed
    assert "return four" in by_name["ex2_returns_four_numbers"].feedback
