"""Mixture of experts in the planner: parameter counts of the published MoE shapes, the
layout rules of expert parallelism, and what EP costs per layer (the bytes and the time of
its all-to-alls, the experts' matrix products, the model state per GPU).

The formulas of the MoE section live in :mod:`solutions.moe` and are used from there; this
module adds what a step-time model of a whole run needs on top of them.

**Layout.** Megatron-Core's "parallel folding" (Liu et al. 2025, MoE Parallel Folding): the
attention layers use TP x CP x DP x PP; the expert layers fold the same ranks of one pipeline
stage into expert tensor parallelism (ETP) x EP x expert data parallelism (EDP), so
``ETP x EP x EDP = TP x CP x DP``. EP is carved out of those ranks, not multiplied onto them:
DeepSeek-V3's 2,048 GPUs are PP16 x DP128 with EP64 inside the 128 (report sec. 3.2).
Consecutive ranks form an EP group, so its members share a scale-up domain as far as it goes.

**Per MoE layer and micro-batch**, on one GPU that holds ``T`` tokens after the sequence-
parallel split: the router (``T x h x E``), the experts' products on ``T k`` token copies
(``k`` the top-k), spread over the ``E / EP`` local experts, ``T k / (E / EP)`` rows each (times
a load-imbalance factor, 1 when routing is balanced, as NVIDIA's benchmarks force it), the
shared experts as a dense MLP, and four all-to-alls (dispatch and combine, forward and
backward) of ``T k h`` elements, of which ``(EP-1)/EP`` leave the GPU
(:func:`solutions.moe.expert_parallel_bytes_per_layer`).

References: liu2024deepseekv3, liu2025moefolding, lepikhin2021gshard, fedus2022switch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import moe
from ._validate import positive, positive_integer

__all__ = ["MoEConfig", "Counts", "moe_layer_count", "transformer_params", "check_expert_layout",
           "expert_gemms", "all_to_all_bytes", "busiest", "DISPATCHERS", "EXPERT_KERNELS", "dispatch_split", "state_shards"]

#: How token copies reach the experts: ``'alltoall'``, one copy per chosen expert on another
#: GPU (Megatron-Core's default dispatcher); ``'deepep'``, one copy per remote scale-up
#: domain over the network, fanned out over NVLink on arrival (DeepSeek's DeepEP), which
#: DeepSeek-V3 pairs with routing limited to 4 nodes (report sec. 3.2.2); ``'hybridep'``,
#: NVIDIA's Hybrid-EP (Megatron-Core's flex dispatcher, the one Megatron-Bridge's recipes
#: choose on NVL72 racks), which forwards the same way and is counted as ``'deepep'``.
DISPATCHERS = ("alltoall", "deepep", "hybridep")
#: How the routed experts' MLPs run: ``'grouped'``, a grouped product per projection with
#: work per local expert outside it (Megatron-Core's grouped GEMM, launched from the host,
#: the fitted cost per local expert); ``'fused'``, grouped products that launch once over
#: every local expert with the activation in their epilogue, replayed in a full-iteration
#: CUDA graph (no per-expert cost, no activation pass of its own, nor passes for a clamped
#: GLU or biases: :func:`solutions.layer_time.eager_expert_bytes`).
EXPERT_KERNELS = ("grouped", "fused")


@dataclass(frozen=True)
class MoEConfig:
    """The experts of a MoE transformer: ``experts`` routed experts per MoE layer of width
    ``expert_ffn`` (SwiGLU), ``top_k`` used per token, ``shared_experts`` always used, the
    first ``dense_layers`` layers with a plain MLP and, after them, one MoE layer every
    ``layer_freq`` layers (Llama 4 Maverick alternates: 2). ``imbalance`` is the busiest
    GPU's share of the expert work over the mean (1: balanced), capped by what the layout's
    EP degree allows (:func:`busiest`). ``expert_bias``: the
    experts' products carry biases; ``node_limit``: a token's experts lie in at most this
    many of ``router_groups`` fixed groups of experts (DeepSeek-V3: 4 of 8), or, without
    groups, in at most this many of the EP group's domains; ``clamped_glu``: their GLU clamps both halves first
    (gpt-oss); Megatron-Core's grouped experts run both as passes of their own
    (:func:`solutions.layer_time.layer_terms`)."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0
    layer_freq: int = 1
    imbalance: float = 1.0
    node_limit: Optional[int] = None
    router_groups: Optional[int] = None
    expert_bias: bool = False
    clamped_glu: bool = False

    def __post_init__(self):
        positive_integer("experts", self.experts)
        positive_integer("top_k", self.top_k)
        positive_integer("expert_ffn", self.expert_ffn)
        positive_integer("layer_freq", self.layer_freq)
        if isinstance(self.shared_experts, bool) or not isinstance(self.shared_experts, int) or self.shared_experts < 0:
            raise ValueError(f"shared_experts must be a non-negative integer, got {self.shared_experts!r}")
        if isinstance(self.dense_layers, bool) or not isinstance(self.dense_layers, int) or self.dense_layers < 0:
            raise ValueError(f"dense_layers must be a non-negative integer, got {self.dense_layers!r}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k must be at most the number of experts, got top_k={self.top_k} > "
                             f"experts={self.experts}")
        if self.router_groups is not None:
            positive_integer("router_groups", self.router_groups)
            if self.experts % self.router_groups:
                raise ValueError(f"experts must split evenly into the router's {self.router_groups} groups (its "
                                 f"node-limited routing picks {self.node_limit} of them), got {self.experts} experts")
            if self.node_limit is None or self.node_limit > self.router_groups:
                raise ValueError(f"router_groups needs a node_limit of at most {self.router_groups} (the groups a "
                                 f"token's experts may lie in), got {self.node_limit!r}")
        if not positive("imbalance", self.imbalance) >= 1.0:
            raise ValueError(f"imbalance must be at least 1 (the busiest GPU over the mean), got {self.imbalance!r}")
        if self.imbalance > self.experts / self.top_k:
            raise ValueError(f"imbalance must be at most experts / top_k = {self.experts / self.top_k:g} (the most a GPU can "
                             f"receive: every token choosing its experts), got {self.imbalance!r}")


