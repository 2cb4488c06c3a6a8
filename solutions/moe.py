"""Mixture of experts and expert parallelism: parameters, all-to-all traffic,
memory per GPU, and load balance.

A mixture-of-experts (MoE) layer replaces the one MLP of a transformer block
with ``E`` expert MLPs and a router that sends each token to ``k`` of them
(Shazeer et al. 2017; GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022).
Expert parallelism places the experts on different GPUs; an **all-to-all**
sends each token's hidden vector to the GPUs of its experts (dispatch) and
brings the results back (combine), in the forward pass and again in the
backward pass.

References: shazeer2017outrageously, lepikhin2021gshard, fedus2022switch,
jiang2024mixtral, liu2024deepseekv3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._validate import nonnegative_integer, positive, positive_integer
from .communication import allgather_factor
from .memory import ByteConvention, get_convention, zero_memory_per_gpu

__all__ = [
    "MoEParams",
    "moe_parameter_counts",
    "expert_parallel_bytes_per_layer",
    "expert_capacity",
    "expert_loads",
    "load_imbalance",
    "dropped_fraction",
    "switch_balance_loss",
    "moe_memory_per_gpu",
    "MoEMemory",
    "moe_memory_breakdown",
    "with_parameter_copies",
]


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


@dataclass(frozen=True)
class MoEParams:
    """Parameter counts of a MoE transformer: ``total`` stored, ``active`` used
    per token, and the ``expert`` part (all routed experts) of ``total``."""

    total: float
    active: float
    expert: float

    @property
    def dense(self) -> float:
        """Parameters every token uses: attention, embeddings, norms, router."""
        return self.total - self.expert


def moe_parameter_counts(layers, d_model, ffn_hidden, num_experts, top_k, heads, kv_heads, vocab,
                         tied_embeddings=False):
    """Parameters of a decoder-only MoE transformer with SwiGLU experts and
    grouped-query attention, every layer a MoE layer (as in Mixtral).

    Per layer: attention ``2 h^2 + 2 h d_kv`` (Q and output, K and V with
    ``d_kv = h kv_heads / heads``), ``E`` experts of ``3 h f`` each, a router of
    ``h E`` and two norms of ``h``. Embeddings ``V h`` (twice if untied).
    Active per token: everything but the ``E - k`` experts a token skips.
    Mixtral 8x7B's shape gives its reported 46.7B total and 12.9B active.
    """
    L = positive_integer("layers", layers)
    h = positive_integer("d_model", d_model)
    f = positive_integer("ffn_hidden", ffn_hidden)
    E = positive_integer("num_experts", num_experts)
    k = positive_integer("top_k", top_k)
    a = positive_integer("heads", heads)
    g = positive_integer("kv_heads", kv_heads)
    V = positive_integer("vocab", vocab)
    if k > E:
        raise ValueError(f"top_k must be at most num_experts, got top_k={k} and num_experts={E}")
    if a % g or h % a:
        raise ValueError(f"heads must divide d_model and kv_heads must divide heads, got "
                         f"d_model={h}, heads={a}, kv_heads={g}")
    d_kv = h // a * g
    attention = 2 * h * h + 2 * h * d_kv
    one_expert = 3 * h * f
    router = h * E
    norms = 2 * h
    embeddings = V * h * (1 if tied_embeddings else 2)
    expert = float(L * E * one_expert)
    total = L * (attention + router + norms) + expert + embeddings + h  # + final norm
    active = total - L * (E - k) * one_expert
    return MoEParams(float(total), float(active), expert)


def expert_parallel_bytes_per_layer(tokens, d_model, top_k, ep, bytes_per_element=2, backward=True,
                                    dispatch_bytes_per_element=None):
    """Bytes one GPU sends per MoE layer for expert parallelism of degree ``ep``.

    Each of the GPU's ``tokens`` goes to ``top_k`` experts; with uniform
    routing a share ``(ep-1)/ep`` of those copies lives on other GPUs. The
    forward pass has two all-to-alls of ``tokens * k * h`` elements, dispatch
    (towards the experts) and combine (back); the backward pass two more, one
    each way: the gradient of the experts' outputs goes towards the experts,
    the gradient of their inputs comes back.

    ``dispatch_bytes_per_element`` (default ``bytes_per_element``) sets the
    element size of the two transfers towards the experts: DeepSeek-V3 sends
    them in FP8 (1 byte) and keeps both combines in BF16 (report sec. 3.3.3),
    three quarters of the 16-bit volume. Compare tensor parallelism's
    ``8 b s h (t-1)/t`` elements per layer (four all-reduces): in 16 bits the
    ratio is ``k / 2``.
    """
    n = positive("tokens", tokens)
    h = positive_integer("d_model", d_model)
    k = positive_integer("top_k", top_k)
    e = positive_integer("ep", ep)
    nbytes = positive("bytes_per_element", bytes_per_element)
    if not isinstance(backward, (bool, np.bool_)):
        raise ValueError(f"backward must be True or False, got {backward!r}")
    dispatch = nbytes if dispatch_bytes_per_element is None else positive(
        "dispatch_bytes_per_element", dispatch_bytes_per_element)
    per_pass = dispatch + nbytes  # one transfer each way
    passes = 2 if backward else 1
    return _out(passes * per_pass * np.asarray(n) * k * h * allgather_factor(e))


def expert_capacity(tokens, num_experts, top_k=1, capacity_factor=1.0):
    """Token slots per expert (Switch Transformer, Fedus et al. 2022, sec. 2.2):
    ``capacity_factor * tokens * top_k / num_experts``, rounded up. Tokens
    routed to a full expert are dropped (passed on by the residual connection)."""
    n = positive("tokens", tokens)
    E = positive_integer("num_experts", num_experts)
    k = positive_integer("top_k", top_k)
    cf = positive("capacity_factor", capacity_factor)
    return _out(np.ceil(np.asarray(cf) * n * k / E - 1e-9))


def expert_loads(router_probs, top_k=1):
    """Tokens each expert receives when every token (row of ``router_probs``,
    shape ``(tokens, E)``) goes to its ``top_k`` most probable experts."""
    probs = np.asarray(router_probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[0] == 0 or probs.shape[1] == 0:
        raise ValueError(f"router_probs must be a non-empty (tokens, experts) array, got shape {probs.shape}")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0):
        raise ValueError("router_probs must be finite and non-negative")
    k = positive_integer("top_k", top_k)
    if k > probs.shape[1]:
        raise ValueError(f"top_k must be at most the number of experts, got {k} > {probs.shape[1]}")
    chosen = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return np.bincount(chosen.ravel(), minlength=probs.shape[1])


def _loads(loads):
    arr = np.asarray(loads, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() == 0:
        raise ValueError(f"loads must be a non-empty 1-D array of non-negative counts, not all zero, got {loads!r}")
    return arr


def load_imbalance(loads):
    """Busiest expert's load over the mean load (1 = perfectly balanced). Under
    expert parallelism every GPU waits for the busiest, so without dropping
    tokens the MoE layer takes this many times its balanced time."""
    arr = _loads(loads)
    return float(arr.max() / arr.mean())


def dropped_fraction(loads, capacity):
    """Share of token-to-expert assignments beyond each expert's ``capacity``."""
    arr = _loads(loads)
    cap = nonnegative_integer("capacity", capacity)
    return float(np.clip(arr - cap, 0, None).sum() / arr.sum())


