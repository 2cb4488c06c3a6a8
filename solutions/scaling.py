"""Scaling laws: training FLOPs, the Chinchilla parametric loss and
compute-optimal allocation.

Three ways to split a compute budget ``C = 6 N D`` between parameters ``N``
and training tokens ``D`` live here, side by side:

* the exercise's brute-force sweep along the iso-FLOP curve
  (:func:`compute_optimal`, :func:`compute_optimal_sweep`);
* the closed-form minimiser of the parametric loss (Hoffmann et al. 2022,
  eq. 4 and App. D; :func:`compute_optimal_closed_form`);
* the rules of thumb: 20 tokens per parameter (:func:`twenty_tokens_allocation`)
  and Kaplan et al.'s ``N ~ C^0.73`` (:func:`kaplan_allocation`).

References: kaplan2020scaling, hoffmann2022chinchilla, besiroglu2024chinchilla.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validate import is_scalar, positive, ratios_array

__all__ = [
    "ChinchillaConstants",
    "EXERCISE",
    "HOFFMANN_ROUNDED",
    "HOFFMANN_PRECISE",
    "EPOCH_2024",
    "CONSTANT_SETS",
    "FLOPS_PER_PARAM_PER_TOKEN",
    "training_flops",
    "parametric_loss",
    "chinchilla_loss",
    "DEFAULT_RATIOS",
    "compute_optimal",
    "compute_optimal_sweep",
    "allocation_exponent",
    "allocation_coefficient",
    "ratio_growth_exponent",
    "iso_flop_tokens",
    "compute_optimal_closed_form",
    "CHINCHILLA_TOKENS_PER_PARAM",
    "twenty_tokens_allocation",
    "KAPLAN_N_EXPONENT",
    "KAPLAN_D_EXPONENT",
    "kaplan_allocation",
    "loss_reduction_per_doubling",
    "AllocationExponents",
    "HOFFMANN_APPROACH_EXPONENTS",
]


# --------------------------------------------------------------------------
# Constants of the parametric fit L(N, D) = E + A / N**alpha + B / D**beta
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChinchillaConstants:
    """Constants of the parametric loss ``L(N, D) = E + A/N^alpha + B/D^beta``
    (Hoffmann et al. 2022, eq. 2).

    ``E`` is the fit's irreducible-loss term: the loss it predicts for
    unlimited parameters and data, on the paper's data set and tokenizer. It
    is a fitted constant, not a measured entropy of text (another fit to the
    same runs, :data:`EPOCH_2024`, puts it elsewhere). ``A/N^alpha`` is the
    penalty for a finite model and ``B/D^beta`` the penalty for finite data.
    ``cite`` is the bibtex key of the source.
    """

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    name: str
    cite: str

    def __post_init__(self):
        for field in ("E", "A", "B", "alpha", "beta"):
            positive(field, getattr(self, field))


#: The exact constants of the chapter's Exercise 1 (A and B rounded to 406.0
#: and 410.0). Only these reproduce the exercise's 2.002 (GPT-3) and 1.936
#: (Chinchilla).
EXERCISE = ChinchillaConstants(
    E=1.69, A=406.0, B=410.0, alpha=0.34, beta=0.28,
    name="exercise", cite="hoffmann2022chinchilla",
)

#: Hoffmann et al. 2022, App. D.2 eq. 10, as printed (rounded).
HOFFMANN_ROUNDED = ChinchillaConstants(
    E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,
    name="hoffmann_rounded", cite="hoffmann2022chinchilla",
)

#: The same fit with the unrounded values found in the paper's TeX source.
#: The optimal D/N ratio is very sensitive to alpha and beta: compare
#: :data:`HOFFMANN_ROUNDED`.
HOFFMANN_PRECISE = ChinchillaConstants(
    E=1.69337, A=406.401, B=410.723, alpha=0.33917084, beta=0.2849083,
    name="hoffmann_precise", cite="hoffmann2022chinchilla",
)

#: Epoch AI's replication of Approach 3 (Besiroglu et al. 2024).
EPOCH_2024 = ChinchillaConstants(
    E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658,
    name="epoch_2024", cite="besiroglu2024chinchilla",
)

CONSTANT_SETS = {
    c.name: c for c in (EXERCISE, HOFFMANN_ROUNDED, HOFFMANN_PRECISE, EPOCH_2024)
}


# --------------------------------------------------------------------------
# FLOPs and loss
# --------------------------------------------------------------------------

#: 2 FLOPs per parameter per token forward + 4 backward (Kaplan et al. 2020,
#: sec. 2.1; non-embedding parameters, attention context term dropped).
FLOPS_PER_PARAM_PER_TOKEN = 6


def training_flops(N, D):
    """Training compute ``C = 6 N D`` in FLOPs (Kaplan et al. 2020, sec. 2.1).

    ``N`` is the parameter count and ``D`` the number of training tokens;
    both may be numpy arrays (broadcast elementwise).
    """
    N = positive("N", N)
    D = positive("D", D)
    return FLOPS_PER_PARAM_PER_TOKEN * N * D


def parametric_loss(N, D, constants: ChinchillaConstants = HOFFMANN_ROUNDED):
    """Chinchilla parametric loss ``E + A/N^alpha + B/D^beta``
    (Hoffmann et al. 2022, eq. 2; constants from App. D.2, eq. 10).

    Works elementwise on numpy arrays. Strictly decreasing in both ``N``
    and ``D`` and bounded below by ``E``.
    """
    if not isinstance(constants, ChinchillaConstants):
        raise ValueError(
            "constants must be a ChinchillaConstants, e.g. one of "
            f"{tuple(CONSTANT_SETS)}, got {constants!r}"
        )
    N = positive("N", N)
    D = positive("D", D)
    c = constants
    return c.E + c.A / N**c.alpha + c.B / D**c.beta


def chinchilla_loss(N, D):
    """Exercise 1: the Chinchilla loss with the exercise's constants
    (E=1.69, A=406.0, B=410.0, alpha=0.34, beta=0.28).

    ``chinchilla_loss(175e9, 300e9)`` is 2.002 (GPT-3) and
    ``chinchilla_loss(70e9, 1.4e12)`` is 1.936 (Chinchilla), to 3 decimals.
    See :func:`parametric_loss` for other constant sets.
    """
    return parametric_loss(N, D, EXERCISE)


# --------------------------------------------------------------------------
# Compute-optimal allocation: brute force
# --------------------------------------------------------------------------

#: The exercise's grid of D/N ratios: 200 points from 0.1 to ~2000.
DEFAULT_RATIOS = np.logspace(-1, 3.3, 200)
DEFAULT_RATIOS.setflags(write=False)


def compute_optimal_sweep(C, constants: ChinchillaConstants = HOFFMANN_ROUNDED, ratios=None):
    """Brute-force compute-optimal allocation along the iso-FLOP curve
    ``6 N D = C`` (Exercise 2's method, any constants).

    For each ratio ``r = D/N`` on the grid, ``N = sqrt(C / (6 r))`` and
    ``D = r N``; the ratio with the lowest loss wins. Ties go to the first
    grid point, like the exercise template's strict ``<``.

    ``C`` may be a scalar or an array of budgets. Returns ``(N, D, ratio,
    loss)``: floats for scalar ``C``, arrays shaped like ``C`` otherwise.
    The answer can be no better than the grid: ``ratio`` is always a grid
    value (see :func:`compute_optimal_closed_form` for the exact optimum).
    """
    C = positive("C", C)
    r = DEFAULT_RATIOS if ratios is None else ratios_array("ratios", ratios)
    C_arr = np.asarray(C, dtype=np.float64)
    # Shape (*C.shape, len(r)): every budget against every ratio at once.
    N = np.sqrt(C_arr[..., None] / (6 * r))
    D = r * N
    loss = parametric_loss(N, D, constants)
    best = np.argmin(loss, axis=-1)  # first minimum, as with strict '<'

    def pick(a):
        return np.take_along_axis(a, best[..., None], axis=-1)[..., 0]

    N_opt, D_opt, L_opt = pick(N), pick(D), pick(loss)
    r_opt = r[best]
    if is_scalar(C):
        return float(N_opt), float(D_opt), float(r_opt), float(L_opt)
    return N_opt, D_opt, r_opt, L_opt


def compute_optimal(C, ratios=None):
    """Exercise 2: the compute-optimal ``(N, D, ratio, loss)`` for budget ``C``
    FLOPs, by brute-force search over ``ratios`` (default
    ``np.logspace(-1, 3.3, 200)``) with :func:`chinchilla_loss`.

    Same answer as the exercise's loop, vectorised: ``C`` may be an array.
    """
    return compute_optimal_sweep(C, EXERCISE, ratios)


# --------------------------------------------------------------------------
# Compute-optimal allocation: closed form
# --------------------------------------------------------------------------


def allocation_exponent(constants: ChinchillaConstants = HOFFMANN_ROUNDED) -> float:
    """Exponent ``a = beta / (alpha + beta)`` in ``N_opt ~ C^a``
    (Hoffmann et al. 2022, eq. 4). ``D_opt ~ C^b`` with ``b = 1 - a``."""
    return constants.beta / (constants.alpha + constants.beta)


def allocation_coefficient(constants: ChinchillaConstants = HOFFMANN_ROUNDED) -> float:
    """``G = (alpha A / (beta B))^(1/(alpha+beta))`` from Hoffmann et al. 2022,
    eq. 4: ``N_opt = G (C/6)^a`` and ``D_opt = G^-1 (C/6)^b``."""
    c = constants
    return (c.alpha * c.A / (c.beta * c.B)) ** (1.0 / (c.alpha + c.beta))


def ratio_growth_exponent(constants: ChinchillaConstants = HOFFMANN_ROUNDED) -> float:
    """Exponent ``(alpha - beta) / (alpha + beta)`` in ``D_opt / N_opt ~ C^k``
    (from Hoffmann et al. 2022, eq. 4: ``b - a``). Positive when ``alpha >
    beta``: the optimal tokens per parameter then grow with compute."""
    if not isinstance(constants, ChinchillaConstants):
        raise ValueError(f"constants must be a ChinchillaConstants, got {constants!r}")
    return (constants.alpha - constants.beta) / (constants.alpha + constants.beta)


def iso_flop_tokens(C, N):
    """Tokens ``D = C / (6 N)`` that exhaust a budget of ``C`` FLOPs with ``N``
    parameters: the iso-FLOP line of :func:`training_flops` solved for ``D``.
    Elementwise on numpy arrays."""
    C = positive("C", C)
    N = positive("N", N)
    return C / (FLOPS_PER_PARAM_PER_TOKEN * N)


def compute_optimal_closed_form(C, constants: ChinchillaConstants = HOFFMANN_ROUNDED):
    """Exact minimiser of the parametric loss subject to ``6 N D = C``.

    Setting the derivative of ``A N^-alpha + B (C/(6N))^-beta`` to zero gives
    (Hoffmann et al. 2022, eq. 4 and App. D)::

        N_opt = G (C/6)^a,   D_opt = G^-1 (C/6)^b,
        G = (alpha A / (beta B))^(1/(alpha+beta)),
        a = beta/(alpha+beta),  b = alpha/(alpha+beta).

    Returns ``(N, D, ratio, loss)`` with ``ratio = D/N``; arrays shaped like
    ``C`` or floats for scalar ``C``.  With :data:`HOFFMANN_ROUNDED` the ratio
    is about 62.6 at 1e22 FLOPs and 122 at 1e25; with :data:`HOFFMANN_PRECISE`
    it is about 41 and 76: the ratio is very sensitive to alpha and beta.
    """
    C = positive("C", C)
    a = allocation_exponent(constants)
    b = 1.0 - a
    G = allocation_coefficient(constants)
    base = np.asarray(C, dtype=np.float64) / FLOPS_PER_PARAM_PER_TOKEN
    N = G * base**a
    D = base**b / G
    ratio = D / N
    loss = parametric_loss(N, D, constants)
    if is_scalar(C):
        return float(N), float(D), float(ratio), float(loss)
    return N, D, ratio, loss


# --------------------------------------------------------------------------
# Rules of thumb
# --------------------------------------------------------------------------

#: "About 20 tokens per parameter" (Hoffmann et al. 2022, Table 3, where
#: 70B parameters go with 1.4T tokens).
CHINCHILLA_TOKENS_PER_PARAM = 20


def twenty_tokens_allocation(C, tokens_per_param=CHINCHILLA_TOKENS_PER_PARAM):
    """Split ``C`` FLOPs with a fixed ``D = k N`` (default k = 20): then
    ``6 k N^2 = C``, so ``N = sqrt(C / (6k))``. Returns ``(N, D)``."""
    C = positive("C", C)
    k = positive("tokens_per_param", tokens_per_param)
    N = np.sqrt(np.asarray(C) / (FLOPS_PER_PARAM_PER_TOKEN * np.asarray(k)))
    D = k * N
    if is_scalar(N):
        return float(N), float(D)
    return N, D


#: Kaplan et al. 2020 (sec. 6, eq. 6.1 and Fig. 14): N_opt ~ C_min^0.73,
#: D ~ C^0.27 (N counts non-embedding parameters).
KAPLAN_N_EXPONENT = 0.73
KAPLAN_D_EXPONENT = 0.27


def kaplan_allocation(C, anchor_C, anchor_N):
    """Kaplan-style allocation ``N ~ C^0.73``, pinned through one anchor point.

    Only Kaplan et al.'s *exponent* is used: ``N = anchor_N (C/anchor_C)^0.73``
    and ``D = C / (6 N)`` (so ``D ~ C^0.27``). Their fitted prefactor is for
    non-embedding parameters and a different compute measure, so instead the
    caller supplies a point the curve passes through (for example, the
    Chinchilla-optimal allocation at a small budget), which isolates the
    effect of the exponent. Returns ``(N, D)``.
    """
    C = positive("C", C)
    anchor_C = positive("anchor_C", anchor_C)
    anchor_N = positive("anchor_N", anchor_N)
    N = anchor_N * (np.asarray(C) / anchor_C) ** KAPLAN_N_EXPONENT
    D = np.asarray(C) / (FLOPS_PER_PARAM_PER_TOKEN * N)
    if is_scalar(N):
        return float(N), float(D)
    return N, D


def loss_reduction_per_doubling(exponent):
    """Factor by which a power-law term ``X^-exponent`` shrinks when ``X``
    doubles: ``2^-exponent`` (e.g. 0.076 for Kaplan's L(N) gives 0.949)."""
    exponent = positive("exponent", exponent)
    out = 2.0 ** (-np.asarray(exponent))
    return float(out) if is_scalar(out) else out


@dataclass(frozen=True)
class AllocationExponents:
    """``N_opt ~ C^a`` and ``D_opt ~ C^b`` as reported by one method."""

    name: str
    a: float
    b: float
    cite: str


#: Hoffmann et al. 2022, Table 2: the three Chinchilla approaches and Kaplan.
HOFFMANN_APPROACH_EXPONENTS = {
    "approach_1": AllocationExponents("Approach 1 (min over training curves)", 0.50, 0.50, "hoffmann2022chinchilla"),
    "approach_2": AllocationExponents("Approach 2 (IsoFLOP profiles)", 0.49, 0.51, "hoffmann2022chinchilla"),
    "approach_3": AllocationExponents("Approach 3 (parametric fit)", 0.46, 0.54, "hoffmann2022chinchilla"),
    "kaplan": AllocationExponents("Kaplan et al. (2020)", 0.73, 0.27, "kaplan2020scaling"),
}
