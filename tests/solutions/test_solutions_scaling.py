"""Unit and property tests for solutions.scaling.

Expected values come from the exercise text, the papers (cited per test) or
independent computations (scipy minimisation, the exercise's own loop), never
from the code under test.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from solutions import chinchilla_loss, compute_optimal
from solutions import scaling as sc

FAST = settings(max_examples=50, deadline=None)
budgets = st.floats(min_value=1e18, max_value=1e26)
sizes = st.floats(min_value=1e6, max_value=1e13)


# -- the exercise's own template, copied from the chapter text as the spec ----
def _exercise_loss(N, D):
    E, A, B = 1.69, 406.0, 410.0
    ALPHA, BETA = 0.34, 0.28
    return E + A / N**ALPHA + B / D**BETA


def _exercise_compute_optimal(C, ratios=None):
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for r in ratios:
        N = np.sqrt(C / (6 * r))
        D = r * N
        loss = _exercise_loss(N, D)
        if best is None or loss < best[3]:
            best = (N, D, r, loss)
    return best


# -- Exercise 1 -------------------------------------------------------------
def test_chinchilla_loss_exercise_figures():
    # The exercise states GPT-3 -> 2.002 and Chinchilla -> 1.936.
    assert round(chinchilla_loss(175e9, 300e9), 3) == 2.002
    assert round(chinchilla_loss(70e9, 1.4e12), 3) == 1.936


def test_rounded_paper_constants_give_1937_for_chinchilla():
    # FACTS: with the paper's printed A=406.4, B=410.7 Chinchilla gives 1.937,
    # which is why the exercise's constants must be used for its figures.
    assert round(sc.parametric_loss(70e9, 1.4e12, sc.HOFFMANN_ROUNDED), 3) == 1.937


def test_chinchilla_loss_matches_template_on_arrays():
    N = np.logspace(7, 12, 11)
    D = np.logspace(9, 13, 11)
    np.testing.assert_allclose(chinchilla_loss(N, D), _exercise_loss(N, D), rtol=1e-14)


@FAST
@given(N=sizes, D=sizes, f=st.floats(min_value=1.01, max_value=100))
def test_loss_strictly_decreasing_in_N_and_D(N, D, f):
    base = chinchilla_loss(N, D)
    assert chinchilla_loss(N * f, D) < base
    assert chinchilla_loss(N, D * f) < base
    assert base > sc.EXERCISE.E


@pytest.mark.parametrize("constants", list(sc.CONSTANT_SETS.values()), ids=list(sc.CONSTANT_SETS))
def test_parametric_loss_limits(constants):
    # Very large N and D approach the irreducible loss E from above.
    assert sc.parametric_loss(1e30, 1e30, constants) == pytest.approx(constants.E, abs=1e-4)
    assert sc.parametric_loss(1e30, 1e30, constants) > constants.E


def test_constant_sets_values():
    # Hoffmann et al. 2022 App. D.2 eq. 10 (rounded and TeX-precise) and
    # Besiroglu et al. 2024.
    assert (sc.HOFFMANN_ROUNDED.A, sc.HOFFMANN_ROUNDED.B) == (406.4, 410.7)
    assert sc.HOFFMANN_PRECISE.alpha == 0.33917084 and sc.HOFFMANN_PRECISE.beta == 0.2849083
    assert (sc.EPOCH_2024.E, sc.EPOCH_2024.B) == (1.8172, 2085.43)
    assert set(sc.CONSTANT_SETS) == {"exercise", "hoffmann_rounded", "hoffmann_precise", "epoch_2024"}
    for c in sc.CONSTANT_SETS.values():
        assert c.cite in {"hoffmann2022chinchilla", "besiroglu2024chinchilla"}


def test_training_flops_6ND():
    # Kaplan sec. 2.1: C = 6ND. Chinchilla: 6 * 70e9 * 1.4e12 = 5.88e23.
    assert sc.training_flops(70e9, 1.4e12) == pytest.approx(5.88e23)
    np.testing.assert_allclose(sc.training_flops(np.array([1.0, 2.0]), 3.0), [18.0, 36.0])


# -- Exercise 2 -------------------------------------------------------------
@pytest.mark.parametrize("C", [1e18, 3.3e20, 1e22, 5.76e23, 1e25, 1e26])
def test_compute_optimal_equals_exercise_loop(C):
    got = compute_optimal(C)
    want = _exercise_compute_optimal(C)
    assert got[2] == want[2]  # same grid point chosen
    np.testing.assert_allclose(got, [float(x) for x in want], rtol=1e-13)
    assert all(isinstance(x, float) for x in got)


def test_compute_optimal_custom_ratios_and_first_minimum_wins():
    ratios = [1.0, 20.0, 20.0, 400.0]  # duplicate ratio: tie, the first must win
    N, D, r, loss = compute_optimal(1e21, ratios=ratios)
    assert r == 20.0
    assert 6 * N * D == pytest.approx(1e21)
    # With a single ratio the answer is forced.
    assert compute_optimal(1e21, ratios=[5.0])[2] == 5.0


@pytest.mark.parametrize("C", [3e20, 1e21, 5.76e23])
def test_tie_between_distinct_ratios_goes_to_the_first(C):
    # Two neighbouring floats give the same loss to the last bit (checked with the template's
    # own formula), so the strict '<' of the exercise's loop keeps whichever comes first.
    a, b = 20.0, float(np.nextafter(20.0, 21.0))
    assert _exercise_compute_optimal(C, [a])[3] == _exercise_compute_optimal(C, [b])[3]
    assert compute_optimal(C, ratios=[a, b])[2] == a
    assert compute_optimal(C, ratios=[b, a])[2] == b


def test_compute_optimal_vectorised_shape_and_values():
    C = np.logspace(18, 26, 12).reshape(3, 4)
    N, D, r, loss = compute_optimal(C)
    for arr in (N, D, r, loss):
        assert arr.shape == (3, 4)
    for idx in np.ndindex(C.shape):
        want = _exercise_compute_optimal(C[idx])
        assert r[idx] == want[2]
        assert loss[idx] == pytest.approx(want[3], rel=1e-13)


@FAST
@given(C=budgets)
def test_iso_flop_constraint_holds(C):
    N, D, r, _ = compute_optimal(C)
    assert 6 * N * D == pytest.approx(C, rel=1e-12)
    assert D / N == pytest.approx(r, rel=1e-12)


# -- closed form ------------------------------------------------------------
@pytest.mark.parametrize(
    "constants, C, ratio, tol",
    [
        # Figures checked against Hoffmann et al. 2022 eq. 4 with the printed
        # constants; the tolerance is half a unit of the quoted last digit.
        (sc.HOFFMANN_ROUNDED, 1e22, 62.6, 0.05),
        (sc.HOFFMANN_ROUNDED, 5.76e23, 92.6, 0.05),
        (sc.HOFFMANN_ROUNDED, 1e25, 122, 0.5),
        # TeX-precise constants
        (sc.HOFFMANN_PRECISE, 1e22, 41, 0.5),
        (sc.HOFFMANN_PRECISE, 5.88e23, 59, 0.5),
        (sc.HOFFMANN_PRECISE, 1e25, 76, 0.5),
        # Besiroglu et al. 2024: ~18.3 tokens per parameter at 5.88e23
        (sc.EPOCH_2024, 5.88e23, 18.3, 0.1),
    ],
)
def test_closed_form_ratio_matches_cited_figures(constants, C, ratio, tol):
    _, _, got, _ = sc.compute_optimal_closed_form(C, constants)
    assert got == pytest.approx(ratio, abs=tol)


def test_allocation_exponents():
    # Hoffmann eq. 4: a = beta/(alpha+beta). Epoch AI report a = 0.513.
    assert sc.allocation_exponent(sc.HOFFMANN_ROUNDED) == pytest.approx(0.28 / 0.62)
    assert sc.allocation_exponent(sc.EPOCH_2024) == pytest.approx(0.513, abs=5e-4)
    # Hoffmann Table 2, Approach 3 reports a = 0.46 for its (precise) fit.
    assert sc.allocation_exponent(sc.HOFFMANN_PRECISE) == pytest.approx(
        sc.HOFFMANN_APPROACH_EXPONENTS["approach_3"].a, abs=0.005
    )
    for row in sc.HOFFMANN_APPROACH_EXPONENTS.values():
        assert row.a + row.b == pytest.approx(1.0)
    assert sc.HOFFMANN_APPROACH_EXPONENTS["kaplan"].a == sc.KAPLAN_N_EXPONENT


def _scipy_optimum(C, c):
    f = lambda logN: sc.parametric_loss(math.exp(logN), C / (6 * math.exp(logN)), c)  # noqa: E731
    lo, hi = math.log(C / 6) / 2 - 15, math.log(C / 6) / 2 + 15
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return math.exp(res.x), res.fun


@FAST
@given(C=budgets, name=st.sampled_from(sorted(sc.CONSTANT_SETS)))
def test_closed_form_matches_scipy_minimisation(C, name):
    c = sc.CONSTANT_SETS[name]
    N, D, _, loss = sc.compute_optimal_closed_form(C, c)
    N_num, loss_num = _scipy_optimum(C, c)
    assert 6 * N * D == pytest.approx(C, rel=1e-12)
    assert N == pytest.approx(N_num, rel=1e-4)
    assert loss <= loss_num + 1e-12


@FAST
@given(C=budgets, name=st.sampled_from(sorted(sc.CONSTANT_SETS)))
def test_sweep_never_beats_closed_form_and_is_within_one_grid_step(C, name):
    c = sc.CONSTANT_SETS[name]
    N_s, _, r_s, loss_s = sc.compute_optimal_sweep(C, c)
    N_c, _, r_c, loss_c = sc.compute_optimal_closed_form(C, c)
    assert loss_s >= loss_c - 1e-12 * loss_c
    step = 10 ** (4.3 / 199)  # ratio between neighbouring grid points
    if sc.DEFAULT_RATIOS[0] * step < r_c < sc.DEFAULT_RATIOS[-1] / step:
        # The loss is unimodal in log(ratio), so the best grid point neighbours the optimum.
        assert 1 / step <= r_s / r_c <= step
        assert abs(N_s / N_c - 1) <= math.sqrt(step) - 1


def test_closed_form_vectorised():
    C = np.array([1e20, 1e22, 1e24])
    N, D, r, loss = sc.compute_optimal_closed_form(C)
    assert N.shape == C.shape
    for i, Ci in enumerate(C):
        assert N[i] == pytest.approx(sc.compute_optimal_closed_form(Ci)[0])
    # N_opt ~ C^a: the log-log slope is beta/(alpha+beta) = 0.28/0.62 for the printed constants.
    slope = np.diff(np.log(N)) / np.diff(np.log(C))
    np.testing.assert_allclose(slope, 0.28 / 0.62, rtol=1e-12)
    np.testing.assert_allclose(np.diff(np.log(D)) / np.diff(np.log(C)), 0.34 / 0.62, rtol=1e-12)


# -- rules of thumb ---------------------------------------------------------
def test_twenty_tokens_reproduces_chinchilla():
    # Chinchilla: 70B params, 1.4T tokens = 20 tokens/param, 5.88e23 FLOPs.
    N, D = sc.twenty_tokens_allocation(5.88e23)
    assert N == pytest.approx(70e9, rel=1e-9)
    assert D == pytest.approx(1.4e12, rel=1e-9)
    N2, D2 = sc.twenty_tokens_allocation(np.array([5.88e23]), tokens_per_param=10)
    assert D2[0] / N2[0] == pytest.approx(10)


def test_kaplan_allocation_passes_through_anchor_and_scales_as_073():
    N0, D0 = sc.kaplan_allocation(1e20, anchor_C=1e20, anchor_N=1e9)
    assert N0 == pytest.approx(1e9)
    assert 6 * N0 * D0 == pytest.approx(1e20)
    N1, D1 = sc.kaplan_allocation(1e24, anchor_C=1e20, anchor_N=1e9)
    assert N1 / N0 == pytest.approx(1e4**0.73)
    assert D1 / D0 == pytest.approx(1e4**0.27)


def test_loss_reduction_per_doubling():
    assert sc.loss_reduction_per_doubling(1.0) == 0.5
    assert sc.loss_reduction_per_doubling(0.076) == pytest.approx(0.9487, abs=1e-4)
    np.testing.assert_allclose(sc.loss_reduction_per_doubling(np.array([1.0, 2.0])), [0.5, 0.25])


# -- bad input --------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "7e9", None, [], [1e9, -1]])
def test_loss_rejects_bad_N(bad):
    with pytest.raises(ValueError, match="N"):
        chinchilla_loss(bad, 1e12)
    with pytest.raises(ValueError, match="D"):
        chinchilla_loss(1e9, bad)


@pytest.mark.parametrize("bad", [0, -1e20, float("nan"), float("inf"), False])
def test_compute_optimal_rejects_bad_budget(bad):
    with pytest.raises(ValueError, match="C"):
        compute_optimal(bad)
    with pytest.raises(ValueError, match="C"):
        sc.compute_optimal_closed_form(bad)


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [[1.0, 2.0]], [float("nan")]])
def test_compute_optimal_rejects_bad_ratios(bad):
    with pytest.raises(ValueError, match="ratios"):
        compute_optimal(1e21, ratios=bad)


def test_bad_constants():
    with pytest.raises(ValueError, match="constants"):
        sc.parametric_loss(1e9, 1e9, "hoffmann_rounded")
    with pytest.raises(ValueError, match="alpha"):
        sc.ChinchillaConstants(1.69, 406.0, 410.0, -0.34, 0.28, "bad", "x")
    with pytest.raises(ValueError, match="tokens_per_param"):
        sc.twenty_tokens_allocation(1e21, tokens_per_param=0)
    with pytest.raises(ValueError, match="anchor_N"):
        sc.kaplan_allocation(1e21, 1e20, float("nan"))