def busiest(cfg: MoEConfig, ep: int) -> float:
    """The imbalance the busiest GPU of an expert-parallel group of ``ep`` ranks can have: a
    token's ``k`` copies go to ``k`` different experts, so at most ``min(k, E / ep)`` of them
    land on one GPU against ``k / ep`` on average, and ``cfg.imbalance`` is capped at
    ``min(k, E / ep) ep / k``: 1 at EP 1, where every GPU runs its own tokens' copies whatever
    the routing, ``E / k`` at one expert per GPU."""
    ep = positive_integer("ep", ep)
    return min(cfg.imbalance, min(cfg.top_k, cfg.experts / ep) * ep / cfg.top_k)


def moe_layer_count(layers: int, cfg: MoEConfig) -> int:
    """MoE layers among ``layers``: after the first ``dense_layers``, one every ``layer_freq``
    (the last of each group of ``layer_freq``, as Llama 4 interleaves them)."""
    rest = max(0, layers - cfg.dense_layers)
    return rest // cfg.layer_freq


@dataclass(frozen=True)
class Counts:
    """Parameters stored (``total``), used per token (``active``), of the routed experts
    (``expert``), and of the output layer (``output``). ``active`` leaves out the input
    embedding, a lookup (as the model cards count: gpt-oss-120b's 5.1B)."""

    total: float
    active: float
    expert: float
    output: float

    @property
    def dense(self) -> float:
        return self.total - self.expert


