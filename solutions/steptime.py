"""A step-time model for training a transformer (dense or mixture of experts) on a GPU
cluster: compute from the shapes each GPU runs, communication per parallel axis with what
hides behind compute and what does not, and the pipeline bubble; from them tokens/s, MFU,
hardware-FLOPs utilisation, memory and days.

The model, equation by equation (one GPU of the busiest pipeline stage; ``b`` sequences of
``s`` tokens per micro-batch, ``m`` micro-batches per step, layout ``tp x cp x pp x dp``
with ``ep`` (and ``etp``) folded into ``tp x cp x dp``, ``v`` model chunks per stage):

(S1) **Model FLOPs per token** ``6 N_active + 6 L s a (d_qk + d_v)`` (Kaplan et al. 2020
     sec. 2.1; Chowdhery et al. 2022 App. B): PaLM's count, which charges the attention of
     every key (no causal discount) and, for a mixture of experts, the parameters a token
     uses. With ``d_qk = d_v = d_head`` it is ``6 N + 12 L s a d_head``; the attention width
     ``a d_head`` is not ``d_model`` for every model (PaLM: 48 x 256 against 18,432).
(S2) **Hardware FLOPs per token** add what recomputation redoes (Korthikanti et al. 2022;
     Narayanan et al. 2021 eq. 3): selective, the attention core ``4 L s a d``; full, one
     forward of every layer; or the products of the modules a recipe names (Megatron-Core's
     ``recompute_modules``, :data:`solutions.layer_time.RECOMPUTE_MODULES`). MFU uses (S1),
     HFU (S2), both against the dense BF16 peak (as torchtitan and NVIDIA report), and MFU
     also against the peak of the chosen precision.
(S3) **Compute** of one micro-batch: :mod:`solutions.layer_time`, per layer, the matrix
     products with the shapes after the TP split (roofline with the GPU's measured matmul
     ceiling, :mod:`solutions.hardware`), FlashAttention's causal core, and elementwise
     bytes; ``ceil(L / pp)`` layers and the output layer. Three calibrated constants (the
     products' exposed memory traffic, the elementwise bytes' multiplier, attention's share
     of the ceiling) and the network's efficiency are fitted on the course's table of
     published runs only (:mod:`solutions.calibration`): :data:`CALIBRATION`.
(S4) **Collectives**: :mod:`solutions.network` (which link, NICs shared per node, NCCL's
     ring latency and bus bandwidth). Axes are laid out as Megatron-Core does, TP innermost,
     then CP, DP (with EP folded in), PP outermost.
(S5) **Tensor parallelism** with sequence parallelism: an all-gather before and a
     reduce-scatter after each of the two blocks, forward and backward, ``8 b s h (t-1)/t``
     elements per layer (Korthikanti et al. 2022; the same volume as Megatron's four
     all-reduces), repeated by a recomputed forward. Overlapped (``'tp'`` in ``overlap``),
     it hides behind the layer's matrix products (Megatron-Core's ``--tp-comm-overlap``);
     what exceeds them is exposed.
(S6) **Context parallelism**: K and V gathered forward, their gradients reduce-scattered
     backward (:func:`solutions.context.context_parallel_bytes_per_layer`), behind the
     attention core of the same layer.
(S7) **Pipeline**: ``b s h / (cp tp)`` activations forward and as many gradients backward
     per micro-batch and stage boundary (Narayanan et al. sec. 4.1); the fill and the drain
     cross ``2 v (p - 1)`` boundaries on the critical path; the steady-state sends hide
     behind compute when overlapped.
(S8) **Data parallelism / ZeRO** over the ``dp x cp`` ranks that share the weights:
     stages 0-2 reduce the gradients once per step (stage 2 every micro-batch), stages 1-2
     gather the updated weights once; stage 3 (FSDP) gathers the weights for each
     micro-batch's forward and again for its backward and reduce-scatters every
     micro-batch's gradients: FSDP2's defaults (``reshard_after_forward=True``, gradient
     sync every micro-batch), which the planner assumes (``defer_grad_sync`` reduces once).
     Overlapped, the gradient reduction hides behind the last micro-batch's backward, the
     weight gather behind the next step's first forward (``--overlap-grad-reduce``,
     ``--overlap-param-gather``), ZeRO-3's per-micro-batch traffic behind that micro-batch.
     A mixture of experts reduces its experts' gradients over the expert-data-parallel
     ranks instead (:func:`solutions.moe_step.state_shards`).
(S9) **Expert parallelism**: four all-to-alls per MoE layer and micro-batch (dispatch and
     combine, forward and backward) of the token copies that leave the GPU, over NVLink
     inside a scale-up domain and the NICs beyond it, both at once (:func:`solutions.network.all_to_all_time`),
     scaled by the load imbalance; exposed unless ``'ep'`` is in ``overlap`` (DualPipe-style
     overlap hides it behind the layer's compute). With the experts' tensor parallelism
     (ETP > 1), each ETP group all-gathers the copies its members received before the experts
     and reduce-scatters the experts' outputs after them (Megatron-Core's alltoall dispatcher),
     and the backward pass mirrors both: four ring collectives of the ``ETP`` members' copies
     per MoE layer and micro-batch, counted on the same axis.
(S10) **Bubble** of the schedule (:func:`pipeline_bubble_time`): GPipe and 1F1B
     ``(p - 1) / v`` micro-batch times (Narayanan et al. sec. 2.2), ZB-H1 and ZB-H2 per Qi
     et al. (2024, Table 2).
(S11) **Step** = ``m x`` compute + bubble + exposed TP + CP + PP + DP + EP; tokens/s =
     ``global batch x s / step``; days = tokens / (tokens/s) / 86,400.
(S12) **Small models on CPUs** (the labs, :func:`cpu_cluster`): compute at the measured
     matmul rate times ``h / (h + w0)``, a fixed cost ``c`` per layer and micro-batch, a
     latency ``alpha`` per message (Hockney 1994) and, for the collectives gloo implements
     its own way, their own measured constants (:class:`CPUCalibration`); nothing overlaps,
     since a rank's communication runs on the core that computes.

What is hidden and what is exposed is reported apart per axis (``StepTime.hidden_s`` and
``breakdown_s``). :data:`DEFAULT_OVERLAP` is what the production stacks' recommended
settings hide (Megatron-Core's ``--tp-comm-overlap``, ``--overlap-grad-reduce``,
``--overlap-param-gather`` and overlapped pipeline sends; context parallelism's ring
overlaps by construction); expert-parallel all-to-alls are exposed unless asked for.
The optimizer step, stragglers and failures are not modelled.

References: kaplan2020scaling, chowdhery2022palm, korthikanti2022reducing,
narayanan2021megatron, rajbhandari2020zero, zhao2023fsdp, qi2023zerobubble,
dao2022flashattention, liu2023ring, dubey2024llama3, liu2024deepseekv3, hockney1994communication.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Optional

import numpy as np

from . import communication, context, efficiency, facts, hardware, layer_time, memory, moe_step, network, precision
from ._validate import nonnegative_integer, one_of, positive, positive_integer
from .layer_time import Terms, coefficients, layer_terms, output_terms

__all__ = [
    "RECOMPUTE", "check_recompute", "check_recompute_for", "SCHEDULES", "ATTENTION", "ATTENTION_PRECISIONS", "check_attention_precision", "OVERLAP_AXES", "DEFAULT_OVERLAP", "GPUS_PER_SERVER",
    "Shape", "shape_of", "gpt_params", "Layout", "Cluster", "Calibration", "CPUCalibration", "CALIBRATION",
    "model_flops_per_token", "hardware_flops_per_token", "pipeline_bubble_time", "activation_bytes",
    "offload_bytes", "state_bytes", "state_breakdown", "memory_bytes", "StepTime", "step_time", "days_to_train", "parse_overlap", "cpu_cluster",
    "calibrate_cpu", "cluster_of", "PUBLISHED_BOUNDS", "run_shape", "run_cluster", "run_layout", "published_tokens_per_s",
    "published_mfu", "predict_run",
]

RECOMPUTE = layer_time.RECOMPUTE

SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "zb-h2")
ATTENTION = ("flash", "standard")
OVERLAP_AXES = ("tp", "cp", "pp", "dp", "ep")
#: What the production stacks' recommended settings overlap with compute (see the docstring).
DEFAULT_OVERLAP = frozenset({"tp", "cp", "pp", "dp"})
#: The precision of FlashAttention's two products: BF16, or FP8 (Transformer Engine's FP8
#: dot-product attention through cuDNN, ``fp8_dot_product_attention``).
ATTENTION_PRECISIONS = ("bf16", "fp8")
#: GPUs one NVLink domain joins in an HGX/DGX server (:data:`solutions.facts.NVLINK_DOMAINS`).
GPUS_PER_SERVER = facts.NVLINK_DOMAINS["HGX H100"]["gpus"]


def gpt_params(layers, hidden, vocab, seq_len):
    """Parameters of a GPT model (Narayanan et al. 2021, eq. 2):
    ``12 l h^2 (1 + 13 / 12h + (V + s) / 12 l h)``: weights and biases of the
    layers, layer norms, token and learned position embeddings."""
    l, h = positive_integer("layers", layers), positive_integer("hidden", hidden)
    V, s = positive_integer("vocab", vocab), positive_integer("seq_len", seq_len)
    return 12.0 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


@dataclass(frozen=True)
class Shape:
    """A transformer: ``head_dim`` defaults to ``hidden / heads``, ``kv_heads`` to ``heads``,
    ``ffn_hidden`` (the dense MLP) to ``4 hidden``; ``params`` to Narayanan et al.'s eq. 2
    (:func:`gpt_params`) for a dense GeLU model (plus what an MLP, key/value heads or a head
    size other than GPT's add), else counted from the shape
    (:func:`solutions.moe_step.transformer_params`). ``dropout`` as trained. ``moe`` makes it
    a mixture of experts (:class:`solutions.moe_step.MoEConfig`); ``q_lora``, ``kv_lora``,
    ``qk_rope``, ``v_head_dim`` describe multi-head latent attention (DeepSeek-V3);
    ``sliding_window`` and ``sliding_share`` banded attention on a share of the layers."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int = 51200
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    ffn_hidden: Optional[int] = None
    mlp: str = "gelu"
    params: Optional[float] = None
    dropout: bool = True
    moe: Optional[moe_step.MoEConfig] = None
    q_lora: Optional[int] = None
    kv_lora: Optional[int] = None
    qk_rope: int = 0
    v_head_dim: Optional[int] = None
    sliding_window: Optional[int] = None
    sliding_share: float = 0.0

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "vocab"):
            positive_integer(name, getattr(self, name))
        for name in ("kv_heads", "head_dim", "ffn_hidden", "q_lora", "kv_lora", "v_head_dim", "sliding_window"):
            if getattr(self, name) is not None:
                positive_integer(name, getattr(self, name))
        one_of("mlp", self.mlp, efficiency.MLP_KINDS)
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"heads must divide hidden (or give head_dim), got hidden={self.hidden}, heads={self.heads}")
        if self.heads % self.kv:
            raise ValueError(f"kv_heads must divide heads, got heads={self.heads}, kv_heads={self.kv}")
        if self.params is not None:
            positive("params", self.params)
        if self.moe is not None and self.moe.dense_layers >= self.layers:
            raise ValueError(f"dense_layers must be fewer than the layers ({self.layers}), got {self.moe.dense_layers}")

    @property
    def kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def qk_dim(self) -> int:
        """Query/key width per head (multi-head latent attention adds its rotary part)."""
        return self.head_size + (self.qk_rope if self.kv_lora else 0)

    @property
    def v_dim(self) -> int:
        return self.v_head_dim or self.head_size

    @property
    def attention_width(self) -> int:
        """``heads x head size``: the width of Q and of the attention output."""
        return self.heads * self.head_size

    @property
    def kv_width(self) -> int:
        """Elements per token of K (or V): ``kv_heads x head size``."""
        return self.kv * self.head_size

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        return moe_step.moe_layer_count(self.layers, self.moe) if self.moe else 0

    def _counts(self) -> moe_step.Counts:
        return _shape_counts(self)

    def _count_params(self) -> moe_step.Counts:
        mla = None
        if self.kv_lora:
            mla = {"q_lora": self.q_lora, "kv_lora": self.kv_lora, "qk_nope": self.head_size,
                   "qk_rope": self.qk_rope, "v_head": self.v_dim}
        return moe_step.transformer_params(self.layers, self.hidden, self.heads, self.kv, self.head_size, self.ffn,
                                           self.vocab, self.mlp, self.moe, mla)

    @property
    def n_params(self) -> float:
        """Parameters stored."""
        if self.params is not None:
            return float(self.params)
        if self.mlp == "gelu" and self.moe is None and not self.kv_lora:
            # eq. 2 counts GPT's own design (a 4h MLP, as many key/value heads as queries, heads
            # as wide as the model together); an MLP, key/value heads or heads drawn otherwise
            # add what they change, counted by the shape
            drawn = 0.0
            if (self.ffn, self.kv, self.head_size) != (4 * self.hidden, self.heads, self.hidden // self.heads):
                gpt = replace(self, ffn_hidden=None, kv_heads=None, head_dim=None, params=None)
                drawn = self._counts().total - gpt._counts().total
            return gpt_params(self.layers, self.hidden, self.vocab, self.seq_len) + drawn
        return self._counts().total

    @property
    def active_params(self) -> float:
        """Parameters a token uses: all of a dense model's; a MoE model's less the experts
        it skips (counted from the shape, scaled to ``params`` when that is given)."""
        if self.moe is None:
            return self.n_params
        c = self._counts()
        return c.active * (self.n_params / c.total)

    @property
    def expert_params(self) -> float:
        if self.moe is None:
            return 0.0
        c = self._counts()
        return c.expert * (self.n_params / c.total)

    def context(self, layer_share_sliding: bool) -> float:
        """Keys a query sees on average under the causal mask (window on sliding layers)."""
        s = self.seq_len
        if layer_share_sliding and self.sliding_window and self.sliding_window < s:
            w = self.sliding_window
            return w - w * w / (2.0 * s)
        return s / 2.0

    @property
    def mean_context(self) -> float:
        share = self.sliding_share if self.sliding_window else 0.0
        return share * self.context(True) + (1 - share) * self.context(False)

    @property
    def attention_context(self) -> float:
        """Keys per query PaLM's count charges (no causal discount), averaged over layers."""
        s = self.seq_len
        share = self.sliding_share if self.sliding_window else 0.0
        return share * min(s, self.sliding_window or s) + (1 - share) * s


def shape_of(arch, **overrides) -> Shape:
    """A :class:`Shape` from a published :class:`solutions.facts.Architecture` or
    :class:`solutions.facts.MoEArchitecture`; ``overrides`` replace fields."""
    if isinstance(arch, facts.MoEArchitecture):
        mla = dict(arch.mla) if arch.mla else {}
        cfg = moe_step.MoEConfig(arch.experts, arch.top_k, arch.expert_ffn, arch.shared_experts, arch.dense_layers,
                                 arch.layer_freq, node_limit=arch.node_limit, router_groups=arch.router_groups,
                                 expert_bias=arch.expert_bias, clamped_glu=arch.clamped_glu)
        shape = Shape(arch.layers, arch.d_model, arch.heads, arch.seq_len, vocab=arch.vocab or 51200,
                      kv_heads=arch.kv_heads if not mla else None, head_dim=arch.head_dim,
                      ffn_hidden=arch.ffn_hidden, mlp="swiglu", params=arch.total_params, dropout=False, moe=cfg,
                      q_lora=mla.get("q_lora"), kv_lora=mla.get("kv_lora"), qk_rope=mla.get("qk_rope", 0),
                      v_head_dim=mla.get("v_head"), sliding_window=arch.sliding_window,
                      sliding_share=arch.sliding_share)
    else:
        shape = Shape(arch.layers, arch.d_model, arch.heads, arch.seq_len, vocab=arch.vocab or 51200,
                      kv_heads=arch.kv_heads, head_dim=arch.head_dim, ffn_hidden=arch.ffn_hidden,
                      mlp=arch.mlp, params=arch.params, dropout=arch.dropout)
    return replace(shape, **overrides) if overrides else shape


@dataclass(frozen=True)
class Layout:
    """How a run is split: degrees, ZeRO stage, micro-batch (sequences), recomputation,
    schedule and model chunks per stage (``virtual_stages``, more than 1 only for
    ``schedule='interleaved'``); ``ep`` and ``etp`` (expert parallelism and the experts'
    tensor parallelism, folded into ``tp x cp x dp``) and how tokens reach the experts
    (``ep_dispatch``, :data:`solutions.moe_step.DISPATCHERS`); ``sequence_parallel`` with TP
    (on since Megatron-LM 2022; the runs of 2021 had none); ``offload_layers``: the layers per
    stage whose activations wait in the host's memory between the forward and the backward
    pass (Megatron-Core's ``cpu_offloading_num_layers``; :func:`offload_bytes`);
    ``expert_kernels`` how the routed experts run (:data:`solutions.moe_step.EXPERT_KERNELS`)
    and ``attention_precision`` FlashAttention's (:data:`ATTENTION_PRECISIONS`)."""

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 0
    micro_batch: int = 1
    recompute: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = 1
    attention: str = "flash"
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = True
    ep_dispatch: str = "deepep"
    offload_layers: int = 0
    expert_kernels: str = "grouped"
    attention_precision: str = "bf16"

    def __post_init__(self):
        one_of("ep_dispatch", self.ep_dispatch, moe_step.DISPATCHERS)
        one_of("expert_kernels", self.expert_kernels, moe_step.EXPERT_KERNELS)
        one_of("attention_precision", self.attention_precision, ATTENTION_PRECISIONS)
        if self.attention_precision == "fp8" and self.attention != "flash":
            raise ValueError("attention_precision fp8 needs attention='flash' (FP8 attention is a fused kernel)")
        nonnegative_integer("offload_layers", self.offload_layers)
        for name in ("tp", "cp", "pp", "dp", "micro_batch", "virtual_stages", "ep", "etp"):
            positive_integer(name, getattr(self, name))
        one_of("zero", self.zero, memory.ZERO_STAGES)
        check_recompute(self.recompute)
        one_of("schedule", self.schedule, SCHEDULES)
        one_of("attention", self.attention, ATTENTION)
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise ValueError(f"virtual_stages > 1 needs schedule='interleaved', got {self.schedule!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class Cluster:
    """GPUs and links: ``nvlink`` and ``network`` in bytes/s per GPU and direction (the
    network figure is one GPU's share of its node's NICs). ``gpu`` is a
    :class:`solutions.hardware.GPUSpec` (a :class:`solutions.facts.GPU` is looked up);
    ``gpus_per_server`` the scale-up domain (default the GPU's). ``latency_s`` (seconds per
    message) makes it a CPU cluster (S12), with ``collectives`` the measured
    ``{op: (seconds per message, bytes/s)}`` of the collectives that differ from the ring and
    ``fsdp_unit_s`` the measured seconds of FSDP2's own work per unit and micro-batch."""

    gpu: object
    nvlink: float
    network: float
    gpus_per_server: Optional[int] = None
    latency_s: Optional[float] = None
    overlap: bool = True
    collectives: tuple = ()
    #: ``'domain'``: a group's traffic spreads over every NIC of the domains it spans (NCCL's
    #: rail-optimised rings); ``'gpu'``: each GPU's traffic through its own NIC.
    nic_share: str = "domain"
    #: CPU only: seconds FSDP2 spends per unit and micro-batch on its own work, apart from the
    #: collectives' time on the wire (hooks, copy-in and copy-out of the flat buffers, sharded
    #: gradients accumulated as DTensors). On a GPU that host work runs ahead of the kernels; on
    #: a CPU the same core does it between the layers' compute.
    fsdp_unit_s: float = 0.0

    def __post_init__(self):
        if not isinstance(self.gpu, hardware.GPUSpec):
            object.__setattr__(self, "gpu", hardware.find_gpu(self.gpu.name))
        if self.gpus_per_server is None:
            object.__setattr__(self, "gpus_per_server", self.gpu.scale_up_gpus)

    @property
    def domain(self) -> int:
        return self.gpus_per_server

    @property
    def is_cpu(self) -> bool:
        return self.latency_s is not None


@dataclass(frozen=True)
class Calibration:
    """The fitted constants of (S3)-(S4) (:mod:`solutions.calibration`), shared by every GPU:
    the share of a product's memory traffic left exposed (``gemm_traffic``), the multiplier
    on counted elementwise bytes (``elementwise``), FlashAttention's share of the BF16
    matmul ceiling (``attention``), the network's share of its line rate (``network``), and
    the runs that set them; the fixed seconds per layer and per local expert of a MoE layer
    (per micro-batch, forward and backward)."""

    gemm_traffic: float
    elementwise: float
    attention: float
    network: float
    set_by: tuple = ()
    layer_s: float = 0.0
    expert_s: float = 0.0
    #: seconds of compute lost per second of communication hidden behind it: NCCL's kernels
    #: take streaming multiprocessors from the computation they overlap.
    contention: float = 0.0

    def coefficients(self):
        return coefficients(self.gemm_traffic, self.elementwise, self.attention, self.layer_s, self.expert_s)


@dataclass(frozen=True)
class CPUCalibration:
    """(S12)'s constants for one CPU machine: ``e_max h / (h + w0)`` of the measured matmul
    rate, and the fixed seconds per layer and micro-batch (forward and backward)."""

    e_max: float
    w0: float
    set_by: tuple
    layer_overhead_s: float = 0.0


#: (S3)-(S4)'s constants, fitted by :func:`solutions.calibration.fit` on every run of
#: :data:`solutions.facts.PUBLISHED_RUNS` (``tests/solutions/test_steptime.py`` re-derives them): the
#: products' exposed memory traffic (2.31x their minimal bytes), the elementwise multiplier
#: (not fitted: the bytes are counted and move at the HBM's bandwidth), FlashAttention at
#: 52% of the BF16 matmul ceiling, the network at 72% of its line rate, 0.26 ms per local
#: expert of a MoE layer and micro-batch, and 0.36 s of compute lost per second of
#: communication hidden behind it.
CALIBRATION = Calibration(gemm_traffic=2.3134, elementwise=1.0, attention=0.5225, network=0.7239,
                          set_by=("every run of solutions.facts.PUBLISHED_RUNS",), layer_s=0.0, expert_s=2.5515e-4,
                          contention=0.3555)
#: What the model promises on the course's table (relative error of tokens/s per GPU): the
#: median over every run and over the leave-one-out predictions, the worst case, and the band
#: the book draws. ``tests/solutions/test_steptime.py`` holds the model to them. The worst is
#: gpt-oss-120b on GB200 (+36%): what it is short of is not known (the planner page says what
#: its rows rule out). Reading its recipe's recomputation right (the norms and the experts'
#: activation, not the attention core) took it from +38% to +48%; counting the passes
#: Megatron-Core's grouped experts spend on its clamped GLU and biases, back to +36%.
PUBLISHED_BOUNDS = {"median": 0.10, "loo_median": 0.12, "worst": 0.40, "band": 0.20}


def check_recompute(recompute) -> str:
    """``recompute`` if it is one of :data:`RECOMPUTE` or modules of
    :data:`solutions.layer_time.RECOMPUTE_MODULES` joined by commas; else a one-line ``ValueError``."""
    layer_time.recompute_modules(recompute)  # None for a whole setting, else the modules; raises otherwise
    return recompute


def check_recompute_for(shape: "Shape", recompute) -> str:
    """:func:`check_recompute`, and a one-line ``ValueError`` where a named module is not in
    ``shape``: ``mla_up_proj`` without multi-head latent attention, ``moe_act`` without
    experts, ``mlp`` without a dense layer."""
    mods = layer_time.recompute_modules(check_recompute(recompute)) or frozenset()
    missing = {"mla_up_proj": not shape.kv_lora, "moe_act": not shape.is_moe,
               "mlp": shape.moe_layers >= shape.layers}
    absent = [m for m in layer_time.RECOMPUTE_MODULES if m in mods and missing.get(m)]
    if absent:
        what = {"mla_up_proj": "multi-head latent attention", "moe_act": "experts", "mlp": "a dense layer"}
        raise ValueError(f"recompute module {absent[0]} needs {what[absent[0]]}, which this model does not have")
    return recompute


def parse_overlap(overlap) -> frozenset:
    """``None`` or ``'default'``: :data:`DEFAULT_OVERLAP`; ``'none'``; ``'all'``; or axes
    separated by commas (``'tp,dp,ep'``); or an iterable of axes."""
    if overlap is None or overlap == "default":
        return DEFAULT_OVERLAP
    if isinstance(overlap, str):
        if overlap == "none":
            return frozenset()
        if overlap == "all":
            return frozenset(OVERLAP_AXES)
        text, overlap = overlap, [a.strip() for a in overlap.split(",") if a.strip()]
        if not overlap:  # '' (an unset shell variable, say) is not 'none': say so rather than plan without overlap
            raise ValueError(f"overlap must be 'default', 'none', 'all' or axes among {list(OVERLAP_AXES)}, got {text!r}")
    axes = frozenset(overlap)
    if "default" in axes:
        axes = (axes - {"default"}) | DEFAULT_OVERLAP
    bad = sorted(axes - set(OVERLAP_AXES))
    if bad:
        raise ValueError(f"overlap must be 'default', 'none', 'all' or axes among {list(OVERLAP_AXES)}, got {bad}")
    return axes


def check_attention_precision(gpu: hardware.GPUSpec, attention_precision: str) -> None:
    """``ValueError`` (one line, naming what the chip has) unless ``gpu`` runs attention in
    ``attention_precision``."""
    one_of("attention_precision", attention_precision, ATTENTION_PRECISIONS)
    if attention_precision != "bf16":
        try:
            gpu.peak(attention_precision)
        except ValueError as e:
            raise ValueError(f"attention_precision {attention_precision}: {e}") from None


# --------------------------------------------------------------------------
# (S1), (S2): FLOPs
# --------------------------------------------------------------------------


@lru_cache(maxsize=512)
def model_flops_per_token(shape: Shape) -> float:
    """(S1): ``6 N_active + 6 L s a (d_qk + d_v)`` (PaLM's count; ``12 L s a d`` when the
    head sizes agree)."""
    return float(6.0 * shape.active_params
                 + 6.0 * shape.layers * shape.attention_context * shape.heads * (shape.qk_dim + shape.v_dim))


def hardware_flops_per_token(shape: Shape, recompute: str = "none") -> float:
    """(S2): model FLOPs plus the recomputed forward: selective ``2 L s a (d_qk + d_v)``
    (the attention core), full ``2 (N_active - V h)`` and the core; named modules
    (:data:`solutions.layer_time.RECOMPUTE_MODULES`) their own products: the core for
    ``core_attn``, twice MLA's up-projection weights per layer for ``mla_up_proj``, twice the
    dense layers' MLP weights for ``mlp`` (the norms and activations are not FLOPs)."""
    mods = layer_time.recompute_modules(check_recompute(recompute))
    core = 2.0 * shape.layers * shape.attention_context * shape.heads * (shape.qk_dim + shape.v_dim)
    if mods is None:
        extra = {"none": 0.0, "selective": core,
                 "full": 2.0 * (shape.active_params - shape.vocab * shape.hidden) + core}[recompute]
        return model_flops_per_token(shape) + extra
    extra = core if "core_attn" in mods else 0.0
    if "mla_up_proj" in mods and shape.kv_lora:
        up = (shape.q_lora or 0) * shape.heads * shape.qk_dim \
            + shape.kv_lora * shape.heads * (shape.qk_dim - shape.qk_rope + shape.v_dim)
        extra += 2.0 * shape.layers * up
    if "mlp" in mods and shape.layers > shape.moe_layers:
        up = 3 if shape.mlp == "swiglu" else 2
        extra += 2.0 * (shape.layers - shape.moe_layers) * up * shape.hidden * shape.ffn
    return model_flops_per_token(shape) + extra


# --------------------------------------------------------------------------
# (S10): bubble
# --------------------------------------------------------------------------


def pipeline_bubble_time(p, m, schedule="1f1b", t_f=1.0, t_b=2.0, virtual_stages=1, t_w=None):
    """Idle seconds of a ``p``-stage pipeline over ``m`` micro-batches whose
    forward takes ``t_f`` and backward ``t_b`` on one stage.

    * ``'gpipe'``, ``'1f1b'``: ``(p - 1)(t_f + t_b)`` (Narayanan et al. 2021, sec. 2.2.1);
    * ``'interleaved'``: divided by ``v`` (sec. 2.2.2);
    * ``'zb-h1'``, ``'zb-h2'``: the backward split into ``B`` and ``W``
      (``t_w`` of ``t_b``, half by default): Qi et al. (2024, Table 2),
      :func:`solutions.efficiency.pipeline_bubble`.
    """
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    one_of("schedule", schedule, SCHEDULES)
    v = positive_integer("virtual_stages", virtual_stages)
    if p == 1:
        return 0.0
    if schedule in ("zb-h1", "zb-h2"):
        w = t_b / 2 if t_w is None else t_w
        share = efficiency.pipeline_bubble(p, m, schedule, t_f, t_b - w, w)
        return share * m * (t_f + t_b)
    return (p - 1) * (t_f + t_b) / (v if schedule == "interleaved" else 1)


# --------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------


def _in_flight(p, m, schedule, v):
    """Micro-batches whose activations the first stage holds at its peak:
    GPipe all ``m``; 1F1B and ZB-H1 ``min(p, m)``; ZB-H2 ``2p - 1`` (Qi et al.);
    interleaved ``p (1 + (p - 1) / (p v))`` (Narayanan et al. 2021, sec. 2.2.2)."""
    if schedule == "gpipe":
        return m
    if schedule == "zb-h2":
        return min(m, efficiency.peak_stashed_microbatches(p, "zb-h2"))
    if schedule == "interleaved":
        return min(m, p) * (1 + (p - 1) / (p * v))
    return min(p, m)


def _layer_microbatches(layers, pp, flight):
    """Layers x micro-batches stashed on the stage that holds most: the first
    stage holds ``flight`` micro-batches, the next one fewer. When ``pp`` does
    not divide the layers, the first stage takes the lighter share,
    ``floor(L / pp)`` (Llama 3 takes a layer off its first and last stages to
    balance memory, Dubey et al. 2024 sec. 3.3.2); the others hold ``ceil(L / pp)``."""
    full = math.ceil(layers / pp)
    if pp == 1 or layers % pp == 0:
        return full * flight
    return max((layers // pp) * flight, full * max(flight - 1, 1))


def activation_bytes(shape: Shape, lay: Layout, m: int, precision_name: str = "bf16") -> float:
    """Activation bytes on the busiest GPU: its layers times the micro-batches in flight times
    :func:`solutions.efficiency.activation_bytes_per_layer` (FlashAttention stores no scores;
    sequence parallelism with TP; ``s / cp`` tokens). A MoE layer stores its experts' inputs
    and activations for the ``k`` copies of each token (an MLP ``k f_e + shared f_e`` wide) and
    the dispatched copies (``2 k h`` bytes per token), on the sequence-parallel shard; a
    clamped GLU (gpt-oss) run by Megatron-Core's grouped experts keeps its clamped input too.

    In FP8 or FP4 the inputs of the linear layers are kept for the backward pass as the
    quantised copies the products used (Transformer Engine does; DeepSeek-V3 sec. 3.3.4):
    ``e`` bytes instead of 2 for the norms' outputs, the projection's input and the second MLP
    product's input. Selective recomputation drops what is cheap to recompute: standard
    attention's scores (Korthikanti et al. 2022) and, with FlashAttention, the norms' outputs
    and the MLP's activation output (Megatron-Core's ``layernorm`` and ``mlp``/``moe_act``
    modules). Full recomputation keeps each layer's input only, plus one layer's activations
    while it is recomputed."""
    flight = _in_flight(lay.pp, m, lay.schedule, lay.virtual_stages)
    layer_micro = _layer_microbatches(shape.layers, lay.pp, flight)
    per, extra = _activation_per_layer(shape, _activation_key(lay), precision_name)
    return float(max(layer_micro - lay.offload_layers * flight, 0) * per + extra)


def _activation_key(lay: Layout) -> tuple:
    """What a layer's stored activations depend on (the cache key of :func:`_activation_per_layer`)."""
    return (lay.tp, lay.cp, lay.micro_batch, lay.recompute, lay.attention, lay.sequence_parallel, lay.etp,
            lay.expert_kernels, lay.ep)


def offload_bytes(shape: Shape, lay: Layout, precision_name: str = "bf16") -> float:
    """Bytes one micro-batch sends to the host's memory during its forward pass and fetches
    back during its backward pass: the stored activations of ``lay.offload_layers`` layers
    (the per-layer bytes of :func:`activation_bytes`). Megatron-Core copies them on their own
    CUDA streams (the copy engines, not the SMs), layer by layer, so a copy hides behind the
    compute of the pass it belongs to unless it takes longer (:func:`step_time`)."""
    if not lay.offload_layers:
        return 0.0
    per, _ = _activation_per_layer(shape, _activation_key(lay), precision_name)
    return float(lay.offload_layers * per)


def _attention_tensors(shape: Shape) -> tuple:
    """Elements per token of the attention's Q, K, V and output (the output projection's
    input), as the backward pass keeps them: ``a d_qk``, ``g d_qk``, ``g d_v``, ``a d_v``."""
    return (shape.heads * shape.qk_dim, shape.kv * shape.qk_dim, shape.kv * shape.v_dim, shape.heads * shape.v_dim)


def _attention_excess(shape: Shape) -> float:
    """Elements per token the attention keeps beyond what
    :func:`solutions.efficiency.activation_bytes_per_layer` counts, which draws Q and the output
    as wide as the model and K and V ``g / a`` of it (Korthikanti et al.'s GPT, where
    ``a d_head = h``): Qwen3's and gpt-oss's heads are wider together than the model (64 x 128
    against 4,096; 64 x 64 against 2,880), and multi-head latent attention's Q and K are
    ``d_nope + d_rope`` wide per head, its K and V one per query head, and it keeps its two
    latent vectors (each norm's input and output). Zero for GPT's and Llama's heads."""
    counted = shape.hidden * (2 + 2 * shape.kv / shape.heads)
    latent = 2 * ((shape.q_lora or 0) + shape.kv_lora) if shape.kv_lora else 0
    return float(sum(_attention_tensors(shape)) + latent - counted)


@lru_cache(maxsize=8192)
def _activation_per_layer(shape: Shape, key: tuple, precision_name: str) -> tuple:
    """``(bytes per layer and micro-batch in flight, bytes once)`` of :func:`activation_bytes`."""
    tp, cp, b, recompute, attention, sp, etp, kernels, ep = key
    imb = moe_step.busiest(shape.moe, ep) if shape.moe is not None else 1.0
    lay = Layout(tp=tp, cp=cp, micro_batch=b, recompute=recompute, attention=attention, sequence_parallel=sp)
    rec = precision.recipe(precision_name) if precision_name in precision.RECIPES else precision.RECIPES["bf16"]
    low = 0.0 if rec.name in ("bf16", "fp16") else (2.0 - rec.gemm_bytes) * (1.0 - rec.bf16_share)
    split = lay.tp * lay.cp
    tokens = shape.seq_len * lay.micro_batch

    def mlp_widths(moe_layer):
        if moe_layer:
            cfg = shape.moe
            acts = cfg.top_k * cfg.expert_ffn * imb + cfg.shared_experts * cfg.expert_ffn
            # an ETP group's members each keep every copy the group gathered (ETP times their own),
            # and 1/ETP of each copy's expert activations
            return acts, cfg.top_k * shape.hidden * imb * etp
        return shape.ffn, 0.0

    def full_layer(attention, moe_layer):
        ffn, copies = mlp_widths(moe_layer)
        base = efficiency.activation_bytes_per_layer(
            shape.seq_len, lay.micro_batch, shape.hidden, shape.heads, ffn_hidden=ffn,
            mlp=shape.mlp, attention=attention, kv_heads=shape.kv, dropout=shape.dropout, tp=lay.tp,
            sequence_parallel=lay.tp > 1 and lay.sequence_parallel, cp=lay.cp)
        return base + 2.0 * (copies + _attention_excess(shape)) * tokens / split

    moe_share = shape.moe_layers / shape.layers
    if lay.recompute == "full":
        return 2.0 * tokens * shape.hidden / split, full_layer(lay.attention, shape.is_moe)
    mods = layer_time.recompute_modules(lay.recompute) or frozenset()
    core = lay.recompute == "selective" or "core_attn" in mods
    attention = "flash" if core and lay.attention == "standard" else lay.attention

    def stored(moe_layer):
        x = full_layer(attention, moe_layer)
        ffn, copies = mlp_widths(moe_layer)
        gemm_inputs = (2 * shape.hidden + shape.attention_width + ffn + copies) * tokens / split
        x -= low * gemm_inputs
        if core and lay.attention == "standard":
            x -= 4.0 * shape.heads * shape.seq_len * lay.micro_batch / split  # no LSE either
        elif lay.recompute == "selective":
            x -= (2.0 - low) * (2 * shape.hidden + ffn) * tokens / split
        routed = shape.moe.top_k * shape.moe.expert_ffn * imb if moe_layer else 0.0
        if mods:  # named modules: the norms' outputs, the activation's input
            dropped = (2 * shape.hidden if "layernorm" in mods else 0.0) \
                + (routed if moe_layer and "moe_act" in mods else 0.0) \
                + (ffn if not moe_layer and "mlp" in mods else 0.0)
            x -= (2.0 - low) * dropped * tokens / split
            if "mla_up_proj" in mods and shape.kv_lora:
                # MLA's up-projected Q, K and V (16-bit, the attention's inputs), discarded after the
                # attention's forward and recomputed from the latent vectors for its backward
                x -= 2.0 * sum(_attention_tensors(shape)[:3]) * tokens / split
        if moe_layer and shape.moe.clamped_glu and kernels == "grouped" and lay.recompute != "selective" \
                and "moe_act" not in mods:
            # the clamped halves, concatenated, are what the fused gating keeps (its input's
            # halves stay kept for the clamps' masks): 2 f more per copy (layer_time.eager_expert_bytes)
            x += 2.0 * 2.0 * routed * tokens / split
        return max(x, 2.0 * tokens * shape.hidden / split)

    per = stored(False) if moe_share < 1 else 0.0
    if moe_share:
        per = (1 - moe_share) * per + moe_share * stored(True)
    return per, 0.0


def state_breakdown(shape: Shape, lay: Layout, convention="zero_16", precision_name="bf16") -> dict:
    """Model-state bytes per GPU by component (``weights``, ``grads``, ``optimizer``): the
    dense part split over TP x PP and ZeRO-sharded over the ``dp x cp`` ranks that hold it
    (as Megatron's distributed optimizer does); a MoE model's routed experts split over
    PP x EP x ETP and sharded over the expert-data-parallel ranks; plus the precision's
    quantised copies of the weights (:data:`solutions.precision.RECIPES`), sharded like them,
    which replace the 16-bit weights where the recipe keeps its weights in FP8 only."""
    conv = memory.get_convention(convention)
    rec = precision.recipe(precision_name)
    conv = memory.ByteConvention(conv.name, rec.weight_bytes(conv.weights), conv.grads, conv.optimizer,
                                 conv.description, conv.cite)
    parts = {"weights": 0.0, "grads": 0.0, "optimizer": 0.0}
    (dense, d_deg), (expert, e_deg) = moe_step.state_shards(shape.n_params - shape.expert_params,
                                                            shape.expert_params, lay.tp, lay.pp, lay.cp, lay.dp,
                                                            lay.ep, lay.etp)
    for params, degree in ((dense, d_deg), (expert, e_deg)):
        if params <= 0:
            continue
        w, g, o = memory._sharded_state(params, lay.zero, degree, conv)
        parts["weights"] += float(w)
        parts["grads"] += float(g)
        parts["optimizer"] += float(o)
    return parts


def state_bytes(shape: Shape, lay: Layout, convention="zero_16", precision_name="bf16") -> float:
    """Model-state bytes per GPU (:func:`state_breakdown`, summed)."""
    return sum(state_breakdown(shape, lay, convention, precision_name).values())


# --------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------


def memory_bytes(shape: Shape, lay: Layout, cluster: Cluster, global_batch: int, convention="zero_16",
                 precision_name="bf16") -> tuple[float, float]:
    """``(model state, activations)`` in bytes on the busiest GPU, as :func:`step_time` counts
    them (:func:`state_bytes`, :func:`activation_bytes`), without timing the step: what a layout
    search needs to turn away a layout that does not fit."""
    cpu = cluster.is_cpu
    m = global_batch // (lay.dp * lay.micro_batch)
    name = "bf16" if cpu else precision_name
    return state_bytes(shape, lay, convention, name), activation_bytes(shape, lay, m, name)


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step and what they are made of (``breakdown_s``: ``compute``,
    the exposed ``tp``, ``cp``, ``pp``, ``dp``, ``ep`` and the ``bubble``; ``hidden_s``: the
    communication that overlapped compute, per axis), traffic per GPU per step (``bytes``),
    throughput and utilisation, memory per GPU (``usable_bytes``: what the plan may use)."""

    step_s: float
    breakdown_s: dict
    bytes: dict
    tokens_per_s: float
    mfu: float
    hfu: float
    microbatches: int
    state_bytes: float
    activation_bytes: float
    fits: bool
    efficiency: float
    links: dict = field(default_factory=dict)
    messages: dict = field(default_factory=dict)
    hidden_s: dict = field(default_factory=dict)
    usable_bytes: float = math.inf
    mfu_precision: float = 0.0
    precision: str = "bf16"
    flops_per_s_per_gpu: float = 0.0
    gpus: int = 1
    #: of ``bytes["ep"]``, what crosses the network (the rest stays in the scale-up domain)
    ep_network_bytes: float = 0.0

    @property
    def memory_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes

    @property
    def hfu_precision(self) -> float:
        """Hardware FLOPs utilisation against the chosen precision's peak (``hfu`` is against
        the BF16 peak): the two peaks' ratio, as between the two MFUs."""
        return self.hfu * self.mfu_precision / self.mfu if self.mfu > 0 else 0.0

    @property
    def margin_bytes(self) -> float:
        """Usable memory left over (negative: by how much it does not fit)."""
        return self.usable_bytes - self.memory_bytes

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus

    @property
    def comm_s(self) -> dict:
        """Seconds of communication per axis, exposed and hidden together."""
        return {k: self.breakdown_s.get(k, 0.0) + self.hidden_s.get(k, 0.0) for k in OVERLAP_AXES}


def _validate(shape, lay, global_batch):
    global_batch = positive_integer("global_batch", global_batch)
    if shape.seq_len % lay.cp:
        raise ValueError(f"cp must divide seq_len, got cp={lay.cp}, seq_len={shape.seq_len}")
    if global_batch % (lay.dp * lay.micro_batch):
        raise ValueError(f"dp x micro_batch must divide global_batch, got dp={lay.dp}, "
                         f"micro_batch={lay.micro_batch}, global_batch={global_batch}")
    if lay.tp > shape.heads or shape.heads % lay.tp:
        raise ValueError(f"tp must divide the number of heads ({shape.heads}), got tp={lay.tp}")
    if lay.virtual_stages > math.ceil(shape.layers / lay.pp):
        raise ValueError(f"virtual_stages must be at most the layers per stage ({math.ceil(shape.layers / lay.pp)}), "
                         f"got {lay.virtual_stages}")
    if lay.offload_layers >= math.ceil(shape.layers / lay.pp):
        raise ValueError(f"offload_layers must be fewer than the layers per stage ({math.ceil(shape.layers / lay.pp)}), "
                         f"got {lay.offload_layers}")
    if shape.moe is not None:
        moe_step.check_expert_layout(shape.moe, lay.ep, lay.etp, lay.tp, lay.cp, lay.dp)
    elif lay.ep > 1:
        raise ValueError(f"ep > 1 needs experts (a mixture-of-experts shape), got ep={lay.ep}")
    return global_batch


@lru_cache(maxsize=256)
def _shape_counts(shape) -> moe_step.Counts:
    return shape._count_params()


def _compute_terms(shape: Shape, lay: Layout, gpu: hardware.GPUSpec, precision_name: str) -> tuple:
    """``(micro-batch Terms, per-layer Terms)`` of the busiest stage (its ``ceil(L / pp)``
    layers, MoE and dense in the model's proportion, and the output layer); cached on what
    they depend on (not dp, ZeRO or the schedule, which a layout search varies most)."""
    key = (lay.tp, lay.cp, lay.pp, lay.micro_batch, lay.recompute, lay.attention, lay.ep, lay.etp,
           lay.sequence_parallel, lay.expert_kernels, lay.attention_precision)
    return _terms_by_key(shape, key, gpu, precision_name)


@lru_cache(maxsize=8192)
def _terms_by_key(shape: Shape, key: tuple, gpu: hardware.GPUSpec, precision_name: str) -> tuple:
    tp, cp, pp, b, recompute, attention, ep, etp, sp, kernels, attn_precision = key
    lay = Layout(tp=tp, cp=cp, pp=pp, micro_batch=b, recompute=recompute, attention=attention, ep=ep, etp=etp,
                 sequence_parallel=sp, expert_kernels=kernels, attention_precision=attn_precision)
    rec = precision.recipe(precision_name)
    here = math.ceil(shape.layers / lay.pp)
    dense_t = layer_terms(shape, lay, gpu, rec, moe_layer=False)
    total = Terms.zero()
    moe_share = shape.moe_layers / shape.layers
    per_layer = dense_t
    if moe_share:
        moe_t = layer_terms(shape, lay, gpu, rec, moe_layer=True)
        per_layer = dense_t * (1 - moe_share) + moe_t * moe_share
    total = per_layer * here + output_terms(shape, lay, gpu, rec)
    return total, per_layer


def _collective(cluster: Cluster, op: str, size, n, stride, net_eff, messages_per_call=None):
    """``(seconds, link name, messages)`` of one collective of ``size`` bytes among ``n``
    ranks ``stride`` apart (GPU: NCCL's model; CPU: the measured constants)."""
    if n <= 1 or size <= 0:
        return 0.0, "none", 0
    if cluster.is_cpu:
        own = dict(cluster.collectives).get(op)
        alpha, beta, algo = (own if own else (cluster.latency_s, cluster.nvlink, op))
        steps = (2 if algo == "all_reduce" else 1) * (n - 1)
        wire = network.bus_factor(algo, n) * size
        return steps * alpha + wire / beta, "loopback", steps
    link = network.link_for(n, stride, cluster.domain, cluster.nvlink, cluster.network, cluster.nic_share)
    steps = (2 if op == "all_reduce" else 1) * (n - 1)
    return network.ring_time(op, size, n, link, net_eff), link.kind, steps


def step_time(shape: Shape, lay: Layout, cluster: Cluster, global_batch: int, convention="zero_16",
              calibration=None, bytes_per_element=2, defer_grad_sync=False, network_efficiency=None,
              precision_name="bf16", overlap=None) -> StepTime:
    """(S1)-(S11) for one optimizer step of ``global_batch`` sequences (S12 on a CPU cluster).

    ``precision_name``: ``'bf16'``, ``'fp16'``, ``'fp8'``, ``'mxfp8'`` or ``'nvfp4'``
    (:mod:`solutions.precision`); ``overlap``: what hides behind compute
    (:func:`parse_overlap`); ``defer_grad_sync``: ZeRO-3 reduce-scatters the gradients once
    per step instead of every micro-batch (FSDP2's ``set_requires_gradient_sync(False)``)."""
    global_batch = _validate(shape, lay, global_batch)
    gpu = cluster.gpu
    cpu = cluster.is_cpu
    if cpu:
        precision_name = "fp32"
        rec = precision.RECIPES["bf16"]
    else:
        rec = precision.recipe(precision_name)
        gpu.peak(precision_name)  # one line if the GPU lacks it
        check_attention_precision(gpu, lay.attention_precision)
    axes = frozenset() if (cpu or not cluster.overlap) else parse_overlap(overlap)
    m = global_batch // (lay.dp * lay.micro_batch)
    b, s, h, nb = lay.micro_batch, shape.seq_len, shape.hidden, bytes_per_element
    here = math.ceil(shape.layers / lay.pp)
    moe_here = shape.moe_layers / shape.layers * here

    # (S3) compute of one micro-batch
    if cpu:
        cal = calibration if isinstance(calibration, CPUCalibration) else CPUCalibration(1.0, 0.0, ())
        tokens_mb = b * s / lay.cp
        layer_hw = (hardware_flops_per_token(shape, lay.recompute) - 6.0 * shape.vocab * shape.hidden) / shape.layers
        flops_mb = (here * layer_hw + 6.0 * shape.vocab * shape.hidden) * tokens_mb / lay.tp
        eta = cal.e_max * h / (h + cal.w0)
        t_mb = flops_mb / (eta * gpu.peak_flops_per_s["fp32"]) + (here + 1) * cal.layer_overhead_s
        t_fwd = t_mb / (4.0 if lay.recompute == "full" else 3.0)
        t_bwd = t_mb - t_fwd
        gemm_layer = attn_layer = layer_all = 0.0
        net = 1.0
    else:
        cal = calibration if isinstance(calibration, Calibration) else CALIBRATION
        net = cal.network if network_efficiency is None else network_efficiency
        coeffs = cal.coefficients()
        total, per_layer = _compute_terms(shape, lay, gpu, precision_name)
        t_fwd, t_bwd = total.seconds(coeffs)
        t_mb = t_fwd + t_bwd
        gemm_layer = float(coeffs[:2] @ per_layer.a[:2].sum(axis=1))
        attn_layer = float(coeffs[3] * per_layer.a[3].sum())
        layer_all = sum(per_layer.seconds(coeffs))
        eta = float(total.a[0].sum() / t_mb) if t_mb else 0.0

    links, nbytes, exposed, hidden, messages = {}, {}, {}, {}, {}

    def account(axis, seconds, window):
        """Split ``seconds`` of ``axis`` traffic into hidden (behind ``window`` of compute,
        when the axis overlaps) and exposed."""
        if axis in axes and window > 0:
            h_ = min(seconds, window)
            return seconds - h_, h_
        return seconds, 0.0

    # (S5) tensor parallelism (sequence parallel: all-gathers and reduce-scatters; else all-reduces)
    calls = 1.5 if lay.recompute == "full" else 1.0
    if lay.tp > 1:
        act = b * s * h * nb / lay.cp
        op = "all_gather" if lay.sequence_parallel else "all_reduce"
        per_coll, tp_link, steps = _collective(cluster, op, act, lay.tp, 1, net)
        if lay.sequence_parallel:
            rs, _, steps_rs = _collective(cluster, "reduce_scatter", act, lay.tp, 1, net)
            layer_s = 4 * per_coll + 4 * rs  # 2 AG + 2 RS forward, as many backward
            layer_msgs = 4 * steps + 4 * steps_rs
        else:
            layer_s = 4 * per_coll
            layer_msgs = 4 * steps
        nbytes["tp"] = communication.tensor_parallel_bytes_per_layer(b, s // lay.cp, h, lay.tp, nb) * calls * here * m
        messages["tp"] = layer_msgs * calls * here * m
        e, hd = account("tp", layer_s * calls, gemm_layer)
        exposed["tp"], hidden["tp"] = e * here * m, hd * here * m
        links["tp"] = tp_link
    else:
        nbytes["tp"] = exposed["tp"] = hidden["tp"] = messages["tp"] = 0.0
        links["tp"] = "none"
    # (S6) context parallelism
    if lay.cp > 1:
        cp_layer = context.context_parallel_bytes_per_layer(b, s, max(1, shape.kv_width // lay.tp), lay.cp, nb)
        kv_all = cp_layer / 2 * lay.cp / (lay.cp - 1)  # the gathered K and V of the whole sequence
        t_cp, links["cp"], steps = _collective(cluster, "all_gather", kv_all, lay.cp, lay.tp, net)
        t_cp *= 2  # gathered forward, their gradients reduce-scattered backward
        nbytes["cp"] = cp_layer * here * m
        messages["cp"] = 2 * steps * here * m
        e, hd = account("cp", t_cp, attn_layer)
        exposed["cp"], hidden["cp"] = e * here * m, hd * here * m
    else:
        nbytes["cp"] = exposed["cp"] = hidden["cp"] = messages["cp"] = 0.0
        links["cp"] = "none"
    # (S7) pipeline sends
    if lay.pp > 1:
        send = b * s * h * nb / (lay.cp * lay.tp)
        if cpu:
            one = send / cluster.nvlink + cluster.latency_s
            links["pp"] = "loopback"
        else:
            link = network.link_for(lay.pp, lay.tp * lay.cp * lay.dp, cluster.domain, cluster.nvlink,
                                    cluster.network, cluster.nic_share)
            one = send / network.bus_bandwidth(link, net) + network.NCCL_LATENCY_S["Simple"]["base"]
            links["pp"] = link.kind
        crossings = 2 * lay.virtual_stages * (lay.pp - 1)
        steady = 2 * m * lay.virtual_stages * one
        nbytes["pp"] = 2 * send * m * lay.virtual_stages
        messages["pp"] = 2 * m * lay.virtual_stages
        e, hd = account("pp", steady, m * t_mb)
        exposed["pp"] = crossings * one + e
        hidden["pp"] = hd
    else:
        nbytes["pp"] = exposed["pp"] = hidden["pp"] = messages["pp"] = 0.0
        links["pp"] = "none"
    # (S8) data parallelism / ZeRO: the dense part over dp x cp, the experts over their EDP ranks
    nbytes["dp"] = exposed["dp"] = hidden["dp"] = messages["dp"] = 0.0
    links["dp"] = "none"
    (dense_p, d_deg), (expert_p, e_deg) = moe_step.state_shards(shape.n_params - shape.expert_params,
                                                                shape.expert_params, lay.tp, lay.pp, lay.cp, lay.dp,
                                                                lay.ep, lay.etp)
    gather_nb = rec.param_gather_bytes if not cpu else nb
    units = here + (2 if cpu else 1)  # ZeRO-3 gathers unit by unit: the layers (and embedding, output layer)
    for params, degree, stride in ((dense_p, d_deg, lay.tp), (expert_p, e_deg, lay.ep * lay.etp)):
        if params <= 0 or degree == 1:
            continue
        shard = params * nb
        gshard = params * gather_nb
        ring = (degree - 1) / degree
        if lay.zero == 3:
            ag, links["dp"], st_ag = _collective(cluster, "all_gather", gshard / units, degree, stride, net)
            rs, _, st_rs = _collective(cluster, "reduce_scatter", shard / units, degree, stride, net)
            passes_ag, rs_per_mb = 2, (0 if defer_grad_sync else 1)
            per_mb = (passes_ag * ag + rs_per_mb * rs) * units
            nbytes["dp"] += (passes_ag * gshard + rs_per_mb * shard) * ring * m \
                + (shard * ring if defer_grad_sync else 0.0)
            messages["dp"] += (passes_ag * st_ag + rs_per_mb * st_rs) * units * m \
                + (st_rs * units if defer_grad_sync else 0)
            e, hd = account("dp", per_mb, t_mb)
            exposed["dp"] += m * e + (m * units * cluster.fsdp_unit_s if cpu else 0.0)
            hidden["dp"] += m * hd
            if defer_grad_sync:
                e, hd = account("dp", rs * units, t_bwd)
                exposed["dp"] += e
                hidden["dp"] += hd
        else:
            k = m if lay.zero == 2 else 1
            if lay.zero == 0:
                red, links["dp"], st_red = _collective(cluster, "all_reduce", shard, degree, stride, net)
                red_bytes = 2 * shard * ring
            else:
                red, links["dp"], st_red = _collective(cluster, "reduce_scatter", shard, degree, stride, net)
                red_bytes = shard * ring
            gat, st_gat, gat_bytes = 0.0, 0, 0.0
            if lay.zero in (1, 2):
                gat, _, st_gat = _collective(cluster, "all_gather", gshard, degree, stride, net)
                gat_bytes = gshard * ring
            nbytes["dp"] += red_bytes * k + gat_bytes
            messages["dp"] += st_red * k + st_gat
            e1, h1 = account("dp", red * k, t_bwd * k)
            e2, h2 = account("dp", gat, t_fwd)
            exposed["dp"] += e1 + e2
            hidden["dp"] += h1 + h2
    # (S9) expert parallelism
    nbytes["ep"] = exposed["ep"] = hidden["ep"] = messages["ep"] = 0.0
    links["ep"] = "none"
    ep_network = 0.0
    if shape.is_moe and lay.ep * lay.etp > 1:
        tokens = b * s / (lay.cp * lay.tp)
        dispatch = rec.dispatch_bytes if not cpu else nb
        per_layer = t_layer = 0.0
        if lay.ep > 1 and cpu:
            per_layer = moe_step.all_to_all_bytes(tokens, h, shape.moe, lay.ep, dispatch, nb)
            t_layer = per_layer / cluster.nvlink + 4 * (lay.ep - 1) * cluster.latency_s
            links["ep"] = "loopback"
        elif lay.ep > 1:
            local = min(lay.ep, max(1, cluster.domain // lay.etp))
            intra, inter = moe_step.dispatch_split(tokens, h, shape.moe, lay.ep, local, dispatch, nb, lay.ep_dispatch)
            per_layer = intra + inter
            # four all-to-alls (dispatch and combine, forward and backward), a quarter of the bytes each
            t_layer = 4 * network.all_to_all_time(intra / 4, inter / 4, cluster.nvlink, cluster.network, net)
            links["ep"] = "nvlink" if not inter else "network"
            ep_network = inter * moe_here * m
        messages["ep"] = 4 * (lay.ep - 1) * moe_here * m
        if lay.etp > 1:  # the ETP group's gathers of the copies and reduce-scatters of the outputs
            gathered = tokens * shape.moe.top_k * moe_step.busiest(shape.moe, lay.ep) * lay.etp * h * nb
            ag, etp_link, steps_ag = _collective(cluster, "all_gather", gathered, lay.etp, 1, net)
            rs, _, steps_rs = _collective(cluster, "reduce_scatter", gathered, lay.etp, 1, net)
            t_layer += 2 * (ag + rs)
            per_layer += 4 * gathered * (lay.etp - 1) / lay.etp
            if etp_link == "network":  # an ETP group wider than a scale-up domain
                ep_network += 4 * gathered * (lay.etp - 1) / lay.etp * moe_here * m
            messages["ep"] += 2 * (steps_ag + steps_rs) * moe_here * m
            if links["ep"] == "none":
                links["ep"] = etp_link
        nbytes["ep"] = per_layer * moe_here * m
        e, hd = account("ep", t_layer, layer_all)
        exposed["ep"], hidden["ep"] = e * moe_here * m, hd * moe_here * m
    # activation offloading: out during the forward pass, back during the backward pass, over
    # the host link on the copy engines (hidden behind the pass unless it takes longer)
    offload = None
    if lay.offload_layers:
        moved = offload_bytes(shape, lay, precision_name)
        t_copy = moved / gpu.host_link()
        out_e, in_e = max(0.0, t_copy - t_fwd), max(0.0, t_copy - t_bwd)
        offload = (m * (out_e + in_e), m * (2 * t_copy - out_e - in_e), 2 * moved * m)
    # (S10) bubble
    bubble = pipeline_bubble_time(lay.pp, m, lay.schedule, t_fwd, t_bwd, lay.virtual_stages)

    compute_s = m * t_mb
    if not cpu:  # the SMs NCCL takes from the compute it overlaps
        compute_s += cal.contention * sum(hidden.values())
    breakdown = {"compute": compute_s, **{a: exposed[a] for a in OVERLAP_AXES}, "bubble": bubble}
    if offload is not None:
        breakdown["offload"], hidden["offload"], nbytes["offload"] = offload
        links["offload"], messages["offload"] = gpu.host_link_name, 2 * lay.offload_layers * m
    step = sum(breakdown.values())
    tokens = global_batch * s
    tps = tokens / step
    peak16 = gpu.bf16_peak if not cpu else gpu.peak_flops_per_s["fp32"]
    peak_p = gpu.peak(precision_name) if not cpu else peak16
    flops = model_flops_per_token(shape)
    st_b, act = memory_bytes(shape, lay, cluster, global_batch, convention, precision_name)
    usable = gpu.usable_memory_bytes if not cpu else math.inf
    return StepTime(step, breakdown, nbytes, tps, tps * flops / (lay.gpus * peak16),
                    tps * hardware_flops_per_token(shape, lay.recompute) / (lay.gpus * peak16), m, st_b, act,
                    st_b + act <= usable, eta, links, messages, hidden, usable, tps * flops / (lay.gpus * peak_p),
                    precision_name, tps * flops / lay.gpus, lay.gpus, ep_network)


# --------------------------------------------------------------------------
# (S12): a CPU machine, calibrated (the labs' own runs)
# --------------------------------------------------------------------------


def cpu_cluster(matmul_flops_per_s, bandwidth, latency_s, cores, memory_gb=1.0, collectives=None,
                fsdp_unit_s=0.0) -> Cluster:
    """One CPU core per rank as the "GPU": ``matmul_flops_per_s`` is its peak, gloo's
    ``bandwidth`` (bytes/s per rank and direction) and ``latency_s`` per message on every
    link, and no overlap: a rank's communication (gloo copies, the labs' rings) runs on the
    core that computes. ``collectives`` maps an op (``'all_gather'``, ``'reduce_scatter'``)
    to ``(latency_s, bandwidth, algorithm)`` measured for gloo's own implementation of it,
    ``algorithm`` the ring whose bytes it moves (gloo's reduce-scatter all-reduces the whole
    input, PyTorch PR #118911: ``'all_reduce'``). ``fsdp_unit_s``: FSDP2's own seconds per unit
    and micro-batch (charged to ``dp`` for ZeRO-3; measured by Lab 7 on a one-rank group, where
    no byte moves). ``cores`` is checked, not used."""
    rate = positive("matmul_flops_per_s", matmul_flops_per_s)
    bw = positive("bandwidth", bandwidth)
    if not latency_s >= 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s!r}")
    positive_integer("cores", cores)
    core = hardware.GPUSpec("CPU core", {"fp32": rate}, positive("memory_gb", memory_gb) * 1e9, bw, 2**31, bw,
                            2**31, 1, bw, ("fp32",), memory_source="measured")
    own = []
    for op, (alpha, beta, algo) in (collectives or {}).items():
        one_of("op", op, network.COLLECTIVES)
        one_of("algorithm", algo, network.COLLECTIVES)
        own.append((op, (float(alpha), float(positive("bandwidth", beta)), algo)))
    # Every rank is on this one machine, so every group is "inside the server": one link.
    if not fsdp_unit_s >= 0:
        raise ValueError(f"fsdp_unit_s must be >= 0, got {fsdp_unit_s!r}")
    return Cluster(core, bw, bw, 2**31, float(latency_s), overlap=False, collectives=tuple(own),
                   fsdp_unit_s=float(fsdp_unit_s))


def calibrate_cpu(cluster: Cluster, runs) -> CPUCalibration:
    """(S12)'s ``w0`` and ``c`` (``e_max = 1``: the peak is the measured matmul rate) from
    measured runs ``(shape, layout, global_batch, seconds)``. The step is linear in both,
    ``t = A (1 + w0 / h) + B + (L' + 1) m c``, with ``A`` the compute at the peak and ``B`` the
    rest: two runs of different widths solve it exactly; more are fitted by least squares
    on the relative error (each run weighted by ``1 / t``)."""
    if len(runs) < 2:
        raise ValueError(f"calibrate_cpu needs at least two runs, got {len(runs)}")
    rows, rhs = [], []
    for shape, lay, batch, seconds in runs:
        t = positive("seconds", seconds)
        base = step_time(shape, lay, cluster, batch, calibration=CPUCalibration(1.0, 0.0, ()))
        units = (math.ceil(shape.layers / lay.pp) + 1) * base.microbatches
        rows.append([base.breakdown_s["compute"] / shape.hidden / t, units / t])
        rhs.append((t - base.step_s) / t)
    a = np.array(rows)
    if np.linalg.matrix_rank(a / np.abs(a).max(axis=0)) < 2:
        raise ValueError("calibrate_cpu needs runs of at least two different widths")
    (w0, c), *_ = np.linalg.lstsq(a, np.array(rhs), rcond=None)
    names = tuple(f"{shape.layers} layers of width {shape.hidden}, {lay.micro_batch} x {batch // lay.micro_batch}"
                  for shape, lay, batch, _ in runs)
    return CPUCalibration(1.0, float(w0), names, float(c))


def days_to_train(tokens, tokens_per_s) -> float:
    """(S11): ``tokens / (tokens/s) / 86,400``."""
    return float(positive("tokens", tokens) / positive("tokens_per_s", tokens_per_s) / 86400)


# --------------------------------------------------------------------------
# Published runs (solutions.facts.PUBLISHED_RUNS)
# --------------------------------------------------------------------------


def cluster_of(gpu, network_bytes_per_s=None, nvlink_bytes_per_s=None) -> Cluster:
    """The reference cluster of ``gpu`` (a name or :class:`solutions.hardware.GPUSpec`): its
    scale-up links and one GPU's share of its node's NICs, unless given."""
    spec = hardware.find_gpu(gpu)
    return Cluster(spec, nvlink_bytes_per_s or spec.scale_up_bytes_per_s,
                   network_bytes_per_s or spec.network_bytes_per_s)


def run_shape(run: facts.PublishedRun) -> Shape:
    """The run's :class:`Shape`: a named architecture of :data:`solutions.facts.MOE_ARCHITECTURES`
    or :data:`solutions.facts.ARCHITECTURES` (``run.arch``) at the run's sequence length, or
    the run's own fields (GPT-style models take eq. 2's parameter count)."""
    if run.arch:
        arch = facts.MOE_ARCHITECTURES.get(run.arch) or facts.ARCHITECTURES[run.arch]
        return shape_of(arch, seq_len=run.seq_len)
    return Shape(run.layers, run.hidden, run.heads, run.seq_len, run.vocab, run.kv_heads, run.head_dim,
                 run.ffn_hidden, run.mlp, None if run.mlp == "gelu" else run.params, run.dropout)


def run_cluster(run: facts.PublishedRun) -> Cluster:
    return replace(cluster_of(run.gpu, run.network, run.nvlink), nic_share=run.nic_share)


def run_layout(run: facts.PublishedRun, virtual_stages=1) -> Layout:
    v = run.virtual_stages if run.virtual_stages is not None else virtual_stages
    return Layout(run.tp, run.cp, run.pp, run.dp, run.zero, run.micro_batch, run.recompute,
                  run.schedule if v > 1 or run.schedule != "interleaved" else "1f1b", v, run.attention,
                  run.ep, run.etp, run.sequence_parallel, offload_layers=run.offload_layers,
                  expert_kernels=run.expert_kernels, attention_precision=run.attention_precision)


def published_tokens_per_s(run: facts.PublishedRun) -> float:
    """Tokens/s per GPU as published, or from the published TFLOP/s per GPU or MFU, counted
    as the source counts them (``run.flops_counted``: Megatron-LM's eq. 3 with recomputation,
    ``'hardware'``; PaLM's model FLOPs, ``'model'``)."""
    if run.tokens_per_s_per_gpu is not None:
        return run.tokens_per_s_per_gpu
    shape = run_shape(run)
    counted = hardware_flops_per_token(shape, run.recompute) if run.flops_counted == "hardware" \
        else model_flops_per_token(shape)
    if run.tflops_per_gpu is not None:
        return run.tflops_per_gpu * 1e12 / counted
    return run.mfu * hardware.find_gpu(run.gpu).bf16_peak / model_flops_per_token(shape)


def published_mfu(run: facts.PublishedRun) -> float:
    """The run's MFU (PaLM's count, against the BF16 peak) from its published throughput."""
    return published_tokens_per_s(run) * model_flops_per_token(run_shape(run)) / hardware.find_gpu(run.gpu).bf16_peak


def predict_run(run: facts.PublishedRun, calibration: Calibration | None = None,
                network_efficiency: float | None = None, shape: Shape | None = None) -> tuple:
    """``(StepTime, Layout)`` for the run; where its chunks per stage are not published, the
    ``v`` (dividing the layers per stage, at most 8) that the model predicts fastest.
    ``shape``: another :class:`Shape` in place of the run's (a what-if)."""
    shape, cluster = shape or run_shape(run), run_cluster(run)
    options = [1]
    if run.virtual_stages is None and run.pp > 1:
        per_stage = math.ceil(shape.layers / run.pp)
        options = [v for v in range(1, 9) if per_stage % v == 0]
    best = None
    for v in options:
        lay = run_layout(run, v)
        st = step_time(shape, lay, cluster, run.global_batch, calibration=calibration,
                       network_efficiency=network_efficiency, precision_name=run.precision,
                       overlap=run.overlap, convention=run.convention)
        if best is None or st.step_s < best[0].step_s:
            best = (st, lay)
    return best
