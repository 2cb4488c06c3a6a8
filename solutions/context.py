"""Context parallelism: split the sequence, not the weights.

With context parallelism of degree ``c`` each GPU holds ``s / c`` of the tokens
of every sequence for the whole layer. Everything but attention is local to a
token; attention needs every query to meet every key, so the keys and values
travel. Ring attention (Liu et al. 2023) passes K/V blocks round a ring of the
``c`` GPUs while each computes on the block it holds; Llama 3 all-gathers K and V
instead (Dubey et al. 2024, sec. 3.3.2). Either way each GPU receives the K/V of
the ``c - 1`` other chunks, ``(c-1)/c`` of the full K and V, in the forward pass,
and the gradients of K and V go back the same way in the backward pass.

References: liu2023ring, dubey2024llama3, korthikanti2022reducing.
"""

from __future__ import annotations

import numpy as np

from ._validate import positive, positive_integer
from .communication import allgather_factor

__all__ = [
    "kv_width",
    "context_parallel_bytes_per_layer",
    "attention_flops_per_layer",
    "context_parallel_overlap_ratio",
]


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def kv_width(hidden, heads, kv_heads=None, head_dim=None):
    """Elements per token of K (or of V): ``kv_heads x head size``, the head
    size being ``hidden / heads`` unless ``head_dim`` is given (PaLM's is 256
    at every scale, Chowdhery et al. 2022 sec. 2.1, not 18,432 / 48 = 384).
    Grouped-query attention (fewer K/V heads than query heads) shrinks it,
    and with it the traffic of context parallelism."""
    h = positive_integer("hidden", hidden)
    a = positive_integer("heads", heads)
    g = a if kv_heads is None else positive_integer("kv_heads", kv_heads)
    if head_dim is not None:
        if a % g:
            raise ValueError(f"kv_heads must divide heads, got heads={a}, kv_heads={g}")
        return positive_integer("head_dim", head_dim) * g
    if a % g or h % a:
        raise ValueError(f"heads must divide hidden and kv_heads must divide heads, got "
                         f"hidden={h}, heads={a}, kv_heads={g}")
    return h // a * g


def context_parallel_bytes_per_layer(micro_batch, seq_len, kv_dim, cp, bytes_per_element=2,
                                     resend_kv_in_backward=False):
    """Bytes one GPU sends per transformer layer per micro-batch under context
    parallelism of degree ``cp``.

    Forward: the K and V of the whole sequence, ``2 b s d_kv`` elements, are
    gathered (ring passes or all-gather), ``(c-1)/c`` of them per GPU. Backward:
    the gradients of K and V are reduce-scattered back, the same volume. A ring
    implementation that does not keep the gathered K/V passes them round again
    in the backward pass (``resend_kv_in_backward=True``): three times the
    forward volume instead of two. Zero when ``cp == 1``.
    """
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    d = positive_integer("kv_dim", kv_dim)
    c = positive_integer("cp", cp)
    nbytes = positive("bytes_per_element", bytes_per_element)
    if not isinstance(resend_kv_in_backward, (bool, np.bool_)):
        raise ValueError(f"resend_kv_in_backward must be True or False, got {resend_kv_in_backward!r}")
    if np.any(np.asarray(s) % np.asarray(c)):
        raise ValueError(f"cp must divide seq_len, got cp={cp} and seq_len={seq_len}")
    forward = 2.0 * np.asarray(b, dtype=np.float64) * s * d * allgather_factor(c)
    passes = 3 if resend_kv_in_backward else 2
    return _out(passes * forward * nbytes)


def attention_flops_per_layer(micro_batch, seq_len, hidden, cp=1, causal=True):
    """Training FLOPs of the attention-score part of one layer on one GPU:
    ``QK^T`` and ``(scores) V`` cost ``2 * 2 b s^2 h`` forward, three times that
    with the backward pass, ``12 b s^2 h`` (the PaLM correction's
    ``12 L s h`` per token), halved for a causal mask that skips the masked
    half, and split over ``cp`` GPUs."""
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("hidden", hidden)
    c = positive_integer("cp", cp)
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    flops = 12.0 * np.asarray(b, dtype=np.float64) * s * s * h / c
    return _out(flops / 2 if causal else flops)


def context_parallel_overlap_ratio(seq_len, hidden, kv_dim, cp, peak_flops_per_s, link_bytes_per_s,
                                   mfu=0.4, bytes_per_element=2):
    """Communication time over attention compute time for one layer under
    context parallelism (causal mask, K/V kept for the backward pass). Below 1
    the K/V exchange can hide behind attention. Both grow with the sequence:
    traffic like ``s``, attention compute like ``s^2 / cp``, so the ratio
    falls as ``1 / s`` at fixed ``cp``."""
    comm = context_parallel_bytes_per_layer(1, seq_len, kv_dim, cp, bytes_per_element)
    flops = attention_flops_per_layer(1, seq_len, hidden, cp)
    peak = positive("peak_flops_per_s", peak_flops_per_s)
    bw = positive("link_bytes_per_s", link_bytes_per_s)
    mfu = positive("mfu", mfu)
    if np.any(np.asarray(mfu) > 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    return _out((np.asarray(comm) / bw) / (np.asarray(flops) / (peak * mfu)))
