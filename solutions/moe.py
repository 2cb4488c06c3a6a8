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


# ---------------------------------------------------------------------------
# Expert parallelism with real routing: who sends what to whom, how long a
# layer takes, and how DeepSeek-V3 balances its experts. Used by the section on
# mixtures of experts, Lab 8 (``labs.expert_parallel``) and Assignment 6.
# ---------------------------------------------------------------------------

__all__ += [
    "expert_owner",
    "routing_counts",
    "all_to_all_rows",
    "expert_parallel_bytes_from_counts",
    "count_exchange_bytes",
    "expert_flops_per_copy",
    "all_to_all_seconds",
    "MoELayerTime",
    "expert_parallel_layer_time",
    "top_k_experts",
    "aux_loss_free_bias_update",
    "balance_with_bias",
    "expected_groups_per_token",
    "cross_group_copies_per_token",
    "group_limited_domains_per_token",
    "PublishedMoERun",
    "MOE_RUNS",
]


def expert_owner(expert, num_experts, ep):
    """The expert-parallel rank that holds ``expert``: experts are placed in
    contiguous blocks of ``num_experts / ep``, rank ``r`` holding experts
    ``r E/ep`` to ``(r+1) E/ep - 1`` (the placement of GShard and of Megatron-Core).
    Works elementwise on an integer array."""
    E = positive_integer("num_experts", num_experts)
    e = positive_integer("ep", ep)
    if E % e:
        raise ValueError(f"ep must divide num_experts, got num_experts={E} and ep={e}")
    arr = np.asarray(expert)
    if arr.size == 0:
        return arr.astype(np.int64)
    idx = nonnegative_integer("expert", arr)
    if np.any(np.asarray(idx) >= E):
        raise ValueError(f"expert must be in 0..{E - 1}, got {expert!r}")
    out = np.asarray(idx) // (E // e)
    return int(out) if np.ndim(out) == 0 else out


def routing_counts(expert_ids_by_rank, num_experts, ep):
    """The all-to-all's traffic matrix ``C`` (``ep x ep``, int64): ``C[s, d]``
    is how many token copies rank ``s`` sends to rank ``d``, given each rank's
    routing ``expert_ids_by_rank[s]`` (any shape of global expert ids, one per
    token copy: ``(tokens, top_k)``). Row ``s`` sums to rank ``s``'s copies,
    column ``d`` to what rank ``d``'s experts receive; the diagonal stays local."""
    e = positive_integer("ep", ep)
    if len(expert_ids_by_rank) != e:
        raise ValueError(f"expert_ids_by_rank must hold one routing per rank ({e}), got {len(expert_ids_by_rank)}")
    C = np.zeros((e, e), dtype=np.int64)
    for s, ids in enumerate(expert_ids_by_rank):
        owners = np.asarray(expert_owner(np.asarray(ids).reshape(-1), num_experts, e)).reshape(-1)
        C[s] = np.bincount(owners, minlength=e)
    return C


def _counts(send_counts):
    C = np.asarray(send_counts)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.size == 0:
        raise ValueError(f"send_counts must be a square (ep x ep) matrix, got shape {C.shape}")
    if not np.issubdtype(C.dtype, np.number) or not np.all(np.isfinite(C)) or np.any(C < 0):
        raise ValueError("send_counts must hold non-negative counts")
    return C.astype(np.float64)


def all_to_all_rows(send_counts, direction="dispatch"):
    """Rows (token copies) each rank sends to *other* ranks in one all-to-all
    of the MoE layer: ``direction='dispatch'`` sends row ``s`` of ``C`` (the
    rank's copies towards their experts), ``'combine'`` sends column ``s`` back
    (the experts' outputs to the tokens' ranks). The diagonal never leaves the
    GPU. An array with one entry per rank."""
    C = _counts(send_counts)
    if direction not in ("dispatch", "combine"):
        raise ValueError(f"direction must be 'dispatch' or 'combine', got {direction!r}")
    local = np.diag(C)
    return (C.sum(axis=1) if direction == "dispatch" else C.sum(axis=0)) - local


