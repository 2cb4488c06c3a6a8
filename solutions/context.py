"""Context parallelism: split the sequence, not the weights.

With context parallelism of degree ``c`` each GPU holds ``s / c`` of the tokens
of every sequence for the whole layer. Everything but attention is local to a
token; attention needs every query to meet every key, so the keys and values
travel. Ring attention (Liu et al. 2023) passes K/V blocks round a ring of the
``c`` GPUs while each computes on the block it holds; Llama 3 all-gathers K and V
instead (Dubey et al. 2024, sec. 3.3.2). Either way each GPU receives the K/V of
the ``c - 1`` other chunks, ``(c-1)/c`` of the full K and V, in the forward pass,
and the gradients of K and V go back the same way in the backward pass.

Combined with tensor parallelism of degree ``t`` (Llama 3's TP8 x CP16), each GPU
holds ``1/t`` of the K/V heads and its CP group joins the GPUs with the same TP
index, so the K/V traffic shrinks ``t`` times; tensor parallelism in turn acts
on the ``s / c`` tokens its CP rank holds (Dubey et al. 2024, sec. 3.3.2, Fig. 5).

DeepSpeed-Ulysses (Jacobs et al. 2023) splits the sequence differently: an
all-to-all before attention regroups Q, K and V by heads (each GPU then holds
the whole sequence for ``heads / u`` heads), a second one after attention
regroups the output by tokens again. Its degree is capped by the heads, and
with grouped-query attention by the K/V heads unless they are replicated.

References: liu2023ring, dubey2024llama3, korthikanti2022reducing, jacobs2023ulysses.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._validate import positive, positive_integer
from .communication import allgather_factor

__all__ = [
    "kv_width",
    "context_parallel_bytes_per_layer",
    "attention_flops_per_layer",
    "context_parallel_overlap_ratio",
    "TpCpTraffic",
    "tp_cp_bytes_per_layer",
    "ulysses_max_degree",
    "ulysses_bytes_per_layer",
    "FULL_RECOMPUTE_EXTRA_COMPUTE",
    "full_recompute_bytes_per_layer",
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
                                     resend_kv_in_backward=False, tp=1):
    """Bytes one GPU sends per transformer layer per micro-batch under context
    parallelism of degree ``cp``, with tensor parallelism of degree ``tp``
    beside it (each GPU then holds ``kv_dim / tp`` of every token's K and V:
    its own K/V heads; ``tp`` must divide ``kv_dim``).

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
    t = positive_integer("tp", tp)
    if np.any(np.asarray(s) % np.asarray(c)):
        raise ValueError(f"cp must divide seq_len, got cp={cp} and seq_len={seq_len}")
    if np.any(np.asarray(d) % np.asarray(t)):
        raise ValueError(f"tp must divide kv_dim (whole K/V heads per GPU), got tp={tp} and kv_dim={kv_dim}")
    forward = 2.0 * np.asarray(b, dtype=np.float64) * s * (np.asarray(d) / t) * allgather_factor(c)
    passes = 3 if resend_kv_in_backward else 2
    return _out(passes * forward * nbytes)


def attention_flops_per_layer(micro_batch, seq_len, hidden, cp=1, causal=True, tp=1):
    """Training FLOPs of the attention-score part of one layer on one GPU:
    ``QK^T`` and ``(scores) V`` cost ``2 * 2 b s^2 h`` forward, three times that
    with the backward pass, ``12 b s^2 h`` (the PaLM correction's
    ``12 L s h`` per token), halved for a causal mask that skips the masked
    half, and split over ``cp * tp`` GPUs (tensor parallelism splits the
    heads)."""
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("hidden", hidden)
    c = positive_integer("cp", cp)
    t = positive_integer("tp", tp)
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    flops = 12.0 * np.asarray(b, dtype=np.float64) * s * s * h / (c * t)
    return _out(flops / 2 if causal else flops)


def context_parallel_overlap_ratio(seq_len, hidden, kv_dim, cp, peak_flops_per_s, link_bytes_per_s,
                                   mfu=0.4, bytes_per_element=2, tp=1):
    """Communication time over attention compute time for one layer under
    context parallelism (causal mask, K/V kept for the backward pass). Below 1
    the K/V exchange can hide behind attention. Both grow with the sequence:
    traffic like ``s``, attention compute like ``s^2 / cp``, so the ratio
    falls as ``1 / s`` at fixed ``cp``. Tensor parallelism divides both the
    K/V a GPU exchanges and its attention work by ``tp``: the ratio does not
    depend on it."""
    comm = context_parallel_bytes_per_layer(1, seq_len, kv_dim, cp, bytes_per_element, tp=tp)
    flops = attention_flops_per_layer(1, seq_len, hidden, cp, tp=tp)
    peak = positive("peak_flops_per_s", peak_flops_per_s)
    bw = positive("link_bytes_per_s", link_bytes_per_s)
    mfu = positive("mfu", mfu)
    if np.any(np.asarray(mfu) > 1):
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    return _out((np.asarray(comm) / bw) / (np.asarray(flops) / (peak * mfu)))


