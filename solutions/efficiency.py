"""Precision and kernels in the memory and time budget: activation memory for
modern layers (FlashAttention, SwiGLU, grouped-query attention, no dropout),
FP8 training, and zero-bubble pipeline schedules.

Activation memory generalises Korthikanti et al.'s count (2023, sec. 4.1),
which assumes a GeLU MLP of width ``4h``, dropout after attention and MLP, and
stored attention scores. Their ``34`` bytes per ``s b h`` is the sum of

* two layer-norm inputs: ``4``;
* attention: QKV input ``2``, Q ``2``, K ``2``, V ``2``, output-projection input
  ``2``, output dropout mask ``1``;
* MLP: first-linear input ``2``, GeLU input ``2 f/h = 8``, GeLU output ``8``,
  dropout mask ``1``;

plus ``5 a s / h`` for the scores: softmax output (2 bytes), attention-dropout
mask (1) and dropout output (2) per score. :func:`activation_bytes_per_layer`
recounts those terms for other choices.

References: korthikanti2022reducing, dao2022flashattention, dao2023flashattention2,
shazeer2020glu, micikevicius2022fp8, nvidia2022hopper, liu2024deepseekv3, qi2023zerobubble.
"""

from __future__ import annotations

import numpy as np

from ._validate import one_of, positive, positive_integer
from .memory import ByteConvention

__all__ = [
    "MLP_KINDS",
    "ATTENTION_KINDS",
    "activation_constant",
    "activation_bytes_per_layer",
    "DEEPSEEK_V3_FP8_STATE",
    "amdahl_time_ratio",
    "ZERO_BUBBLE_SCHEDULES",
    "pipeline_bubble",
    "peak_stashed_microbatches",
]

MLP_KINDS = ("gelu", "swiglu")
ATTENTION_KINDS = ("standard", "flash")


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def _flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _mlp_bytes(ffn_ratio, mlp):
    """Bytes per ``s b h`` stored inside the MLP's tensor-parallel region.

    GeLU: the GeLU input and output, ``2 f`` bytes each per token. SwiGLU
    (Shazeer 2020) keeps three ``f``-wide tensors: the gate's pre-activation
    (for the SiLU backward), the up projection and their product (the input of
    the down projection), ``6 f`` bytes per token, as a fused SwiGLU kernel
    does (plain autograd also keeps the SiLU output, ``8 f``)."""
    return (4.0 if mlp == "gelu" else 6.0) * ffn_ratio


def activation_constant(hidden, ffn_hidden=None, mlp="gelu", heads=None, kv_heads=None, dropout=True):
    """The constant ``c`` in ``s b h (c + score term)``: bytes per token per unit
    width that a layer stores apart from the attention scores, with 16-bit
    activations and no tensor parallelism.

    Defaults give Korthikanti et al.'s ``34`` (GeLU, ``ffn_hidden = 4 h``,
    dropout, as many key/value heads as query heads). For Llama 3 8B
    (SwiGLU, ``ffn_hidden`` 14,336 for ``hidden`` 4,096, 8 of 32 heads for K
    and V, no dropout) the parts move (attention 11 -> 7, MLP 19 -> 23) and
    happen to add up to 34 again.
    """
    h = positive("hidden", hidden)
    f = 4.0 * h if ffn_hidden is None else positive("ffn_hidden", ffn_hidden)
    one_of("mlp", mlp, MLP_KINDS)
    drop = _flag("dropout", dropout)
    if (heads is None) != (kv_heads is None):
        raise ValueError("heads and kv_heads must be given together (or neither)")
    kv_share = 1.0
    if heads is not None:
        a = positive_integer("heads", heads)
        g = positive_integer("kv_heads", kv_heads)
        if a % g:
            raise ValueError(f"kv_heads must divide heads, got heads={a} and kv_heads={g}")
        kv_share = g / a
    norms = 4.0
    attention = 2 + 2 + 2 * 2 * kv_share + 2 + (1 if drop else 0)  # input, Q, K and V, out-proj input, mask
    mlp_bytes = 2 + _mlp_bytes(np.asarray(f) / h, mlp) + (1 if drop else 0)
    return _out(norms + attention + mlp_bytes)


def activation_bytes_per_layer(
    seq_len,
    micro_batch,
    hidden,
    heads,
    ffn_hidden=None,
    mlp="gelu",
    attention="standard",
    kv_heads=None,
    dropout=True,
    tp=1,
    sequence_parallel=False,
    cp=1,
):
    """Activation bytes one GPU stores per transformer layer for the backward
    pass (16-bit activations), recounting Korthikanti et al. (2023, sec. 4)
    for other layer choices.

    * ``mlp``: ``'gelu'`` (``ffn_hidden`` defaults to ``4 h``) or ``'swiglu'``;
    * ``attention``: ``'standard'`` stores the softmax output, ``2 a s^2 b``
      bytes (and, with ``dropout``, its mask and output, ``3 a s^2 b`` more);
      ``'flash'`` stores no ``s x s`` matrix, only one fp32 log-sum-exp per
      row, ``4 a s b`` bytes, as FlashAttention-2 does (Dao 2023, sec. 3.1;
      FlashAttention-1, Dao et al. 2022, kept two statistics per row, the
      running maximum and sum);
    * ``tp``: tensor parallelism splits everything but the layer-norm inputs,
      the two block inputs and the dropout masks (``10 s b h`` with dropout);
      ``sequence_parallel`` splits those too;
    * ``cp``: context parallelism gives each GPU ``s / cp`` of the tokens (its
      queries still attend to all ``s`` keys), so every term divides by ``cp``.

    With the defaults it equals :func:`solutions.memory.activation_memory_per_layer`.
    """
    s = positive("seq_len", seq_len)
    b = positive("micro_batch", micro_batch)
    h = positive("hidden", hidden)
    a = positive_integer("heads", heads)
    one_of("attention", attention, ATTENTION_KINDS)
    t = positive_integer("tp", tp)
    c = positive_integer("cp", cp)
    sp = _flag("sequence_parallel", sequence_parallel)
    drop = _flag("dropout", dropout)
    g = a if kv_heads is None else kv_heads
    const = activation_constant(h, ffn_hidden, mlp, a, g, drop)
    replicated = 4.0 + 2.0 + 2.0 + (2.0 if drop else 0.0)
    split = np.asarray(const) - replicated
    s, b, h = (np.asarray(x, dtype=np.float64) for x in (s, b, h))
    sbh = s * b * h
    if attention == "standard":
        scores = (5.0 if drop else 2.0) * a * s * s * b
    else:
        scores = 4.0 * a * s * b
    per_gpu = sbh * (replicated / (t if sp else 1) + split / t) + scores / t
    return _out(per_gpu / c)