def expert_parallel_bytes_from_counts(send_counts, d_model, bytes_per_element=2, backward=True,
                                      dispatch_bytes_per_element=None):
    """Bytes each rank sends per MoE layer for the routing ``send_counts``
    (:func:`routing_counts`): the forward dispatch (row ``s`` of ``C``, less
    the diagonal) and combine (column ``s``), then, in the backward pass, the
    gradient of the outputs towards the experts (as much as the dispatch) and
    that of the inputs back (as much as the combine), ``d_model`` elements a
    copy. With every entry of ``C`` equal this is
    :func:`expert_parallel_bytes_per_layer`; with real routing the ranks differ.
    ``dispatch_bytes_per_element`` as there (DeepSeek-V3's FP8 dispatch)."""
    h = positive_integer("d_model", d_model)
    nbytes = positive("bytes_per_element", bytes_per_element)
    if not isinstance(backward, (bool, np.bool_)):
        raise ValueError(f"backward must be True or False, got {backward!r}")
    towards = nbytes if dispatch_bytes_per_element is None else positive(
        "dispatch_bytes_per_element", dispatch_bytes_per_element)
    passes = 2 if backward else 1
    return passes * h * (towards * all_to_all_rows(send_counts, "dispatch")
                         + nbytes * all_to_all_rows(send_counts, "combine"))


