"""Rules of thumb: when each axis of parallelism is compute-bound.

Each rule compares, per GPU, the time an axis spends communicating with the time the GPU spends
computing on the same work, and solves "communication <= computation" for the one quantity a
designer controls. Communication can then hide behind computation (where the implementation
overlaps the two); above the threshold no overlap can hide it. Symbols: ``F = MFU x peak`` is
the FLOP/s a GPU sustains, ``W`` the bandwidth of the link the axis uses (bytes/s per GPU and
direction), ``e`` the bytes per element (2 for bf16). Only the bandwidth terms count (no
latency), as in the ring formulas of :mod:`solutions.communication`; the style of rule follows
How To Scale Your Model (Austin et al. 2025).

(D1) **Data parallelism, ZeRO-1 and ZeRO-2.** With ``T`` tokens per GPU per optimizer step,
     a model of ``P`` parameters computes ``6 P T / F`` seconds and all-reduces ``e P``
     gradient bytes, sending ``2 (n-1)/n e P / W``: compute-bound when
     ``T > 2 (n-1)/n x e F / (6 W)``, about ``e F / (3 W)`` tokens. ``P`` cancels. ZeRO-1
     and ZeRO-2 move the same bytes (a reduce-scatter and an all-gather).
(D2) **ZeRO-3 / FSDP** gathers the weights twice and reduce-scatters the gradients once *per
     micro-batch*, ``3 (n-1)/n e P`` bytes: compute-bound when the tokens of one micro-batch
     on one GPU exceed ``3 (n-1)/n x e F / (6 W)``, about ``e F / (2 W)``.
(T1) **Tensor parallelism** (Megatron, degree ``t``): a layer's matrices hold ``12 h^2``
     parameters, so ``b s`` tokens cost ``72 b s h^2 / t`` FLOPs per GPU forward and
     backward; four all-reduces of ``b s h`` elements send ``8 e b s h (t-1)/t`` bytes. The
     ratio is ``e (t-1) F / (9 h W)``: compute-bound while ``t < 1 + 9 h W / (e F)``. The
     batch cancels; what sets the degree is the width against the link.
(C1) **Context parallelism** (degree ``c``; K and V gathered forward, their gradients
     reduce-scattered backward, :func:`solutions.context.context_parallel_bytes_per_layer`)
     hides behind the causal attention core, ``6 s^2 h / c`` FLOPs per layer and sequence:
     compute-bound when each GPU's share of the sequence
     ``s / c > 2 e (c-1)/c x (d_kv / h) x F / (3 W)``, ``d_kv`` the K (or V) width.
(E1) **Expert parallelism** (degree ``ep``, top-``k`` routing): four all-to-alls (dispatch and
     combine, forward and backward) send ``2 (e_d + e_c) k h (ep-1)/ep`` bytes per token
     (:func:`solutions.moe.expert_parallel_bytes_per_layer`), while the token's ``k`` SwiGLU
     experts of width ``f`` compute ``18 k h f`` FLOPs: compute-bound when
     ``f > (e_d + e_c) (ep-1)/ep x F / (9 W)``. ``k`` and ``h`` cancel: the expert's width is
     what must be large against ``F / W``.
(A1) **Attention against the MLP.** Per token and layer, causal attention scores cost
     ``6 s a`` training FLOPs (``a`` the attention width, heads x head size), a GeLU MLP of
     width ``f`` ``12 h f`` and a SwiGLU one ``18 h f``: attention costs more once
     ``s > 2 h f / a`` (GeLU; ``8 h`` for ``f = 4 h``, ``a = h``) or ``3 h f / a`` (SwiGLU).

References: austin2025scaling, patarasuk2009bandwidth, rajbhandari2020zero,
narayanan2021megatron, liu2023ring, dubey2024llama3, liu2024deepseekv3, chowdhery2022palm.
"""
from __future__ import annotations

import numpy as np