#: DeepSeek-V3's FP8 mixed-precision training (Liu et al. 2024, sec. 3.3): GEMM
#: inputs are cast to FP8 on the fly, while the master weights and the gradients
#: used for accumulation stay in fp32 (4 + 4) and AdamW's moments are kept in
#: bf16 (2 + 2). The formats are the report's; the total of 12 bytes is the
#: course's own count of those three parts (the report prints no total), and
#: filing the master weights under ``weights`` (so that ZeRO-1 does not shard
#: them) is the course's reading too. FP8 saves compute and activation memory,
#: not model state.
DEEPSEEK_V3_FP8_STATE = ByteConvention(
    "deepseek_v3_fp8", 4, 4, 4,
    "fp32 master weights (4) + fp32 gradients (4) + bf16 AdamW m and v (2 + 2); "
    "FP8 copies of the weights for the GEMMs are made on the fly",
    "liu2024deepseekv3",
)


def amdahl_time_ratio(fraction, speedup):
    """New step time over old when a ``fraction`` of it runs ``speedup`` times
    faster (Amdahl's law): ``(1 - fraction) + fraction / speedup``.

    FP8 doubles the H100's peak for matrix products (1,978.9 against 989.4
    dense TFLOP/s, NVIDIA Hopper whitepaper) but nothing else: attention's
    softmax, norms, communication and the optimizer keep their time.
    """
    f = np.asarray(positive("fraction", fraction), dtype=np.float64)
    if np.any(f > 1):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    k = positive("speedup", speedup)
    return _out((1 - f) + f / k)


ZERO_BUBBLE_SCHEDULES = ("1f1b", "zb-h1", "zb-h2")


def pipeline_bubble(p, m, schedule="1f1b", t_f=1.0, t_b=1.0, t_w=1.0):
    """Bubble of a ``p``-stage pipeline with ``m`` micro-batches, relative to
    the ideal compute time ``m (t_f + t_b + t_w)``, when the backward pass is
    split into ``B`` (gradient of the input, ``t_b``) and ``W`` (gradient of
    the weights, ``t_w``), as in Qi et al. (2024, sec. 2):

    * ``'1f1b'``: idle ``(p-1)(t_f + t_b + t_w)`` per stage, i.e. ``(p-1)/m``;
    * ``'zb-h1'``: ``W`` passes are deferred into the drain, leaving
      ``(p-1)(t_f + t_b - t_w)``: a third of 1F1B's when the three are equal,
      at the same peak activation memory;
    * ``'zb-h2'``: extra warm-up forwards fill more of it, leaving
      ``(p-1)(t_f + t_b - 2 t_w)`` (Qi et al. 2024, Table 2), zero only when
      ``t_w >= (t_f + t_b) / 2``, at up to ``2p - 1`` stashed micro-batches
      (ignoring the optimizer's global synchronisation, which the paper also
      removes).

    Requires ``t_w <= t_f + t_b`` for ``'zb-h1'``.
    """
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    one_of("schedule", schedule, ZERO_BUBBLE_SCHEDULES)
    t_f = positive("t_f", t_f)
    t_b = positive("t_b", t_b)
    t_w = positive("t_w", t_w)
    ideal = np.asarray(m, dtype=np.float64) * (t_f + t_b + t_w)
    slots = np.asarray(p, dtype=np.float64) - 1
    if schedule == "1f1b":
        idle = slots * (t_f + t_b + t_w)
    elif schedule == "zb-h1":
        if np.any(np.asarray(t_w) > np.asarray(t_f) + np.asarray(t_b)):
            raise ValueError("t_w must not exceed t_f + t_b for 'zb-h1'")
        idle = slots * (t_f + t_b - t_w)
    else:
        idle = slots * np.maximum(0.0, np.asarray(t_f) + np.asarray(t_b) - 2 * np.asarray(t_w))
    return _out(idle / ideal)


def peak_stashed_microbatches(p, schedule="1f1b"):
    """Micro-batches whose activations the first stage holds at its peak:
    ``p`` for 1F1B and ZB-H1, ``2p - 1`` for ZB-H2 (Qi et al. 2024, sec. 2)."""
    p = positive_integer("p", p)
    one_of("schedule", schedule, ZERO_BUBBLE_SCHEDULES)
    return 2 * p - 1 if schedule == "zb-h2" else p