def count_exchange_bytes(num_experts, ep, bytes_per_count=8):
    """Bytes each rank sends to tell the others how many copies it routes to
    each of their experts: one all-to-all of ``num_experts`` counts (int64),
    ``num_experts / ep`` to each of the ``ep - 1`` other ranks. Without it a
    rank cannot size its receive buffer: the splits change with every batch."""
    E = positive_integer("num_experts", num_experts)
    e = positive_integer("ep", ep)
    if E % e:
        raise ValueError(f"ep must divide num_experts, got num_experts={E} and ep={e}")
    b = positive("bytes_per_count", bytes_per_count)
    return float((e - 1) * (E // e) * b)


def expert_flops_per_copy(d_model, ffn_hidden, backward=True):
    """FLOPs one expert spends on one token copy: a SwiGLU expert has three
    ``h x f`` matrices, ``2 x 3 h f`` FLOPs forward, and the backward pass
    twice that (Kaplan et al. 2020's 2N + 4N per token, applied to the expert's
    ``N = 3 h f``): ``18 h f`` for a training step."""
    h = positive_integer("d_model", d_model)
    f = positive_integer("ffn_hidden", ffn_hidden)
    if not isinstance(backward, (bool, np.bool_)):
        raise ValueError(f"backward must be True or False, got {backward!r}")
    return float((3 if backward else 1) * 2 * 3 * h * f)


def all_to_all_seconds(send_counts, row_bytes, bandwidth_bytes_per_s, latency_s=0.0):
    """Seconds one all-to-all of the traffic matrix ``send_counts`` (rows of
    ``row_bytes``) takes: ``(ep - 1)`` messages of latency ``latency_s`` per
    rank (one to each peer; Hockney 1994's ``alpha + n / beta``), plus the
    busiest rank's bytes over ``bandwidth_bytes_per_s``, the larger of what it
    sends and what it receives (a link carries both directions at once). A
    skewed router makes one rank receive far more than it sends."""
    C = _counts(send_counts)
    b = positive("row_bytes", row_bytes)
    bw = positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    lat = float(latency_s)
    if not np.isfinite(lat) or lat < 0:
        raise ValueError(f"latency_s must be a finite number >= 0, got {latency_s!r}")
    n = C.shape[0]
    if n == 1:
        return 0.0
    busiest = max(all_to_all_rows(C, "dispatch").max(), all_to_all_rows(C, "combine").max())
    return float((n - 1) * lat + busiest * b / bw)


class MoELayerTime(NamedTuple):
    """One MoE layer's forward and backward pass under expert parallelism:
    each rank's expert compute, the all-to-alls, and their sum for the step,
    which waits for the busiest rank."""

    compute_s: np.ndarray
    communication_s: float

    @property
    def step_s(self) -> float:
        return float(np.max(self.compute_s) + self.communication_s)

    @property
    def imbalance(self) -> float:
        """Busiest rank's compute over the mean: what the skew costs."""
        return float(np.max(self.compute_s) / np.mean(self.compute_s))


def expert_parallel_layer_time(send_counts, seconds_per_copy, row_bytes, bandwidth_bytes_per_s, latency_s=0.0,
                               fixed_s=0.0, all_to_alls=4, count_exchange_s=0.0):
    """(EP1) The time of one MoE layer's training step under expert parallelism.

    Rank ``d`` computes every copy its experts receive, column ``d`` of
    ``send_counts``, at ``seconds_per_copy`` each (on a GPU,
    :func:`expert_flops_per_copy` over the achieved FLOP/s), plus ``fixed_s``
    (router, sorting, the work that does not grow with the copies). The
    all-to-alls (four: dispatch and combine, forward and backward) each take
    :func:`all_to_all_seconds`; the count exchange that sizes them adds
    ``count_exchange_s``. Nothing overlaps (as on a CPU, where one core computes
    and communicates): the step is the busiest rank's compute plus the
    communication. With DualPipe-style overlap the communication would hide
    behind another micro-batch's compute instead (DeepSeek-V3 report, sec. 3.2.1)."""
    C = _counts(send_counts)
    per_copy = positive("seconds_per_copy", seconds_per_copy)
    fixed = float(fixed_s)
    if not np.isfinite(fixed) or fixed < 0:
        raise ValueError(f"fixed_s must be a finite number >= 0, got {fixed_s!r}")
    k = nonnegative_integer("all_to_alls", all_to_alls)
    extra = float(count_exchange_s)
    if not np.isfinite(extra) or extra < 0:
        raise ValueError(f"count_exchange_s must be a finite number >= 0, got {count_exchange_s!r}")
    received = C.sum(axis=0)
    compute = fixed + per_copy * received
    comm = k * all_to_all_seconds(C, row_bytes, bandwidth_bytes_per_s, latency_s) + (extra if C.shape[0] > 1 else 0.0)
    return MoELayerTime(compute, float(comm))


def top_k_experts(scores, top_k, bias=None):
    """The ``top_k`` experts each token (row of ``scores``, shape ``(tokens,
    E)``) is routed to, chosen on ``scores + bias``: DeepSeek-V3 adds a
    per-expert ``bias`` to the affinities for the choice only; the gate values
    still come from the scores themselves (report, sec. 2.1.2, eq. 16). Ties go
    to the lower expert. Shape ``(tokens, top_k)``, int64."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] == 0 or s.shape[1] == 0 or not np.all(np.isfinite(s)):
        raise ValueError(f"scores must be a non-empty finite (tokens, experts) array, got shape {s.shape}")
    k = positive_integer("top_k", top_k)
    if k > s.shape[1]:
        raise ValueError(f"top_k must be at most the number of experts, got {k} > {s.shape[1]}")
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64)
        if b.shape != (s.shape[1],) or not np.all(np.isfinite(b)):
            raise ValueError(f"bias must be a finite vector of one entry per expert ({s.shape[1]}), got shape {b.shape}")
        s = s + b
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def aux_loss_free_bias_update(bias, loads, speed):
    """DeepSeek-V3's auxiliary-loss-free balancing, one step: after each
    training step, lower the bias of every overloaded expert by ``speed``
    (``gamma``) and raise that of every underloaded one, measured on the whole
    batch (report, sec. 2.1.2; ``gamma`` = 0.001 for most of its training,
    sec. 4.2). An expert exactly at the mean keeps its bias. No gradient is
    involved: the language-modelling loss never sees the balancing."""
    b = np.asarray(bias, dtype=np.float64)
    arr = _loads(loads)
    if b.shape != arr.shape or not np.all(np.isfinite(b)):
        raise ValueError(f"bias must be finite with one entry per expert ({arr.size}), got shape {b.shape}")
    g = positive("speed", speed)
    return b - g * np.sign(arr - arr.mean())


def balance_with_bias(score_batches, top_k, speed, bias=None):
    """Route a sequence of batches (each ``(tokens, E)`` affinities) with
    :func:`top_k_experts`, updating the bias after each one with
    :func:`aux_loss_free_bias_update`. Returns ``(imbalances, bias)``: the
    :func:`load_imbalance` of every batch as routed, and the final bias."""
    batches = list(score_batches)
    if not batches:
        raise ValueError("score_batches must hold at least one batch")
    E = np.asarray(batches[0]).shape[-1]
    b = np.zeros(E) if bias is None else np.asarray(bias, dtype=np.float64)
    imbalances = []
    for scores in batches:
        chosen = top_k_experts(scores, top_k, b)
        loads = np.bincount(chosen.ravel(), minlength=E)
        imbalances.append(load_imbalance(loads))
        b = aux_loss_free_bias_update(b, loads, speed)
    return np.array(imbalances), b


def expected_groups_per_token(num_experts, groups, top_k):
    """How many of ``groups`` equal groups of experts (GPUs, or nodes) one
    token's ``top_k`` distinct experts touch on average, when the experts are
    drawn uniformly: ``groups (1 - C(E - E/g, k) / C(E, k))``, the chance
    that a group holds none of the ``k`` being ``C(E - E/g, k) / C(E, k)``."""
    from math import comb

    E = positive_integer("num_experts", num_experts)
    g = positive_integer("groups", groups)
    k = positive_integer("top_k", top_k)
    if E % g:
        raise ValueError(f"groups must divide num_experts, got num_experts={E} and groups={g}")
    if k > E:
        raise ValueError(f"top_k must be at most num_experts, got {k} > {E}")
    return float(g * (1 - comb(E - E // g, k) / comb(E, k)))


def cross_group_copies_per_token(num_experts, groups, top_k, group_limit=None, dedup=True):
    """Copies of one token that leave its own group (node) in the dispatch,
    with uniform routing over ``groups`` groups. Sent expert by expert, each of
    the ``k`` copies whose expert lives elsewhere crosses: ``k (g - 1) / g``.
    Sent once per destination node and forwarded inside it over NVLink, as
    DeepSeek-V3 does (report, sec. 3.2.2), a token crosses once per other node
    its experts touch, ``(g - 1) / g`` of :func:`expected_groups_per_token`;
    node-limited routing caps the nodes at ``group_limit`` (DeepSeek-V3's
    ``M`` = 4), and the expected count at ``group_limit (g - 1) / g``."""
    E = positive_integer("num_experts", num_experts)
    g = positive_integer("groups", groups)
    k = positive_integer("top_k", top_k)
    if not isinstance(dedup, (bool, np.bool_)):
        raise ValueError(f"dedup must be True or False, got {dedup!r}")
    if not dedup:
        return float(k * (g - 1) / g)
    touched = expected_groups_per_token(E, g, k)
    if group_limit is not None and positive_integer("group_limit", group_limit) < g:  # (else it limits nothing)
        touched = min(touched, group_limited_domains_per_token(g, k, g, group_limit))
    return float(touched * (g - 1) / g)


def group_limited_domains_per_token(domains, top_k, router_groups, group_limit) -> float:
    """How many of ``domains`` equal domains (nodes, or NVLink domains) one token's ``top_k``
    experts touch on average when its router first picks ``group_limit`` (M) of ``router_groups``
    (G) fixed, equal groups of experts and then its experts inside them (DeepSeek-V3's
    node-limited routing, report sec. 2.1.2: M = 4 of the 8 nodes its 64-way EP spans), the
    experts laid out in order over the domains, each picked group holding at least one of the
    token's experts, every group equally likely:

    * ``domains <= G``, each domain holding ``q = G / domains`` groups: a domain is missed when
      the M groups all lie elsewhere, ``prod_{i<M} (G - q - i) / (G - i)``; at ``domains = G``
      exactly M domains are touched;
    * ``domains > G``, each group spanning ``r = domains / G`` domains: the ``k / M`` experts of
      each picked group touch ``r (1 - (1 - 1/r)^(k/M))`` of its domains.

    Never more than ``domains`` and never more than routing without the limit would touch
    (``domains (1 - (1 - 1/domains)^k)``, fewer experts than groups)."""
    D = positive("domains", domains)
    k = positive_integer("top_k", top_k)
    G = positive_integer("router_groups", router_groups)
    M = positive_integer("group_limit", group_limit)
    if M > G:
        raise ValueError(f"group_limit must be at most router_groups, got {M} > {G}")
    free = D * (1 - (1 - 1 / D) ** k)
    if D <= G:
        q = G / D
        missed = 1.0
        for i in range(M):
            missed *= max(0.0, (G - q - i) / (G - i))
        touched = D * (1 - missed)
    else:
        r = D / G
        touched = M * r * (1 - (1 - 1 / r) ** (k / M))
    return float(min(touched, free, D))


@dataclass(frozen=True)
class PublishedMoERun:
    """How a published MoE model was trained (or served): its shape and its
    parallel layout, as reported. ``ep`` the expert-parallel degree, ``pp`` and
    ``tp`` the pipeline and tensor degrees (1 where the paper says none is
    used), ``data`` how the remaining GPUs are used, ``node_limit`` the most
    devices or nodes one token's experts may span; ``None`` where the paper
    does not say."""

    model: str
    hardware: str
    total_params: float
    active_params: float | None
    routed_experts: int | None
    top_k: int
    shared_experts: int
    ep: int | None
    pp: int | None
    tp: int | None
    data: str
    cite: str
    gpus: int | None = None
    node_limit: str | None = None
    note: str = ""

    @property
    def sparsity(self) -> float | None:
        """Routed experts per active routed expert (Kimi K2's "sparsity")."""
        return None if self.routed_experts is None else self.routed_experts / self.top_k


#: Published MoE runs, with the numbers each paper states (section and table in
#: the comments). Parameter counts as reported (rounded by the authors).
MOE_RUNS = (
    # Lepikhin et al. 2021, abstract and sec. 1: a 600B-parameter MoE Transformer
    # for translation trained on 2,048 TPU v3 cores in 4 days; top-2 gating.
    PublishedMoERun("GShard 600B", "TPU v3", 600e9, None, None, 2, 0, None, None, None,
                    "every core holds its share of the experts (SPMD sharding)", "lepikhin2021gshard", gpus=2048,
                    note="trained in 4 days"),
    # DeepSeek-V2 report (arXiv 2405.04434), sec. 3.1.2 and 3.1.3: 2 shared + 160
    # routed experts, 6 active; 16-way zero-bubble PP, 8-way EP, ZeRO-1 DP;
    # device-limited routing to at most M = 3 of D = 8 devices; 236B total, 21B active.
    PublishedMoERun("DeepSeek-V2", "H800", 236e9, 21e9, 160, 6, 2, 8, 16, 1, "ZeRO-1 data parallel",
                    "deepseek2024v2", node_limit="3 devices of 8", note="token dropping during training"),
    # DeepSeek-V3 report (arXiv 2412.19437), sec. 3.2 and 4.2: 2,048 H800 GPUs, 16-way
    # PP (DualPipe), 64-way EP over 8 nodes, ZeRO-1 DP, no TP; 1 shared + 256 routed,
    # 8 active, each token to at most 4 nodes; 671B total, 37B active; no token dropped.
    PublishedMoERun("DeepSeek-V3", "H800", 671e9, 37e9, 256, 8, 1, 64, 16, 1, "ZeRO-1 data parallel",
                    "liu2024deepseekv3", gpus=2048, node_limit="4 nodes", note="no token dropped"),
    # The same report, sec. 3.4.1 and 3.4.2: serving. Prefill on 32 GPUs (attention
    # TP4 with SP and DP8, MoE EP32); decode on 320 GPUs (attention TP4 and DP80, EP320).
    PublishedMoERun("DeepSeek-V3 (prefill)", "H800", 671e9, 37e9, 256, 8, 1, 32, 1, 4,
                    "attention: TP4 x DP8", "liu2024deepseekv3", gpus=32, note="32 redundant experts"),
    PublishedMoERun("DeepSeek-V3 (decode)", "H800", 671e9, 37e9, 256, 8, 1, 320, 1, 4,
                    "attention: TP4 x DP80", "liu2024deepseekv3", gpus=320, note="one expert per GPU"),
    # Kimi K2 report (arXiv 2507.20534), sec. 2.3 and 2.4.2: 1.04T total, 32B active,
    # 384 experts with 8 active (sparsity 48), 1 shared; 16-way PP with virtual stages,
    # 16-way EP, ZeRO-1 DP, on any multiple of 32 nodes of 8 H800s; EP kept at 16,
    # "the smallest feasible", so that the all-to-all hides behind 1F1B's compute.
    PublishedMoERun("Kimi K2", "H800", 1.04e12, 32e9, 384, 8, 1, 16, 16, 1, "ZeRO-1 data parallel",
                    "kimi2025k2", note="interleaved 1F1B, not DualPipe"),
)

#: Kimi K2's sparsity scaling law (report, sec. 2.3): at equal validation loss
#: (1.5), sparsity 48 needs this many times fewer FLOPs than sparsity 8, 16, 32.
KIMI_K2_SPARSITY_FLOP_SAVINGS = {8: 1.69, 16: 1.39, 32: 1.15, "loss": 1.5, "cite": "kimi2025k2"}
__all__ += ["KIMI_K2_SPARSITY_FLOP_SAVINGS"]

#: DeepSeek-V3's training, as its report states it: the cluster's links and the dispatch that
#: uses them (sec. 3.2.2: NVLink 160 GB/s, "roughly 3.2 times" IB's 50 GB/s; each token to at
#: most 4 nodes; 20 SMs suffice for communication), its balancing (sec. 2.1.2 and 4.2: bias
#: update speed 0.001 for the first 14.3T tokens, 0 for the last 500B; a sequence-wise balance
#: loss of weight 0.0001) and its 14.8T training tokens (abstract).
DEEPSEEK_V3_TRAINING = {
    "nvlink_bytes_per_s": 160e9, "ib_bytes_per_s": 50e9, "gpus_per_node": 8, "node_limit": 4,
    "communication_sms": 20, "bias_update_speed": 0.001, "bias_update_tokens": 14.3e12,
    "bias_frozen_tokens": 500e9, "sequence_balance_alpha": 1e-4, "training_tokens": 14.8e12,
    "cite": "liu2024deepseekv3",
}

#: Switch Transformer (Fedus et al. 2022): the auxiliary loss's coefficient, alpha = 10^-2
#: (sec. 2.2), and Table 1's Switch-Base (128 experts) training speed, examples per second, at
#: capacity factors 1.0, 1.25 and 2.0; with the balance loss, dropped tokens were "typically
#: < 1%" (sec. 2.2).
SWITCH_TRANSFORMER = {
    "aux_loss_alpha": 1e-2, "experts": 128, "examples_per_s": {1.0: 1000, 1.25: 910, 2.0: 860},
    "dropped_typically_below": 0.01, "cite": "fedus2022switch",
}

#: Kimi K2's 15.5T pre-training tokens (report, sec. 2.2).
KIMI_K2_TRAINING_TOKENS = 15.5e12
__all__ += ["DEEPSEEK_V3_TRAINING", "SWITCH_TRANSFORMER", "KIMI_K2_TRAINING_TOKENS"]
