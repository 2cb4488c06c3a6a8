"""Memory per GPU: model state (weights, gradients, optimizer) under data,
tensor, pipeline and fully-sharded parallelism, ZeRO stages, 3D layouts, and
activation memory.

Units: bytes (divide by 1e9 for GB, the chapter's unit).

Bytes per parameter is a *named convention*, never a bare literal: the
chapter counts 12 (bf16 weights + bf16 grads + fp32 Adam m and v), ZeRO counts
16 (adds an fp32 master copy of the weights). See :data:`BYTE_CONVENTIONS`.

References: rajbhandari2020zero, korthikanti2022reducing, narayanan2021megatron,
micikevicius2018mixed, dettmers2022optimizers, zhao2023fsdp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validate import divides, nonnegative_integer, one_of, positive, positive_integer

__all__ = [
    "ByteConvention",
    "BYTE_CONVENTIONS",
    "CHAPTER_BYTES_PER_PARAM",
    "ZERO_BYTES_PER_PARAM",
    "STRATEGIES",
    "memory_per_gpu",
    "get_convention",
    "ZERO_STAGES",
    "zero_memory_per_gpu",
    "memory_per_gpu_3d",
    "activation_memory_per_layer",
    "BREAKDOWN_STRATEGIES",
    "memory_breakdown",
]


@dataclass(frozen=True)
class ByteConvention:
    """Bytes of model state per parameter, split by what they hold.

    ``optimizer`` includes everything the optimizer keeps per parameter
    (Adam's m and v, and an fp32 master copy of the weights if any).
    """

    name: str
    weights: float
    grads: float
    optimizer: float
    description: str
    cite: str

    @property
    def total(self) -> float:
        """Bytes per parameter, all components together."""
        return self.weights + self.grads + self.optimizer


BYTE_CONVENTIONS = {
    c.name: c
    for c in (
        ByteConvention(
            "chapter_12", 2, 2, 8,
            "bf16 weights (2) + bf16 grads (2) + fp32 Adam m and v (4 + 4); "
            "Micikevicius et al.'s recipe less its fp32 master copy: the course's first approximation",
            "micikevicius2018mixed",
        ),
        ByteConvention(
            "zero_16", 2, 2, 12,
            "fp16/bf16 weights (2) + grads (2) + fp32 master weights, m and v (4 + 4 + 4)",
            "rajbhandari2020zero",
        ),
        ByteConvention(
            "fp32_grads_18", 2, 4, 12,
            "bf16 weights (2) + fp32 grads (4) + fp32 master weights, m and v (12): "
            "ZeRO's 16 with gradients kept in fp32",
            "rajbhandari2020zero",
        ),
        ByteConvention(
            "fp32_accum_20", 2, 2 + 4, 12,
            "bf16 weights (2) + bf16 grads (2) + fp32 gradient accumulation buffer (4) "
            "+ fp32 master weights, m and v (12): the 20 bytes/param Megatron-DeepSpeed "
            "counts for mixed-precision Adam (over 10 TB of model state for 530B)",
            "smith2022mtnlg",
        ),
        ByteConvention(
            "adam8bit_10", 2, 2, 6,
            "bf16 weights (2) + bf16 grads (2) + fp32 master weights (4) + 8-bit m and v (1 + 1)",
            "dettmers2022optimizers",
        ),
        ByteConvention(
            "fp32_adamw_16", 4, 4, 8,
            "fp32 weights (4) + fp32 grads (4) + fp32 AdamW m and v (4 + 4), no separate master "
            "copy: what the labs store (bf16 mixed precision casts the weights for compute only)",
            "loshchilov2019adamw",
        ),
    )
}

#: What each convention is called in tables and legends (its key is for code).
CONVENTION_LABELS = {
    "chapter_12": "the course's count, no master copy",
    "zero_16": "ZeRO's mixed-precision Adam",
    "fp32_grads_18": "ZeRO's, with fp32 gradients",
    "fp32_accum_20": "Megatron-DeepSpeed's, fp32 accumulation",
    "adam8bit_10": "8-bit Adam",
    "fp32_adamw_16": "all in fp32 (the labs)",
}

#: The chapter's bytes per parameter (Exercise 3).
CHAPTER_BYTES_PER_PARAM = BYTE_CONVENTIONS["chapter_12"].total
#: ZeRO's mixed-precision Adam count (Rajbhandari et al. 2020, sec. 3.1).
ZERO_BYTES_PER_PARAM = BYTE_CONVENTIONS["zero_16"].total


def get_convention(convention) -> ByteConvention:
    """Look up a convention by name, or pass a :class:`ByteConvention` through."""
    if isinstance(convention, ByteConvention):
        return convention
    one_of("convention", convention, BYTE_CONVENTIONS)
    return BYTE_CONVENTIONS[convention]


# --------------------------------------------------------------------------
# Exercise 3
# --------------------------------------------------------------------------

STRATEGIES = ("dp", "tp", "pp", "fsdp")


def memory_per_gpu(model_params, strategy, num_gpus):
    """Exercise 3: model-state bytes per GPU at 12 bytes per parameter.

    * ``'dp'``: every GPU holds a full replica, ``12 N``;
    * ``'tp'``, ``'pp'``, ``'fsdp'``: the state is split evenly, ``12 N / num_gpus``.

    This is the chapter's first approximation: it ignores activations, the
    buffers TP/PP replicate, and that FSDP shards over the data-parallel
    degree only. ``num_gpus`` must divide ``model_params`` for the sharded
    strategies (checked when ``model_params`` is a whole number).
    """
    N = positive("model_params", model_params)
    one_of("strategy", strategy, STRATEGIES)
    n = positive_integer("num_gpus", num_gpus)
    full = CHAPTER_BYTES_PER_PARAM * N  # N is a float or a float64 array
    if strategy == "dp":
        return full
    divides("num_gpus", n, "model_params", N)
    return full / n


# --------------------------------------------------------------------------
# ZeRO and 3D parallelism
# --------------------------------------------------------------------------

ZERO_STAGES = (0, 1, 2, 3)


def _sharded_state(P, stage, dp_degree, conv: ByteConvention):
    """(weights, grads, optimizer) bytes per GPU under ZeRO ``stage``."""
    w = conv.weights * P
    g = conv.grads * P
    o = conv.optimizer * P
    if stage >= 1:
        o = o / dp_degree
    if stage >= 2:
        g = g / dp_degree
    if stage >= 3:
        w = w / dp_degree
    return w, g, o


def zero_memory_per_gpu(model_params, stage, dp_degree, convention="zero_16"):
    """Model-state bytes per GPU under ZeRO (Rajbhandari et al. 2020, sec. 5, Fig. 1).

    With ``K`` optimizer bytes per parameter (12 for ``zero_16``) and ``N_d``
    the data-parallel degree:

    * stage 0 (plain DP):            ``(2 + 2 + K) P``
    * stage 1 (shard optimizer):     ``(2 + 2) P + K P / N_d``
    * stage 2 (+ shard gradients):   ``2 P + (2 + K) P / N_d``
    * stage 3 (+ shard weights):     ``(2 + 2 + K) P / N_d``   (= FSDP full sharding)

    The paper's example, 7.5B parameters on 64 GPUs: 120, 31.4, 16.6, 1.9 GB.
    No divisibility check: real implementations pad the flat buffers, so
    this is the per-GPU average.
    """
    P = positive("model_params", model_params)
    stage = nonnegative_integer("stage", stage)
    one_of("stage", stage, ZERO_STAGES)
    d = positive_integer("dp_degree", dp_degree)
    conv = get_convention(convention)
    w, g, o = _sharded_state(np.asarray(P, dtype=np.float64), stage, d, conv)
    total = w + g + o
    return float(total) if np.ndim(total) == 0 else total


def memory_per_gpu_3d(model_params, tp, pp, dp, zero_stage=0, convention="zero_16"):
    """Model-state bytes per GPU under TP x PP x DP with optional ZeRO.

    Tensor and pipeline parallelism split the model ``tp * pp`` ways; the
    resulting shard ``P / (tp pp)`` is then ZeRO-sharded over the data-parallel
    degree ``dp`` only (FSDP/ZeRO shard over ``num_gpus / (tp pp)``, not over
    all GPUs). The world size is ``tp * pp * dp``.  Even split assumed
    (embeddings and layer norms replicated by TP are ignored).
    """
    P = positive("model_params", model_params)
    tp = positive_integer("tp", tp)
    pp = positive_integer("pp", pp)
    dp = positive_integer("dp", dp)
    shard = np.asarray(P, dtype=np.float64) / (tp * pp)
    return zero_memory_per_gpu(shard, zero_stage, dp, convention)


def activation_memory_per_layer(
    seq_len,
    micro_batch,
    hidden,
    heads,
    tp=1,
    sequence_parallel=False,
    full_recompute=False,
    selective_recompute=False,
):
    """Activation bytes stored per transformer layer for the backward pass,
    with 16-bit activations (Korthikanti et al., MLSys 2023, sec. 4, Table 2).

    ``s`` = seq_len, ``b`` = micro_batch, ``h`` = hidden, ``a`` = heads,
    ``t`` = tp:

    * no parallelism:                   ``s b h (34 + 5 a s / h)``
    * tensor parallel:                  ``s b h (10 + 24/t + 5 a s / (h t))``
    * tensor + sequence parallel:       ``(s b h / t)(34 + 5 a s / h)``
    * selective recompute drops the ``5 a s / h`` attention-score term;
    * full recompute stores only the layer input, ``2 s b h``.
    """
    s = positive("seq_len", seq_len)
    b = positive("micro_batch", micro_batch)
    h = positive("hidden", hidden)
    a = positive("heads", heads)
    t = positive_integer("tp", tp)
    for flag_name, flag in (
        ("sequence_parallel", sequence_parallel),
        ("full_recompute", full_recompute),
        ("selective_recompute", selective_recompute),
    ):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{flag_name} must be True or False, got {flag!r}")
    if full_recompute and selective_recompute:
        raise ValueError("full_recompute and selective_recompute cannot both be True")
    s, b, h, a = (np.asarray(x, dtype=np.float64) for x in (s, b, h, a))
    sbh = s * b * h
    if full_recompute:
        out = 2 * sbh
    else:
        attn = 0.0 if selective_recompute else 5 * a * s / h
        if sequence_parallel:
            out = sbh / t * (34 + attn)
        else:
            out = sbh * (10 + 24 / t + attn / t)
    return float(out) if np.ndim(out) == 0 else out


BREAKDOWN_STRATEGIES = ("dp", "zero1", "zero2", "zero3", "fsdp", "tp", "pp")


def memory_breakdown(model_params, strategy, num_gpus, convention="chapter_12"):
    """Model-state bytes per GPU, by component, for the chapter's stacked bars.

    Returns ``{"weights": ..., "grads": ..., "optimizer": ...}`` (bytes; sum the
    values for the total). Strategies:

    * ``'dp'``: full replica on every GPU (ZeRO stage 0);
    * ``'zero1'``/``'zero2'``/``'zero3'``: ZeRO stages over ``num_gpus``
      data-parallel ranks; ``'fsdp'`` is full sharding, same as ``'zero3'``;
    * ``'tp'``/``'pp'``: every component split ``num_gpus`` ways (the chapter's
      even-split approximation, as in :func:`memory_per_gpu`).
    """
    P = positive("model_params", model_params)
    one_of("strategy", strategy, BREAKDOWN_STRATEGIES)
    n = positive_integer("num_gpus", num_gpus)
    conv = get_convention(convention)
    P = np.asarray(P, dtype=np.float64)
    stage = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "tp": 3, "pp": 3}[strategy]
    w, g, o = _sharded_state(P, stage, n, conv)
    return {k: float(x) if np.ndim(x) == 0 else x for k, x in (("weights", w), ("grads", g), ("optimizer", o))}