def switch_balance_loss(token_fractions, prob_fractions):
    """Switch Transformer's auxiliary load-balancing loss (Fedus et al. 2022,
    eq. 4, without the coefficient alpha): ``E * sum_i f_i P_i``, where ``f_i``
    is the share of tokens routed to expert ``i`` and ``P_i`` its mean router
    probability. It is 1 when both are uniform and grows as routing
    concentrates on few experts."""
    f = np.asarray(token_fractions, dtype=np.float64)
    p = np.asarray(prob_fractions, dtype=np.float64)
    for name, arr in (("token_fractions", f), ("prob_fractions", p)):
        if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{name} must be a non-empty 1-D array of non-negative shares")
        if not np.isclose(arr.sum(), 1.0, atol=1e-6):
            raise ValueError(f"{name} must sum to 1, got {arr.sum():.6g}")
    if f.shape != p.shape:
        raise ValueError(f"token_fractions and prob_fractions must have the same length, got {f.size} and {p.size}")
    return float(f.size * np.dot(f, p))


class MoEMemory(NamedTuple):
    """Model-state bytes per GPU of a MoE model, dense part and experts."""

    dense: float
    experts: float

    @property
    def total(self) -> float:
        return self.dense + self.experts

    @property
    def expert_share(self) -> float:
        """Share of the state that the GPU's experts hold."""
        return self.experts / self.total


def with_parameter_copies(convention, copies):
    """The byte convention of a schedule that keeps ``copies`` copies of the
    weights each GPU holds, with gradients and optimizer state unchanged.
    DualPipe (DeepSeek-V3 report, sec. 3.2.1, Table 2) keeps two copies of the
    model parameters: the course reads that as a second copy of the weights
    (here the fp32 master weights), not of gradients or optimizer state, which
    is the smallest state that fits the report's words."""
    conv = get_convention(convention)
    n = positive_integer("copies", copies)
    if n == 1:
        return conv
    return ByteConvention(f"{conv.name}_x{n}_weights", conv.weights * n, conv.grads, conv.optimizer,
                          f"{conv.description}; weights kept {n} times", conv.cite)


def moe_memory_breakdown(dense_params, expert_params, ep, dp, tp=1, pp=1, zero_stage=0,
                         convention="zero_16"):
    """:func:`moe_memory_per_gpu`, split into the dense part and the experts."""
    dense = positive("dense_params", dense_params)
    expert = positive("expert_params", expert_params)
    e = positive_integer("ep", ep)
    d = positive_integer("dp", dp)
    t = positive_integer("tp", tp)
    p = positive_integer("pp", pp)
    if d % e:
        raise ValueError(f"ep must divide dp, got ep={e} and dp={d}")
    dense_bytes = zero_memory_per_gpu(np.asarray(dense) / (t * p), zero_stage, d, convention)
    expert_bytes = zero_memory_per_gpu(np.asarray(expert) / (e * p), zero_stage, d // e, convention)
    return MoEMemory(_out(dense_bytes), _out(expert_bytes))


def moe_memory_per_gpu(dense_params, expert_params, ep, dp, tp=1, pp=1, zero_stage=0, convention="zero_16"):
    """Model-state bytes per GPU for a MoE model under TP x PP x DP with
    expert parallelism carved out of the data-parallel ranks.

    Dense parameters (attention, embeddings) are split ``tp * pp`` ways and
    ZeRO-sharded over ``dp``. Expert parameters are split ``pp`` ways and
    across ``ep`` GPUs, each expert whole on one GPU (no TP inside experts, as
    in DeepSeek-V3), and ZeRO-sharded over the remaining ``dp / ep`` replicas
    of each expert. ``ep`` must divide ``dp``.
    """
    parts = moe_memory_breakdown(dense_params, expert_params, ep, dp, tp, pp, zero_stage, convention)
    return parts.total
