"""Fitting a Chinchilla scaling law to training runs: Approaches 2 and 3 of
Hoffmann et al. (2022), with bootstrap intervals and a convergence check.

**Approach 3** (Hoffmann et al. 2022, App. D.2) fits the parametric loss
``L(N, D) = E + A/N^alpha + B/D^beta`` by minimising, over
``theta = (a, b, e, alpha, beta)`` with ``A = exp(a)``, ``B = exp(b)``,
``E = exp(e)``::

    sum_i Huber_delta( LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i )

with ``delta = 1e-3`` and L-BFGS started from every point of the grid
``alpha, beta in {0, 0.5, ..., 2}``, ``e in {-1, -0.5, ..., 1}``,
``a, b in {0, 5, ..., 25}``; the best local minimum wins (:func:`fit_approach3`).

**Approach 2** (IsoFLOP profiles, Hoffmann et al. 2022, sec. 3.2) fits a
parabola of loss against ``log N`` at each compute budget, takes its minimum
as ``N_opt(C)``, and fits ``N_opt ~ C^a`` and ``D_opt ~ C^b`` by least squares
in log space (:func:`fit_approach2`).

**Why a convergence check.** Besiroglu et al. (2024) refitted Approach 3 on the
paper's own data and found the published estimates were biased, most likely
because the optimizer stopped before it had converged: with the Huber delta
at 1e-3 the objective is tiny (about 1e-5 per point), and a stopping rule
that compares changes in the objective with ``max(|f|, 1)`` (as L-BFGS-B's
``ftol`` does) then stops after a handful of steps. Here the objective is
rescaled to order one (:data:`OBJECTIVE_SCALE`), the tolerances are tight,
and every fit is checked (:func:`check_convergence`): a second, independent
optimisation started from the reported optimum must not move it, and the
gradient there must vanish. A fit that fails raises :class:`FitNotConverged`
(or reports ``converged=False`` when ``strict=False``).

References: hoffmann2022chinchilla, besiroglu2024chinchilla.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

try:  # pinned in the course's requirements; a bare GPU machine (torch, numpy, scipy) may lack it
    from threadpoolctl import threadpool_limits
except ImportError:  # tests/labs/test_labs_gpu_path.py imports the labs without it
    threadpool_limits = None

from .scaling import FLOPS_PER_PARAM_PER_TOKEN, ChinchillaConstants

__all__ = [
    "HUBER_DELTA",
    "OBJECTIVE_SCALE",
    "PAPER_INIT_GRID",
    "huber",
    "approach3_objective",
    "Approach3Fit",
    "FitNotConverged",
    "fit_approach3",
    "check_convergence",
    "Approach2Fit",
    "isoflop_minimum",
    "fit_approach2",
    "bootstrap_approach3",
    "bootstrap_approach2",
    "Interval",
    "synthetic_runs",
]

#: Hoffmann et al. 2022, App. D.2: the Huber loss's delta, on log loss.
HUBER_DELTA = 1e-3

#: The objective is divided by ``n * delta`` (n data points), which puts it at
#: about the mean absolute residual in log loss (order 1e-2) instead of 1e-5,
#: so that L-BFGS's relative stopping rules bite only near a true optimum.
#: Scaling an objective does not move its minimiser.
OBJECTIVE_SCALE = "per_point_over_delta"


def _paper_grid():
    alphas = np.arange(0.0, 2.0 + 1e-9, 0.5)
    es = np.arange(-1.0, 1.0 + 1e-9, 0.5)
    ab = np.arange(0.0, 25.0 + 1e-9, 5.0)
    # theta order: (a, b, e, alpha, beta)
    grid = np.array(list(itertools.product(ab, ab, es, alphas, alphas)))
    grid.setflags(write=False)
    return grid


#: The initialisation grid of Hoffmann et al. 2022, App. D.2, as rows of
#: ``(a, b, e, alpha, beta)``: 6 x 6 x 5 x 5 x 5 = 4,500 starting points.
PAPER_INIT_GRID = _paper_grid()


def huber(r, delta=HUBER_DELTA):
    """Huber loss: ``r^2 / 2`` for ``|r| <= delta``, else ``delta (|r| - delta/2)``."""
    r = np.asarray(r, dtype=np.float64)
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def _check_runs(N, D, L):
    arrays = []
    for name, x in (("N", N), ("D", D), ("L", L)):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of runs, got shape {x.shape}")
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError(f"{name} must hold finite positive numbers")
        arrays.append(x)
    if not len(arrays[0]) == len(arrays[1]) == len(arrays[2]):
        raise ValueError(f"N, D and L must have the same length, got {[len(x) for x in arrays]}")
    if len(arrays[0]) < 5:
        raise ValueError(f"N, D and L need at least 5 runs to fit 5 parameters, got {len(arrays[0])}")
    return arrays


def approach3_objective(theta, logN, logD, logL, delta=HUBER_DELTA, scale=None):
    """Hoffmann et al.'s Approach 3 objective and its gradient at ``theta =
    (a, b, e, alpha, beta)``: the sum over runs of the Huber loss of
    ``LSE(a - alpha log N, b - beta log D, e) - log L`` (App. D.2), divided by
    ``scale`` (default ``n * delta``, see :data:`OBJECTIVE_SCALE`).

    Returns ``(value, gradient)``, as :func:`scipy.optimize.minimize` wants with ``jac=True``.
    """
    a, b, e, alpha, beta = theta
    t1 = a - alpha * logN
    t2 = b - beta * logD
    m = np.maximum(np.maximum(t1, t2), e)  # log-sum-exp, shifted for stability
    w1, w2, w3 = np.exp(t1 - m), np.exp(t2 - m), np.exp(e - m)
    total = w1 + w2 + w3
    r = m + np.log(total) - logL
    if scale is None:
        scale = len(logL) * delta
    ar = np.abs(r)
    value = np.sum(np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta))) / scale
    g = np.clip(r, -delta, delta) / (scale * total)  # d huber / d pred, times the softmax denominator
    g1, g2 = g * w1, g * w2
    grad = np.array([g1.sum(), g2.sum(), np.sum(g * w3), -np.dot(g1, logN), -np.dot(g2, logD)])
    return value, grad


def _grid_objective(grid, logN, logD, logL, delta):
    """The Approach 3 objective at every row of ``grid`` at once (for ranking starts)."""
    a, b, e, alpha, beta = (grid[:, i:i + 1] for i in range(5))
    terms = np.stack(np.broadcast_arrays(a - alpha * logN, b - beta * logD, e))
    m = terms.max(axis=0)
    r = m + np.log(np.exp(terms - m).sum(axis=0)) - logL
    return huber(r, delta).sum(axis=1)


class FitNotConverged(RuntimeError):
    """The optimizer stopped away from an optimum (Besiroglu et al. 2024)."""


@dataclass(frozen=True)
class Approach3Fit:
    """Result of :func:`fit_approach3`. ``theta`` is ``(a, b, e, alpha, beta)``."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float
    converged: bool
    diagnosis: str
    n_starts: int
    theta: tuple = field(repr=False)

    @property
    def a(self) -> float:
        """Allocation exponent ``N_opt ~ C^a``, ``a = beta/(alpha+beta)`` (Hoffmann eq. 4)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """``D_opt ~ C^b``, ``b = alpha/(alpha+beta)``."""
        return self.alpha / (self.alpha + self.beta)

    def constants(self, name="fitted", cite="") -> ChinchillaConstants:
        """The fit as :class:`solutions.scaling.ChinchillaConstants`, usable with
        every function of :mod:`solutions.scaling`."""
        # A fit can drive E to zero (exp of a very negative e underflows): floor it at the
        # smallest positive double, which changes no loss and keeps the constants valid.
        E = max(self.E, np.finfo(float).tiny)
        return ChinchillaConstants(E, self.A, self.B, self.alpha, self.beta, name, cite)


def _one_blas_thread():
    """L-BFGS-B's tiny linear algebra runs ~30x slower when BLAS threads contend
    for the cores, so every fit runs with one (when threadpoolctl is there to say so)."""
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _lbfgs(x0, args, ftol, gtol, maxiter):
    return minimize(approach3_objective, np.asarray(x0, dtype=np.float64), args=args, jac=True,
                    method="L-BFGS-B", options={"ftol": ftol, "gtol": gtol, "maxiter": maxiter})


#: Tolerances of the default fit: tight, on an objective of order one.
FTOL, GTOL, MAXITER = 1e-14, 1e-10, 10_000


def check_convergence(theta, logN, logD, logL, delta=HUBER_DELTA, *, exponent_tol=1e-3, grad_tol=1e-5):
    """Is ``theta`` a local minimum of the Approach 3 objective?

    Two tests, both independent of how ``theta`` was found:

    1. the gradient of the per-point objective (scaled as :data:`OBJECTIVE_SCALE`)
       is below ``grad_tol`` in every component;
    2. a fresh L-BFGS run from ``theta`` with tight tolerances does not move
       ``alpha`` or ``beta`` by more than ``exponent_tol``, nor lower the
       objective by more than 1e-6 of its value.

    An optimizer stopped early (Besiroglu et al. 2024) fails at least one.
    Returns ``(ok, diagnosis)``.
    """
    args = (logN, logD, logL, delta, None)
    value, grad = approach3_objective(np.asarray(theta, dtype=np.float64), *args)
    with _one_blas_thread():
        polished = _lbfgs(theta, args, FTOL, GTOL, MAXITER)
    moved = np.abs(polished.x[3:] - np.asarray(theta)[3:])
    gain = value - polished.fun
    problems = []
    if np.max(np.abs(grad)) > grad_tol:
        problems.append(f"gradient {np.max(np.abs(grad)):.2e} > {grad_tol:g}")
    if np.max(moved) > exponent_tol:
        problems.append(f"re-optimising moves an exponent by {np.max(moved):.3f} > {exponent_tol:g}")
    if gain > 1e-6 * max(abs(value), 1e-12):
        problems.append(f"re-optimising lowers the objective by {gain / value:.1%}")
    if problems:
        return False, "not converged: " + "; ".join(problems)
    return True, "converged: gradient vanishes and re-optimising does not move the optimum"


def fit_approach3(N, D, L, *, delta=HUBER_DELTA, init_grid=None, top_k=None, ftol=FTOL, gtol=GTOL,
                  maxiter=MAXITER, scale=None, strict=True) -> Approach3Fit:
    """Fit ``L(N, D) = E + A/N^alpha + B/D^beta`` to runs exactly as Hoffmann et
    al. 2022, App. D.2: Huber loss (``delta``) on log loss, L-BFGS from every
    point of ``init_grid`` (default :data:`PAPER_INIT_GRID`), best minimum wins.

    ``top_k``: if given, run L-BFGS only from the ``top_k`` grid points with the
    lowest starting objective (a speed-up for the bootstrap; the full grid is
    the paper's procedure). ``ftol``, ``gtol``, ``maxiter`` and ``scale`` (the
    objective's divisor; default ``n * delta``) are exposed so that the failure
    Besiroglu et al. 2024 describe can be reproduced: ``scale=1`` with scipy's
    default ``ftol`` stops early. The result is then checked by
    :func:`check_convergence`; with ``strict`` a failed check raises
    :class:`FitNotConverged`, otherwise ``converged`` is False.
    """
    N, D, L = _check_runs(N, D, L)
    if not (np.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be a positive number, got {delta!r}")
    grid = PAPER_INIT_GRID if init_grid is None else np.asarray(init_grid, dtype=np.float64)
    if grid.ndim != 2 or grid.shape[1] != 5 or len(grid) == 0:
        raise ValueError(f"init_grid must be an array of rows (a, b, e, alpha, beta), got shape {grid.shape}")
    logN, logD, logL = np.log(N), np.log(D), np.log(L)
    args = (logN, logD, logL, delta, scale)
    if top_k is not None:
        if not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
        start_values = _grid_objective(grid, logN, logD, logL, delta)
        grid = grid[np.argsort(start_values, kind="stable")[:top_k]]
    best = None
    with _one_blas_thread():
        for x0 in grid:
            res = _lbfgs(x0, args, ftol, gtol, maxiter)
            if np.all(np.isfinite(res.x)) and (best is None or res.fun < best.fun):
                best = res
        if best is None:  # pragma: no cover - every start diverged
            raise FitNotConverged("every L-BFGS run diverged")
        ok, why = check_convergence(best.x, logN, logD, logL, delta)
    if strict and not ok:
        raise FitNotConverged(why)
    a, b, e, alpha, beta = (float(v) for v in best.x)
    value = approach3_objective(best.x, logN, logD, logL, delta, None)[0]
    return Approach3Fit(float(np.exp(e)), float(np.exp(a)), float(np.exp(b)), alpha, beta,
                        float(value), ok, why, len(grid), tuple(float(v) for v in best.x))


# --------------------------------------------------------------------------
# Approach 2: IsoFLOP profiles
# --------------------------------------------------------------------------


def isoflop_minimum(N, L, window=None):
    """Minimum of the parabola ``L = c2 x^2 + c1 x + c0`` in ``x = log N``
    fitted to one iso-FLOP profile (Hoffmann et al. 2022, sec. 3.2).

    ``window``: fit only the ``window`` sizes nearest (in ``log N``) to the
    lowest observed loss, ``window >= 3``. A profile that is steeper on one side
    than the other (as small models' are) pulls a parabola fitted to all its
    points off the minimum; three points around the lowest one keep it local.

    Returns ``(N_opt, L_opt)``. Raises ``ValueError`` if the profile has
    fewer than three distinct sizes or curves the wrong way (no minimum), or if
    the minimum lies outside the sizes tried (an extrapolated optimum).
    """
    N = np.asarray(N, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    if len(np.unique(N)) < 3:
        raise ValueError(f"an iso-FLOP profile needs at least 3 distinct model sizes, got {len(np.unique(N))}")
    if window is not None:
        if not isinstance(window, (int, np.integer)) or window < 3:
            raise ValueError(f"window must be an integer >= 3 or None, got {window!r}")
        centre = np.log(N[np.argmin(L)])
        sizes = np.unique(N)
        nearest = sizes[np.argsort(np.abs(np.log(sizes) - centre), kind="stable")[:window]]
        keep = np.isin(N, nearest)
        N, L = N[keep], L[keep]
    x = np.log(N)
    c2, c1, c0 = np.polyfit(x, L, 2)
    if not c2 > 0:
        raise ValueError("the iso-FLOP profile has no minimum (the fitted parabola opens downwards)")
    x_opt = -c1 / (2 * c2)
    if not x.min() <= x_opt <= x.max():
        raise ValueError(
            f"the iso-FLOP minimum N={np.exp(x_opt):.3g} lies outside the sizes tried "
            f"({N.min():.3g} to {N.max():.3g}): add sizes on that side"
        )
    return float(np.exp(x_opt)), float(c0 + c1 * x_opt + c2 * x_opt**2)


@dataclass(frozen=True)
class Approach2Fit:
    """``N_opt = kN C^a``, ``D_opt = kD C^b`` from iso-FLOP minima."""

    a: float
    b: float
    kN: float
    kD: float
    budgets: tuple
    N_opt: tuple
    D_opt: tuple
    L_opt: tuple

    def allocation(self, C):
        """``(N_opt, D_opt)`` at budget ``C`` from the fitted power laws."""
        C = np.asarray(C, dtype=np.float64)
        return self.kN * C**self.a, self.kD * C**self.b


def fit_approach2(C, N, L, *, window=None, flops_per_param_per_token=FLOPS_PER_PARAM_PER_TOKEN) -> Approach2Fit:
    """Approach 2 of Hoffmann et al. 2022: group runs by compute budget ``C``,
    find each profile's minimum with :func:`isoflop_minimum`, set ``D_opt = C / (6
    N_opt)``, and fit ``log N_opt = a log C + log kN`` (and the same for ``D``)
    by least squares. Needs at least two budgets. ``window`` is passed to
    :func:`isoflop_minimum`."""
    C = np.asarray(C, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    if not (C.shape == N.shape == L.shape) or C.ndim != 1:
        raise ValueError(f"C, N and L must be 1-D arrays of the same length, got {C.shape}, {N.shape}, {L.shape}")
    for name, x in (("C", C), ("N", N), ("L", L)):
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError(f"{name} must hold finite positive numbers")
    budgets = np.unique(C)
    if len(budgets) < 2:
        raise ValueError(f"C must hold at least 2 distinct compute budgets, got {len(budgets)}")
    n_opt, l_opt = zip(*(isoflop_minimum(N[C == c], L[C == c], window) for c in budgets))
    n_opt = np.array(n_opt)
    d_opt = budgets / (flops_per_param_per_token * n_opt)
    a, logkN = np.polyfit(np.log(budgets), np.log(n_opt), 1)
    b, logkD = np.polyfit(np.log(budgets), np.log(d_opt), 1)
    return Approach2Fit(float(a), float(b), float(np.exp(logkN)), float(np.exp(logkD)),
                        tuple(map(float, budgets)), tuple(map(float, n_opt)), tuple(map(float, d_opt)),
                        tuple(map(float, l_opt)))


# --------------------------------------------------------------------------
# Bootstrap intervals
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap percentile interval."""

    estimate: float
    low: float
    high: float
    level: float

    def __str__(self):
        return f"{self.estimate:.3g} [{self.low:.3g}, {self.high:.3g}]"


def _interval(point, samples, level):
    samples = np.asarray(samples, dtype=np.float64)
    q = 100 * (1 - level) / 2
    return Interval(float(point), float(np.percentile(samples, q)), float(np.percentile(samples, 100 - q)), level)


def _check_bootstrap(n_boot, level):
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def bootstrap_approach3(N, D, L, *, n_boot=200, level=0.8, seed=0, top_k=20, fit=None, budgets=()):
    """Percentile bootstrap for Approach 3 (as Besiroglu et al. 2024 do):
    resample the runs with replacement, refit (L-BFGS from the ``top_k`` best
    grid points), and report intervals for ``E, A, B, alpha, beta``, the
    allocation exponents ``a, b`` and, for each C in ``budgets``, the optimal
    tokens per parameter. ``fit`` is the point estimate (default: the full-grid
    fit of :func:`fit_approach3`, which takes minutes). Resamples whose fit does
    not converge, or that runs off to an infinite A or B, are dropped and counted. Returns ``(intervals: dict[str, Interval], dropped: int)``."""
    from .scaling import compute_optimal_closed_form

    N, D, L = _check_runs(N, D, L)
    _check_bootstrap(n_boot, level)
    fit = fit if fit is not None else fit_approach3(N, D, L)
    rng = np.random.default_rng(seed)
    names = ["E", "A", "B", "alpha", "beta", "a", "b"] + [f"ratio@{c:g}" for c in budgets]

    def row(f):
        consts = f.constants()
        ratios = [compute_optimal_closed_form(c, consts)[2] for c in budgets]
        return [f.E, f.A, f.B, f.alpha, f.beta, f.a, f.b, *ratios]

    samples, dropped = [], 0
    with np.errstate(over="ignore"):
        for _ in range(n_boot):
            idx = rng.integers(0, len(N), len(N))
            try:
                f = fit_approach3(N[idx], D[idx], L[idx], top_k=top_k, strict=True)
                samples.append(row(f))
            except (FitNotConverged, ValueError):  # not converged, or A or B overflowed: degenerate
                dropped += 1
    if len(samples) < 2:
        raise FitNotConverged(f"only {len(samples)} of {n_boot} bootstrap fits converged")
    samples = np.array(samples)
    point = row(fit)
    return {k: _interval(p, samples[:, i], level) for i, (k, p) in enumerate(zip(names, point))}, dropped


def bootstrap_approach2(C, N, L, *, n_boot=200, level=0.8, seed=0, window=None, noise=None):
    """Percentile bootstrap for Approach 2. Without ``noise``: resample runs with
    replacement within each compute budget and refit. With ``noise`` (a standard
    deviation in log loss, e.g. the scatter of the runs about an Approach 3 fit):
    a parametric bootstrap that refits ``L * exp(noise * z)``, for profiles too
    short to resample (a handful of sizes, each run once). Resamples that leave a
    profile with fewer than three sizes or no interior minimum are dropped and
    counted. Returns ``(intervals for 'a' and 'b', dropped)``."""
    C = np.asarray(C, dtype=np.float64)
    N = np.asarray(N, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    _check_bootstrap(n_boot, level)
    fit = fit_approach2(C, N, L, window=window)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(C == c) for c in np.unique(C)]
    samples, dropped = [], 0
    if noise is not None and not (np.isfinite(noise) and noise > 0):
        raise ValueError(f"noise must be a positive number or None, got {noise!r}")
    for _ in range(n_boot):
        if noise is None:
            idx = np.concatenate([rng.choice(g, len(g)) for g in groups])
            Cb, Nb, Lb = C[idx], N[idx], L[idx]
        else:
            Cb, Nb, Lb = C, N, L * np.exp(noise * rng.standard_normal(len(L)))
        try:
            f = fit_approach2(Cb, Nb, Lb, window=window)
        except ValueError:
            dropped += 1
            continue
        samples.append((f.a, f.b))
    if len(samples) < 2:
        raise ValueError(f"only {len(samples)} of {n_boot} bootstrap resamples had a minimum in every profile")
    samples = np.array(samples)
    return {"a": _interval(fit.a, samples[:, 0], level), "b": _interval(fit.b, samples[:, 1], level)}, dropped


# --------------------------------------------------------------------------
# Synthetic data for tests and for the lab's dry runs
# --------------------------------------------------------------------------


def synthetic_runs(constants: ChinchillaConstants, budgets, sizes_per_budget=7, span=8.0, noise=0.0, seed=0):
    """Iso-FLOP runs drawn from a known law: for each budget ``C``, model sizes
    spread log-evenly over a factor ``span`` either side of the law's own
    optimum, ``D = C/(6N)``, and loss ``L(N, D) * exp(noise * z)`` with standard
    normal ``z`` (multiplicative noise, additive in log loss). Returns ``(C, N, D, L)``."""
    from .scaling import compute_optimal_closed_form, parametric_loss

    rng = np.random.default_rng(seed)
    budgets = np.asarray(budgets, dtype=np.float64)
    C, N = [], []
    for c in budgets:
        n_star = compute_optimal_closed_form(c, constants)[0]
        n = n_star * np.logspace(-np.log10(span), np.log10(span), sizes_per_budget)
        C.append(np.full_like(n, c))
        N.append(n)
    C, N = np.concatenate(C), np.concatenate(N)
    D = C / (FLOPS_PER_PARAM_PER_TOKEN * N)
    L = parametric_loss(N, D, constants) * np.exp(noise * rng.standard_normal(len(N)))
    return C, N, D, L