class TpCpTraffic(NamedTuple):
    """Bytes one GPU sends per layer per micro-batch in a TP x CP layout."""

    cp: float
    tp: float

    @property
    def tp_over_cp(self) -> float:
        """How many times the tensor-parallel traffic exceeds the K/V exchange."""
        return self.tp / self.cp


def tp_cp_bytes_per_layer(micro_batch, seq_len, hidden, kv_dim, tp, cp, bytes_per_element=2):
    """Both traffics of one layer in a TP x CP layout such as Llama 3's TP8 x CP16
    (Dubey et al. 2024, sec. 3.3.2): the CP all-gather of K/V among the GPUs with
    the same TP index, each holding ``kv_dim / tp`` of every token's K/V, and
    Megatron TP's four all-reduces over the ``seq_len / cp`` tokens of the GPU's
    CP rank (``communication.tensor_parallel_bytes_per_layer``). Taking the TP
    traffic as if CP were 1 and the CP traffic as if TP were 1 would multiply
    their ratio by ``cp`` (TP on all ``s`` tokens) and by ``tp`` (K/V of all
    heads): count both on one layout."""
    from .communication import tensor_parallel_bytes_per_layer

    c = positive_integer("cp", cp)
    s = positive_integer("seq_len", seq_len)
    if s % c:
        raise ValueError(f"cp must divide seq_len, got cp={cp} and seq_len={seq_len}")
    cp_bytes = context_parallel_bytes_per_layer(micro_batch, s, kv_dim, c, bytes_per_element, tp=tp)
    tp_bytes = tensor_parallel_bytes_per_layer(micro_batch, s // c, hidden, tp, bytes_per_element)
    return TpCpTraffic(float(cp_bytes), float(tp_bytes))


def ulysses_max_degree(heads, kv_heads=None, replicate_kv=False):
    """Largest DeepSpeed-Ulysses degree (Jacobs et al. 2023): the all-to-all hands
    each GPU whole heads, so the degree must divide ``heads``; with grouped-query
    attention it is capped by ``kv_heads`` unless K/V heads are replicated."""
    a = positive_integer("heads", heads)
    g = a if kv_heads is None else positive_integer("kv_heads", kv_heads)
    if a % g:
        raise ValueError(f"kv_heads must divide heads, got heads={a}, kv_heads={g}")
    if not isinstance(replicate_kv, (bool, np.bool_)):
        raise ValueError(f"replicate_kv must be True or False, got {replicate_kv!r}")
    return a if replicate_kv else g


def ulysses_bytes_per_layer(micro_batch, seq_len, hidden, kv_dim, degree, bytes_per_element=2):
    """Bytes one GPU sends per layer per micro-batch under DeepSpeed-Ulysses of
    degree ``u`` (Jacobs et al. 2023, sec. 3): forward, all-to-alls of Q (``h``
    wide), K and V (``d_kv`` each) and the attention output (``h``) for the
    GPU's ``s / u`` tokens, ``(u-1)/u`` of each leaving the GPU; the backward
    pass sends the same. Unlike the K/V exchange of ring attention or Llama 3's
    all-gather, this volume per GPU falls as ``1/u``."""
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("hidden", hidden)
    d = positive_integer("kv_dim", kv_dim)
    u = positive_integer("degree", degree)
    nbytes = positive("bytes_per_element", bytes_per_element)
    if s % u:
        raise ValueError(f"degree must divide seq_len, got degree={u} and seq_len={s}")
    forward = float(b) * (s / u) * (2 * h + 2 * d) * allgather_factor(u)
    return float(2 * forward * nbytes)


#: Extra compute of full recomputation: one more forward pass, 2 of the 6
#: FLOPs per parameter and token that forward and backward cost (Korthikanti
#: et al. 2022, sec. 5): a third more.
FULL_RECOMPUTE_EXTRA_COMPUTE = 2 / 6


def full_recompute_bytes_per_layer(micro_batch, seq_len, hidden, tp=1, sequence_parallel=True):
    """Activation bytes a layer keeps under full recomputation: its 16-bit
    input, ``2 s b h`` (Korthikanti et al. 2022, sec. 5), split ``tp`` ways
    when sequence parallelism shards it. The alternative to context
    parallelism for memory alone: it saves as much, at
    :data:`FULL_RECOMPUTE_EXTRA_COMPUTE` more compute, and divides no work."""
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("hidden", hidden)
    t = positive_integer("tp", tp)
    if not isinstance(sequence_parallel, (bool, np.bool_)):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    return float(2.0 * b * s * h / (t if sequence_parallel else 1))
