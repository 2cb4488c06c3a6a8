"""Compute: FLOPs per token, training time and model FLOPs utilisation (MFU).

References: kaplan2020scaling (6N), chowdhery2022palm (App. B: attention term
and the MFU definition).
"""

from __future__ import annotations

import numpy as np

from ._validate import positive, positive_integer

__all__ = [
    "SECONDS_PER_YEAR",
    "flops_per_token",
    "training_time_seconds",
    "model_flops_utilization",
]

#: A Julian year (365.25 days), in seconds.
SECONDS_PER_YEAR = 365.25 * 24 * 3600


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def flops_per_token(N, n_layers=None, seq_len=None, d_model=None, attention_width=None):
    """Training FLOPs per token: ``6 N`` (Kaplan et al. 2020, sec. 2.1), plus
    PaLM's attention term ``12 n_layers seq_len (heads x head size)`` when
    ``n_layers``, ``seq_len`` and ``d_model`` are given (Chowdhery et al. 2022,
    App. B). The attention width ``heads x head size`` is ``d_model`` unless
    ``attention_width`` says otherwise: PaLM 540B's is 48 x 256 = 12,288 against
    a ``d_model`` of 18,432 (sec. 2.1)."""
    N = positive("N", N)
    extra = (n_layers, seq_len, d_model)
    if all(x is None for x in extra) and attention_width is None:
        return _out(6 * np.asarray(N))
    if any(x is None for x in extra):
        raise ValueError("n_layers, seq_len and d_model must be given together (or none of them)")
    L = positive_integer("n_layers", n_layers)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("d_model", d_model)
    if attention_width is not None:
        h = positive_integer("attention_width", attention_width)
    return _out(6 * np.asarray(N) + 12.0 * np.asarray(L) * s * h)


def training_time_seconds(flops, peak_flops_per_s, mfu=1.0, num_gpus=1):
    """Wall-clock seconds to spend ``flops`` on ``num_gpus`` GPUs of peak
    ``peak_flops_per_s`` each, running at utilisation ``mfu`` (0 < mfu <= 1):
    ``flops / (num_gpus * peak * mfu)``."""
    flops = positive("flops", flops)
    peak = positive("peak_flops_per_s", peak_flops_per_s)
    mfu = positive("mfu", mfu)
    if np.any(np.asarray(mfu) > 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    n = positive_integer("num_gpus", num_gpus)
    return _out(np.asarray(flops) / (np.asarray(n) * np.asarray(peak) * np.asarray(mfu)))


def model_flops_utilization(tokens_per_s, flops_per_token, peak_flops_per_s):
    """MFU = observed tokens/s x model FLOPs per token / peak FLOP/s
    (Chowdhery et al. 2022, sec. 4.1 and App. B). Use the aggregate peak of
    all GPUs. Rematerialisation FLOPs are not counted."""
    t = positive("tokens_per_s", tokens_per_s)
    f = positive("flops_per_token", flops_per_token)
    peak = positive("peak_flops_per_s", peak_flops_per_s)
    return _out(np.asarray(t) * np.asarray(f) / np.asarray(peak))
