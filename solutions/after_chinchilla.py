"""Scaling laws after Chinchilla: counting inference, repeating data, and
learning-rate schedules that allow fits from one run.

* Inference-aware allocation (Sardana et al. 2024): for a target loss and an
  expected ``T`` tokens of inference, choose ``N`` and ``D`` to minimise the
  lifetime FLOPs ``6 N D + 2 N T`` instead of the training FLOPs alone.
* Data-constrained scaling (Muennighoff et al. 2023): ``R`` repeats of ``U``
  unique tokens are worth ``U + U R* (1 - exp(-R / R*))`` fresh tokens.
* Warmup-stable-decay (WSD) schedules (Hu et al. 2024; Hagele et al. 2024):
  a constant learning rate with a short decay at the end, so that a decayed
  checkpoint can be branched off at any point of one long run.

References: sardana2024beyond, muennighoff2023scaling, hu2024minicpm,
hagele2024scaling, hoffmann2022chinchilla.
"""

from __future__ import annotations

import numpy as np

from ._validate import one_of, positive, positive_integer
from .scaling import (
    FLOPS_PER_PARAM_PER_TOKEN,
    HOFFMANN_ROUNDED,
    ChinchillaConstants,
)

__all__ = [
    "INFERENCE_FLOPS_PER_PARAM_PER_TOKEN",
    "tokens_for_loss",
    "lifetime_flops",
    "inference_aware_optimal",
    "UNRESOLVED_EXCESS",
    "MUENNIGHOFF_R_D_STAR",
    "effective_data",
    "SCHEDULES",
    "learning_rate",
    "last_layer_flop_share",
]

#: A forward pass costs about 2 FLOPs per parameter per token (Kaplan et al. 2020, sec. 2.1).
INFERENCE_FLOPS_PER_PARAM_PER_TOKEN = 2


def _check_constants(constants):
    if not isinstance(constants, ChinchillaConstants):
        raise ValueError(f"constants must be a ChinchillaConstants, got {constants!r}")
    return constants


def tokens_for_loss(N, loss, constants: ChinchillaConstants = HOFFMANN_ROUNDED):
    """Training tokens that bring a model of ``N`` parameters to ``loss`` under
    the parametric law: ``D = (B / (loss - E - A/N^alpha))^(1/beta)``. Infinite
    where the model is too small ever to reach the loss."""
    c = _check_constants(constants)
    N = positive("N", N)
    loss = positive("loss", loss)
    gap = np.asarray(loss) - c.E - c.A / np.asarray(N) ** c.alpha
    with np.errstate(divide="ignore", invalid="ignore"):
        D = np.where(gap > 0, (c.B / np.where(gap > 0, gap, 1.0)) ** (1 / c.beta), np.inf)
    return float(D) if np.ndim(D) == 0 else D


def lifetime_flops(N, D, inference_tokens):
    """Training plus inference FLOPs: ``6 N D + 2 N T`` (Sardana et al. 2024, eq. 3)."""
    N = positive("N", N)
    D = positive("D", D)
    T = np.asarray(inference_tokens, dtype=np.float64)
    if np.any(~np.isfinite(T)) or np.any(T < 0):
        raise ValueError(f"inference_tokens must be a non-negative finite number, got {inference_tokens!r}")
    return FLOPS_PER_PARAM_PER_TOKEN * N * D + INFERENCE_FLOPS_PER_PARAM_PER_TOKEN * N * T


#: How close to the smallest model that can reach a loss (relatively) :func:`inference_aware_optimal`
#: still answers: some 50 times the step its search resolves in log N there.
UNRESOLVED_EXCESS = 1e-5


def inference_aware_optimal(loss, inference_tokens, constants: ChinchillaConstants = HOFFMANN_ROUNDED):
    """The ``(N, D, flops)`` that reach ``loss`` with the fewest lifetime FLOPs
    when the model will then process ``inference_tokens`` tokens
    (Sardana et al. 2024, sec. 2): minimise ``6 N D(N) + 2 N T`` over ``N``
    with ``D(N)`` from :func:`tokens_for_loss`.

    With ``inference_tokens = 0`` this is the Chinchilla compute-optimal model
    for that loss; the more inference, the smaller the model and the longer
    it trains. Scalars only.
    """
    c = _check_constants(constants)
    loss = positive("loss", loss)
    if np.ndim(loss) or np.ndim(inference_tokens):
        raise ValueError("loss and inference_tokens must be scalars")
    T = float(inference_tokens)
    if not np.isfinite(T) or T < 0:
        raise ValueError(f"inference_tokens must be a non-negative finite number, got {inference_tokens!r}")
    if loss <= c.E:
        raise ValueError(f"loss must exceed the fit's irreducible term E={c.E}, got {loss}")
    # Smallest model that can reach the loss with infinite data: A / N^alpha = loss - E.
    n_min = (c.A / (loss - c.E)) ** (1 / c.alpha)

    def cost(log_n):
        N = np.exp(log_n)
        D = tokens_for_loss(N, loss, c)
        return np.log(FLOPS_PER_PARAM_PER_TOKEN * N * D + INFERENCE_FLOPS_PER_PARAM_PER_TOKEN * N * T)

    # The training-only optimum is the largest useful model; search below it.
    lo, hi = np.log(n_min) + 1e-9, np.log(n_min) + 12.0
    from scipy.optimize import minimize_scalar  # here: 0.45 s to import, needed by this alone

    with np.errstate(over="ignore", invalid="ignore"):  # a demand too large overflows: said below, once
        res = minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
        N = float(np.exp(res.x))
        D = tokens_for_loss(N, loss, c)
        flops = float(lifetime_flops(N, D, T))
    # Near n_min the search cannot tell models apart (its step in log N is some 1e-7 there): an
    # optimum that close is the edge of what it resolves, not the optimum, and would stay put
    # however much more inference is asked for.
    if N / n_min - 1 < UNRESOLVED_EXCESS or not np.isfinite(flops):
        raise ValueError(f"inference_tokens {T:.3g} is more than the search resolves at loss {loss:.3f}: the cheapest "
                         f"model is then within {UNRESOLVED_EXCESS:.0e} of the smallest that can reach that loss at all "
                         f"({n_min:.3g} parameters, on ever more tokens); give fewer inference tokens")
    return N, D, flops