def transformer_params(layers, hidden, heads, kv_heads, head_dim, ffn_hidden, vocab, mlp="swiglu",
                       moe_cfg: Optional[MoEConfig] = None, mla: Optional[dict] = None,
                       tied_embeddings=False) -> Counts:
    """Parameters of a decoder-only transformer, dense or MoE, counted from its shape:
    attention (grouped-query: ``h (a + 2g) d + a d h``; multi-head latent attention from
    ``mla = {q_lora, kv_lora, qk_rope, qk_nope, v_head}`` as DeepSeek-V2/V3 define it), MLPs
    (SwiGLU ``3 h f``, GeLU ``2 h f``), routers ``h E``, two norms per layer, embeddings and
    output layer (one matrix if tied). The routed experts a token skips are not active.
    DeepSeek-V3's shape gives 671B stored and 37B active (report, Table 1 and sec. 4.2)."""
    L, h, a, g = (positive_integer(n, v) for n, v in (("layers", layers), ("hidden", hidden), ("heads", heads),
                                                      ("kv_heads", kv_heads)))
    d = positive_integer("head_dim", head_dim)
    f = positive_integer("ffn_hidden", ffn_hidden)
    V = positive_integer("vocab", vocab)
    per_mlp = (3 if mlp == "swiglu" else 2) * h
    if mla:
        q = mla.get("q_lora")
        qk = mla["qk_nope"] + mla["qk_rope"]
        attn = (h * q + q + q * a * qk if q else h * a * qk) \
            + h * (mla["kv_lora"] + mla["qk_rope"]) + mla["kv_lora"] \
            + mla["kv_lora"] * a * (mla["qk_nope"] + mla["v_head"]) + a * mla["v_head"] * h
    else:
        attn = h * (a + 2 * g) * d + a * d * h
    norms = 2 * h
    output = V * h
    embed = 0 if tied_embeddings else V * h
    if moe_cfg is None:
        total = L * (attn + norms + per_mlp * f) + embed + output + h
        return Counts(float(total), float(total), 0.0, float(output))
    n_moe = moe_layer_count(L, moe_cfg)
    n_dense = L - n_moe
    one_expert = per_mlp * moe_cfg.expert_ffn
    expert = n_moe * moe_cfg.experts * one_expert
    shared = n_moe * moe_cfg.shared_experts * one_expert
    router = n_moe * h * moe_cfg.experts
    total = L * (attn + norms) + n_dense * per_mlp * f + expert + shared + router + embed + output + h
    # active: what multiplies each token (the input embedding is a lookup, not a product)
    active = total - n_moe * (moe_cfg.experts - moe_cfg.top_k) * one_expert - embed
    return Counts(float(total), float(active), float(expert), float(output))


def check_expert_layout(cfg: MoEConfig, ep: int, etp: int, tp: int, cp: int, dp: int) -> None:
    """``ValueError`` (one line) unless the experts divide over EP and EP x ETP folds into the
    TP x CP x DP ranks of a pipeline stage (Megatron-Core's folding)."""
    for name, v in (("ep", ep), ("etp", etp), ("tp", tp), ("cp", cp), ("dp", dp)):
        positive_integer(name, v)
    if cfg.experts % ep:
        raise ValueError(f"ep must divide the number of experts: {cfg.experts} experts are not divisible by ep={ep}")
    if (tp * cp * dp) % (ep * etp):
        raise ValueError(f"ep x etp must divide tp x cp x dp (expert parallelism is carved out of the ranks "
                         f"of a pipeline stage): ep={ep} x etp={etp} against tp={tp} x cp={cp} x dp={dp}")


def expert_gemms(tokens, hidden, cfg: MoEConfig, ep: int, etp: int = 1):
    """The forward matrix products one GPU runs for the routed experts of one MoE layer, as
    ``(M, K, N, count)``: its ``E / EP`` experts receive ``tokens x k x imbalance`` token
    copies between them (the imbalance as the EP degree caps it, :func:`busiest`), each expert's up-projection (gate and up, ``2 f / ETP`` wide) and
    down-projection."""
    local = cfg.experts // ep
    rows = tokens * cfg.top_k * busiest(cfg, ep) / local
    f = cfg.expert_ffn / etp
    return [(rows, hidden, 2 * f, local), (rows, f, hidden, local)]