from ._validate import one_of, positive, positive_integer

__all__ = [
    "sustained_flops",
    "dp_min_tokens_per_gpu",
    "dp_comm_ratio",
    "tp_comm_ratio",
    "tp_max_degree",
    "cp_min_tokens_per_gpu",
    "ep_min_expert_width",
    "attention_mlp_crossover",
]


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def sustained_flops(peak_flops_per_s, mfu):
    """``F = MFU x peak``: the FLOP/s a GPU keeps up over a step, the ``F`` of every rule."""
    peak = positive("peak_flops_per_s", peak_flops_per_s)
    u = positive("mfu", mfu)
    if np.any(np.asarray(u) > 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    return _out(np.asarray(peak) * np.asarray(u))


def _ring(n):
    """``(n-1)/n``, or 1 when ``n`` is None (the limit of a large group)."""
    if n is None:
        return 1.0
    n = positive_integer("num_gpus", n)
    return _out((np.asarray(n) - 1) / np.asarray(n))


def dp_min_tokens_per_gpu(peak_flops_per_s, mfu, link_bytes_per_s, num_gpus=None, zero_stage=0,
                          bytes_per_element=2):
    """(D1), (D2): the tokens per GPU above which data parallelism is compute-bound.

    ZeRO stages 0-2: tokens per GPU per optimizer step, ``2 (n-1)/n e F / (6 W)``; stage 2
    only without gradient accumulation: it reduce-scatters the gradients after every
    micro-batch (deepspeed2022zero2accumulation), so ``m`` micro-batches send ``(m+1) (n-1)/n``
    of the gradients a step, as :func:`solutions.steptime.step_time` counts.
    Stage 3 (FSDP): tokens per GPU *per micro-batch*, ``3 (n-1)/n e F / (6 W)``.
    ``num_gpus`` is the data-parallel degree ``n`` (``None``: its large-``n`` limit)."""
    one_of("zero_stage", zero_stage, (0, 1, 2, 3))
    f = sustained_flops(peak_flops_per_s, mfu)
    w = positive("link_bytes_per_s", link_bytes_per_s)
    e = positive("bytes_per_element", bytes_per_element)
    passes = 3 if zero_stage == 3 else 2
    return _out(passes * _ring(num_gpus) * np.asarray(e) * f / (6 * np.asarray(w)))


def dp_comm_ratio(tokens_per_gpu, peak_flops_per_s, mfu, link_bytes_per_s, num_gpus=None, zero_stage=0,
                  bytes_per_element=2):
    """Communication time over compute time for the tokens given (per step for stages 0-2,
    per micro-batch for stage 3): the threshold of :func:`dp_min_tokens_per_gpu` over the
    tokens. Below one the traffic can hide behind the computation."""
    t = positive("tokens_per_gpu", tokens_per_gpu)
    return _out(dp_min_tokens_per_gpu(peak_flops_per_s, mfu, link_bytes_per_s, num_gpus, zero_stage,
                                      bytes_per_element) / np.asarray(t))


def tp_comm_ratio(tp, hidden, peak_flops_per_s, mfu, link_bytes_per_s, bytes_per_element=2):
    """(T1): Megatron tensor parallelism's communication time over its compute time,
    ``e (t-1) F / (9 h W)``, for any micro-batch and sequence length (both cancel)."""
    t = positive_integer("tp", tp)
    h = positive("hidden", hidden)
    f = sustained_flops(peak_flops_per_s, mfu)
    w = positive("link_bytes_per_s", link_bytes_per_s)
    e = positive("bytes_per_element", bytes_per_element)
    return _out(np.asarray(e) * (np.asarray(t) - 1) * f / (9 * np.asarray(h) * np.asarray(w)))


def tp_max_degree(hidden, peak_flops_per_s, mfu, link_bytes_per_s, bytes_per_element=2, share=1.0):
    """(T1): the largest tensor-parallel degree whose communication takes at most ``share``
    of the compute time (``share=1``: compute-bound, the communication could all hide),
    ``1 + share x 9 h W / (e F)``, as a real number (round down to a degree the heads allow).
    Megatron's all-reduces are not overlapped with compute by default, so a smaller
    ``share`` (say 0.1) asks what the degree costs when nothing hides."""
    h = positive("hidden", hidden)
    f = sustained_flops(peak_flops_per_s, mfu)
    w = positive("link_bytes_per_s", link_bytes_per_s)
    e = positive("bytes_per_element", bytes_per_element)
    k = positive("share", share)
    return _out(1 + np.asarray(k) * 9 * np.asarray(h) * np.asarray(w) / (np.asarray(e) * f))


def cp_min_tokens_per_gpu(hidden, kv_dim, cp, peak_flops_per_s, mfu, link_bytes_per_s, bytes_per_element=2):
    """(C1): the tokens of one sequence per GPU, ``s / c``, above which context parallelism's
    K/V exchange can hide behind the causal attention core:
    ``2 e (c-1)/c x (d_kv / h) x F / (3 W)``. At that share the ratio of
    :func:`solutions.context.context_parallel_overlap_ratio` is one."""
    h = positive("hidden", hidden)
    d = positive("kv_dim", kv_dim)
    c = positive_integer("cp", cp)
    f = sustained_flops(peak_flops_per_s, mfu)
    w = positive("link_bytes_per_s", link_bytes_per_s)
    e = positive("bytes_per_element", bytes_per_element)
    ring = (np.asarray(c) - 1) / np.asarray(c)
    return _out(2 * np.asarray(e) * ring * (np.asarray(d) / np.asarray(h)) * f / (3 * np.asarray(w)))


def ep_min_expert_width(ep, peak_flops_per_s, mfu, link_bytes_per_s, bytes_per_element=2,
                        dispatch_bytes_per_element=None):
    """(E1): the expert MLP width ``f`` above which expert parallelism's all-to-alls can hide
    behind the experts' computation (SwiGLU experts, uniform routing):
    ``(e_d + e_c) (ep-1)/ep x F / (9 W)``, ``e_d`` the bytes per element sent towards the
    experts (DeepSeek-V3 dispatches in FP8, ``e_d = 1``) and ``e_c`` back."""
    n = positive_integer("ep", ep)
    f = sustained_flops(peak_flops_per_s, mfu)
    w = positive("link_bytes_per_s", link_bytes_per_s)
    e_c = positive("bytes_per_element", bytes_per_element)
    e_d = e_c if dispatch_bytes_per_element is None else positive("dispatch_bytes_per_element",
                                                                  dispatch_bytes_per_element)
    ring = (np.asarray(n) - 1) / np.asarray(n)
    return _out((np.asarray(e_d) + np.asarray(e_c)) * ring * f / (9 * np.asarray(w)))


def attention_mlp_crossover(hidden, ffn_hidden=None, mlp="gelu", attention_width=None, causal=True):
    """(A1): the sequence length at which a layer's attention scores cost as many FLOPs as its
    MLP: ``2 h f / a`` for a GeLU MLP (two matrices), ``3 h f / a`` for SwiGLU (three), with
    ``f = 4 h`` and ``a = h`` by default; twice that without a causal mask's saving.
    (The attention *projections*, ``8 h^2`` per token forward, are counted with the weights.)"""
    h = positive("hidden", hidden)
    f = 4 * np.asarray(h) if ffn_hidden is None else positive("ffn_hidden", ffn_hidden)
    a = np.asarray(h) if attention_width is None else positive("attention_width", attention_width)
    one_of("mlp", mlp, ("gelu", "swiglu"))
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    matrices = 2 if mlp == "gelu" else 3
    s = matrices * np.asarray(h) * np.asarray(f) / np.asarray(a)  # 6 s a = 6 x matrices x h f
    return _out(s if causal else s / 2)