#: Muennighoff et al. 2023, sec. 3.1: fitted "half-life" of repeated data,
#: R_D* = 15.4 repetitions (the parameter counterpart R_N* = 5.3 is not used here).
MUENNIGHOFF_R_D_STAR = 15.4


def effective_data(unique_tokens, total_tokens, r_star=MUENNIGHOFF_R_D_STAR):
    """Fresh-token equivalent of training on ``total_tokens`` drawn by
    repeating ``unique_tokens`` (Muennighoff et al. 2023, eq. 5):

        D' = U + U R* (1 - exp(-R / R*)),   R = total / U - 1 repeats.

    Equals ``total_tokens`` for one epoch, is close to it for a few epochs
    (about 4 epochs lose little) and saturates at ``U (1 + R*)``.
    """
    U = positive("unique_tokens", unique_tokens)
    D = positive("total_tokens", total_tokens)
    r_star = positive("r_star", r_star)
    if np.any(np.asarray(D) < np.asarray(U) * (1 - 1e-12)):
        raise ValueError("total_tokens must be at least unique_tokens (at least one epoch)")
    R = np.maximum(np.asarray(D) / np.asarray(U) - 1, 0.0)
    out = np.asarray(U) * (1 + np.asarray(r_star) * (1 - np.exp(-R / r_star)))
    return float(out) if np.ndim(out) == 0 else out


SCHEDULES = ("cosine", "wsd")


def learning_rate(step, total_steps, schedule="cosine", peak=1.0, warmup=0, decay_fraction=0.2, final=0.1):
    """Learning rate at ``step`` of ``total_steps`` (elementwise over steps).

    * ``'cosine'``: linear warm-up, then a cosine from ``peak`` to ``final *
      peak`` at ``total_steps``, the schedule of Hoffmann et al. (2022);
    * ``'wsd'``: warm-up, a stable ``peak``, then a linear decay to
      ``final * peak`` over the last ``decay_fraction`` of the steps
      (Hu et al. 2024; Hagele et al. 2024).
    """
    s = np.asarray(step, dtype=np.float64)
    n = positive_integer("total_steps", total_steps)
    one_of("schedule", schedule, SCHEDULES)
    peak = positive("peak", peak)
    if np.any(~np.isfinite(s)) or np.any(s < 0) or np.any(s > n):
        raise ValueError(f"step must be in [0, total_steps={n}], got {step!r}")
    w = int(warmup)
    if w != warmup or not 0 <= w < n:
        raise ValueError(f"warmup must be a whole number in [0, total_steps), got {warmup!r}")
    if not 0 < decay_fraction <= 1:
        raise ValueError(f"decay_fraction must be in (0, 1], got {decay_fraction!r}")
    if not 0 <= final <= 1:
        raise ValueError(f"final must be in [0, 1], got {final!r}")
    warm = np.where(s < w, (s + 1) / max(w, 1), 1.0)
    if schedule == "cosine":
        progress = np.clip((s - w) / (n - w), 0, 1)
        shape = final + (1 - final) * 0.5 * (1 + np.cos(np.pi * progress))
    else:
        start = n * (1 - decay_fraction)
        progress = np.clip((s - start) / (n - start), 0, 1)
        shape = 1 - (1 - final) * progress
    out = peak * np.where(s < w, warm, shape)
    return float(out) if np.ndim(out) == 0 else out


def last_layer_flop_share(layers, d_model, vocab):
    """Share of a decoder's matrix-multiply FLOPs per token spent in the output
    layer (the projection onto the vocabulary): ``V h / (12 L h^2 + V h)``,
    with ``12 L h^2`` the non-embedding parameters of ``L`` standard layers
    (Kaplan et al. 2020, Table 1). Kaplan et al.'s ``C = 6 N`` per token counts
    only the non-embedding part; Porian et al. (2024) found this omission, large
    for small models, to be one of the causes of the Kaplan-Chinchilla gap."""
    L = positive_integer("layers", layers)
    h = positive_integer("d_model", d_model)
    V = positive_integer("vocab", vocab)
    head = np.asarray(V, dtype=np.float64) * h
    out = head / (12.0 * np.asarray(L) * h * h + head)
    return float(out) if np.ndim(out) == 0 else out
