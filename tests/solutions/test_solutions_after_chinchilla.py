"""Tests for solutions.after_chinchilla: inference-aware allocation
(Sardana et al. 2024), data-constrained effective data (Muennighoff et al.
2023) and the learning-rate schedules."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import after_chinchilla as ac
from solutions import scaling

FAST = settings(max_examples=30, deadline=None)
C = scaling.HOFFMANN_ROUNDED


def test_tokens_for_loss_inverts_the_law():
    for N, loss in ((1e9, 2.5), (70e9, 1.95), (400e9, 1.8)):
        D = ac.tokens_for_loss(N, loss)
        assert scaling.parametric_loss(N, D, C) == pytest.approx(loss, rel=1e-12)
    # A model too small to reach the loss with any amount of data.
    assert ac.tokens_for_loss(1e6, 1.9) == math.inf


def test_lifetime_flops_by_hand():
    assert ac.lifetime_flops(2, 3, 5) == pytest.approx(6 * 2 * 3 + 2 * 2 * 5)
    with pytest.raises(ValueError, match="inference_tokens"):
        ac.lifetime_flops(2, 3, -1)


@pytest.mark.parametrize("budget", [1e21, 5.76e23, 1e25])
def test_no_inference_is_chinchilla_optimal(budget):
    N, D, _, loss = scaling.compute_optimal_closed_form(budget, C)
    n, d, flops = ac.inference_aware_optimal(loss, 0)
    assert n == pytest.approx(N, rel=1e-4) and d == pytest.approx(D, rel=1e-4)
    assert flops == pytest.approx(budget, rel=1e-8)


@pytest.mark.parametrize("T", [1e11, 1e13, 1e15])
def test_inference_aware_optimum_equals_brute_force(T):
    loss = 2.0
    n, d, flops = ac.inference_aware_optimal(loss, T)
    n_min = (C.A / (loss - C.E)) ** (1 / C.alpha)
    grid = n_min * np.logspace(1e-6, 4, 20001)
    costs = ac.lifetime_flops(grid, ac.tokens_for_loss(grid, loss), T)
    assert flops <= costs.min() * (1 + 1e-9)
    assert n == pytest.approx(grid[np.argmin(costs)], rel=2e-3)


@given(st.floats(1.85, 2.6), st.floats(10, 15))
@FAST
def test_more_inference_means_smaller_longer_trained_models(loss, log_t):
    a = ac.inference_aware_optimal(loss, 10**log_t)
    b = ac.inference_aware_optimal(loss, 10 ** (log_t + 0.5))
    assert b[0] < a[0] and b[1] > a[1] and b[2] > a[2]


def test_inference_aware_bad_input():
    with pytest.raises(ValueError, match="irreducible"):
        ac.inference_aware_optimal(C.E, 1e12)
    with pytest.raises(ValueError, match="inference_tokens"):
        ac.inference_aware_optimal(2.0, float("nan"))
    with pytest.raises(ValueError, match="constants"):
        ac.tokens_for_loss(1e9, 2.0, constants="chinchilla")


def test_effective_data_by_hand():
    assert ac.effective_data(1e9, 1e9) == pytest.approx(1e9)
    # R = R* repeats: U (1 + R* (1 - 1/e)).
    r = ac.MUENNIGHOFF_R_D_STAR
    assert ac.effective_data(1.0, 1.0 + r) == pytest.approx(1 + r * (1 - math.exp(-1)))
    # Saturation at U (1 + R*).
    assert ac.effective_data(1.0, 1e6) == pytest.approx(1 + r, rel=1e-9)


def test_four_epochs_cost_little():
    # Muennighoff et al.: up to about 4 epochs, repeated data is worth nearly as much as new data.
    assert ac.effective_data(100e9, 400e9) / 400e9 > 0.9
    assert ac.effective_data(100e9, 4000e9) / 4000e9 < 0.5


@given(st.floats(1e6, 1e13), st.floats(1.0, 100.0), st.floats(1.0, 100.0))
@FAST
def test_effective_data_is_monotone_and_bounded(U, e1, e2):
    lo, hi = sorted((e1, e2))
    d_lo, d_hi = ac.effective_data(U, U * lo), ac.effective_data(U, U * hi)
    assert U * (1 - 1e-12) <= d_lo <= d_hi * (1 + 1e-12)
    assert d_hi <= U * hi * (1 + 1e-12)
    assert d_hi <= U * (1 + ac.MUENNIGHOFF_R_D_STAR) * (1 + 1e-12)


def test_effective_data_bad_input():
    with pytest.raises(ValueError, match="total_tokens"):
        ac.effective_data(10, 5)
    with pytest.raises(ValueError, match="unique_tokens"):
        ac.effective_data(0, 5)


def test_schedules():
    n = 1000
    assert ac.learning_rate(0, n, "cosine") == pytest.approx(1.0)
    assert ac.learning_rate(n, n, "cosine") == pytest.approx(0.1)
    assert ac.learning_rate(500, n, "cosine") == pytest.approx(0.55)
    assert ac.learning_rate(500, n, "wsd") == pytest.approx(1.0)
    assert ac.learning_rate(800, n, "wsd") == pytest.approx(1.0)
    assert ac.learning_rate(900, n, "wsd") == pytest.approx(0.55)
    assert ac.learning_rate(n, n, "wsd") == pytest.approx(0.1)
    assert ac.learning_rate(4, n, "wsd", warmup=10) == pytest.approx(0.5)
    steps = np.arange(10, n + 1)
    for kind in ac.SCHEDULES:
        lr = ac.learning_rate(steps, n, kind, warmup=10)
        assert np.all(np.diff(lr) <= 1e-12)


@pytest.mark.parametrize("kwargs, name", [
    (dict(step=-1, total_steps=10), "step"),
    (dict(step=1, total_steps=10, schedule="linear"), "schedule"),
    (dict(step=1, total_steps=10, warmup=10), "warmup"),
    (dict(step=1, total_steps=10, decay_fraction=0), "decay_fraction"),
])
def test_schedule_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ac.learning_rate(**kwargs)


def test_last_layer_flop_share():
    # L=1, h=2, V=24: head 48 against 12 * 1 * 4 = 48 in the layers.
    assert ac.last_layer_flop_share(1, 2, 24) == pytest.approx(0.5)
    shares = ac.last_layer_flop_share(np.array([2, 8, 32, 128]), 4096, 50257)
    assert np.all(np.diff(shares) < 0)  # the deeper the model, the smaller the share
    with pytest.raises(ValueError, match="vocab"):
        ac.last_layer_flop_share(2, 8, 0)