def all_to_all_bytes(tokens, hidden, cfg: MoEConfig, ep: int, dispatch_bytes=2.0, combine_bytes=2.0):
    """Bytes one GPU sends per MoE layer and micro-batch (forward and backward) for its
    ``tokens``: :func:`solutions.moe.expert_parallel_bytes_per_layer`, times the imbalance
    (as the EP degree caps it, :func:`busiest`)."""
    if ep == 1:
        return 0.0
    per = moe.expert_parallel_bytes_per_layer(tokens, hidden, cfg.top_k, ep, bytes_per_element=combine_bytes,
                                              dispatch_bytes_per_element=dispatch_bytes)
    return float(per) * busiest(cfg, ep)


def dispatch_split(tokens, hidden, cfg: MoEConfig, ep: int, local: int, dispatch_bytes=2.0, combine_bytes=2.0,
                   dispatcher="deepep"):
    """``(bytes over NVLink, bytes over the network)`` one GPU sends for its ``tokens`` per MoE
    layer and micro-batch (dispatch and combine, forward and backward), when ``local`` of the
    ``ep`` ranks of its EP group share its scale-up domain and each token's ``k`` experts are
    spread uniformly. ``'alltoall'`` sends every copy bound for another GPU, over the network
    for the ``ep - local`` ranks beyond the domain. ``'deepep'`` (and ``'hybridep'``) sends a token once to each
    remote domain holding one of its experts: ``(D - 1)(1 - (1 - 1/D)^k)`` domains on average
    for ``D = ep / local`` domains (at most ``node_limit`` when routing is node-limited), and
    the copies for its other experts go over NVLink, on either side. With node-limited
    routing the domains a token touches are :func:`solutions.moe.group_limited_domains_per_token`
    (the router's groups, as they fall on this EP group's domains), or at most ``node_limit``
    where the limit is on the domains themselves; a ``(D - 1) / D`` share of them are remote.
    Times the imbalance (as the EP degree caps it, :func:`busiest`)."""
    ep = positive_integer("ep", ep)
    if ep == 1:
        return 0.0, 0.0
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"ep_dispatch must be one of {list(DISPATCHERS)}, got {dispatcher!r}")
    local = max(1, min(ep, local))
    k = cfg.top_k
    per_copy = hidden * (dispatch_bytes + combine_bytes) * 2 * tokens * busiest(cfg, ep)  # forward and backward
    remote = k * (ep - local) / ep
    near = k * (local - 1) / ep
    if dispatcher == "alltoall" or local == ep:
        return near * per_copy, remote * per_copy
    D = ep / local
    domains = (D - 1) * (1 - (1 - 1 / D) ** k)
    if cfg.node_limit:
        touched = (moe.group_limited_domains_per_token(D, k, cfg.router_groups, cfg.node_limit)
                   if cfg.router_groups else min(cfg.node_limit, D * (1 - (1 - 1 / D) ** k)))
        domains = min(domains, touched * (D - 1) / D)
    return (near + max(0.0, remote - domains)) * per_copy, domains * per_copy


def state_shards(dense_params, expert_params, tp, pp, cp, dp, ep, etp):
    """``((dense shard, its ZeRO degree), (expert shard, its ZeRO degree))``: the dense part
    split over TP x PP and sharded by ZeRO over the DP x CP ranks that hold it; the routed
    experts split over PP x EP x ETP and sharded over the expert-data-parallel ranks,
    ``TP x CP x DP / (EP x ETP)``."""
    dense = (dense_params / (tp * pp), dp * cp)
    edp = (tp * cp * dp) // (ep * etp)
    expert = (expert_params / (pp * ep * etp), edp)
    return dense, expert
