"""A step-time model for training a dense transformer on a GPU cluster: compute
(with recomputation), exposed communication per parallel axis, and the pipeline
bubble, from which follow tokens/s, MFU, hardware-FLOPs utilisation and days.

The model, equation by equation (one GPU of the busiest pipeline stage; ``b``
sequences of ``s`` tokens per micro-batch, ``m`` micro-batches per step,
layout ``tp x cp x pp x dp``, ``v`` model chunks per pipeline stage):

(S1) **Model FLOPs per token** ``6 N + 12 L s a d_head`` (Kaplan et al. 2020
     sec. 2.1; Chowdhery et al. 2022 App. B), with the attention width
     ``heads x head size``, which is not ``d_model`` for every model (PaLM:
     48 x 256 = 12,288 against ``d_model`` 18,432).
(S2) **Hardware FLOPs per token** add what recomputation redoes
     (Korthikanti et al. 2022, sec. 5; Narayanan et al. 2021 eq. 3):
     selective recomputation one forward of the attention core,
     ``4 L s a d_head``; full recomputation one forward of every layer,
     ``2 (N - V h) + 4 L s a d_head`` (the output layer is not recomputed).
     With full recomputation and ``d_head = h / a`` this is eq. 3,
     ``96 B s L h^2 (1 + s / 6h + V / 16 L h)`` per iteration.
(S3) **Compute time** of one micro-batch on one GPU: its hardware FLOPs
     (``ceil(L / pp)`` layers, plus the output layer, of ``b s / cp`` tokens,
     split ``tp`` ways) at ``eta x peak``, where the achievable fraction
     ``eta = e_max h / (h + w0)`` grows with the model width ``h``: the
     memory-bound work of a layer (norms, activations, softmax, dropout) is
     ``O(s h)`` per token against the GEMMs' ``O(h^2)``, and both split
     alike under TP. (A width per GPU, ``h / tp``, fits the published runs
     worse: Megatron's 1.7B run without TP and its 530B run with TP8 have GEMMs
     of nearly the same width per GPU and 8 points of utilisation between them.)
     ``e_max`` and ``w0`` are calibrated per GPU generation
     (:data:`CALIBRATION`); collectives across servers reach
     :data:`NETWORK_EFFICIENCY` of the line rate.
(S4) **Tensor parallelism**: ``4`` ring all-reduces of ``b s h / cp`` elements
     per layer per micro-batch (Narayanan et al. 2021 sec. 3.2;
     :func:`solutions.communication.tensor_parallel_bytes_per_layer`), ``6``
     with full recomputation (the recomputed forward repeats its two);
     on NVLink inside a server, never overlapped.
(S5) **Context parallelism**: K and V gathered forward, their gradients
     reduce-scattered backward (:func:`solutions.context.context_parallel_bytes_per_layer`),
     overlapped with the attention core of the same layer; the excess is exposed.
(S6) **Pipeline**: each micro-batch sends ``b s h / (cp tp)`` activations forward
     and as many gradients backward per stage boundary (the scatter/gather of
     Narayanan et al. sec. 4.1). Steady-state sends overlap compute; the fill and
     the drain cross ``v (p - 1)`` boundaries each on the critical path.
(S7) **Data parallelism / ZeRO** on a shard of ``P / (tp pp)`` parameters, ring
     factors of :mod:`solutions.communication`:
     stages 0-1: one gradient all-reduce (or reduce-scatter + all-gather)
     per step; stage 2: a gradient reduce-scatter every micro-batch, one weight
     all-gather per step; stage 3 (FSDP): a weight all-gather for the forward, another for
     the backward and a gradient reduce-scatter, *every micro-batch*
     (Rajbhandari et al. 2020 sec. 7 count one pass; FSDP repeats them per
     micro-batch unless gradient synchronisation is deferred).
     Overlap: the gradient reduction overlaps the last micro-batch's backward;
     ZeRO-3's per-micro-batch traffic is prefetched behind that micro-batch's
     compute; what exceeds the compute it hides behind is exposed; the post-step
     weight all-gather of stages 1-2 is exposed.
(S8) **Bubble** of the schedule (:func:`pipeline_bubble_time`): GPipe and
     1F1B ``(p - 1) / v`` micro-batch times (Narayanan et al. sec. 2.2),
     ZB-H1 and ZB-H2 per Qi et al. (2024, Table 2).
(S9) **Step** = ``m x`` compute + bubble + exposed TP + CP + PP + DP;
     tokens/s = ``global batch x s / step``; MFU = tokens/s x (S1) / (GPUs x
     peak); HFU likewise with (S2); days = tokens / (tokens/s) / 86,400.

(S10) **Small models** (the labs' CPU runs, :func:`cpu_cluster`): a fixed cost per
     layer and micro-batch, ``c``, for the work that does not grow with the matrices
     (each operation's dispatch, on a GPU its kernel launch), added to (S3) for every layer
     of the stage and its output layer; a latency ``alpha`` per message (a ring step, a
     point-to-point send; Hockney 1994, ``alpha + n / beta``), counted per axis; and
     ``overlap=False`` where a rank's communication runs on the core that computes, so that
     nothing hides behind compute. All three are zero (or on) for the GPU clusters.

Links: NVLink for an axis whose group fits inside one server (8 GPUs), else the
cluster's network, per GPU and direction (:data:`solutions.facts.INTERCONNECTS`).
The optimizer step and load imbalance between stages are not modelled.

CPU calibration (:func:`calibrate_cpu`, used by ``labs/predict_vs_measure.py``): five
constants for one machine. Three are measured by micro-benchmarks: the per-core matmul
rate (the ``peak``; ``e_max = 1``), and gloo's ``alpha`` and bandwidth from Lab 1's
ring all-reduce at two sizes. Two are set by the one-process runs of the labs' GPT
(several widths, no communication): (S3)'s ``w0`` and (S10)'s ``c``, by least squares.
Every parallel run (DDP, FSDP with several micro-batches, TP, PP) is held out.

References: kaplan2020scaling, chowdhery2022palm, korthikanti2022reducing,
narayanan2021megatron, rajbhandari2020zero, zhao2023fsdp, qi2023zerobubble,
dao2022flashattention, liu2023ring, dubey2024llama3, hockney1994communication.
"""
from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass, field, replace
from typing import Optional

from . import communication, compute, context, efficiency, facts, memory
from ._validate import one_of, positive, positive_integer

__all__ = [
    "RECOMPUTE",
    "SCHEDULES",
    "ATTENTION",
    "GPUS_PER_SERVER",
    "Shape",
    "shape_of",
    "gpt_params",
    "Layout",
    "Cluster",
    "Calibration",
    "CALIBRATION",
    "NETWORK_EFFICIENCY",
    "SETTING_RUNS",
    "PUBLISHED_BOUNDS",
    "model_flops_per_token",
    "hardware_flops_per_token",
    "gemm_efficiency",
    "pipeline_bubble_time",
    "activation_bytes",
    "state_bytes",
    "StepTime",
    "step_time",
    "days_to_train",
    "cpu_cluster",
    "calibrate_cpu",
]

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1", "zb-h2")
ATTENTION = ("flash", "standard")
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
    """A dense transformer: ``head_dim`` defaults to ``hidden / heads``,
    ``kv_heads`` to ``heads``, ``ffn_hidden`` to ``4 hidden``; ``params`` to
    Narayanan et al.'s eq. 2 (:func:`gpt_params`). ``dropout`` as trained
    (GPT-3-era models had it, Llama 3 does not)."""

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

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "vocab"):
            positive_integer(name, getattr(self, name))
        for name in ("kv_heads", "head_dim", "ffn_hidden"):
            if getattr(self, name) is not None:
                positive_integer(name, getattr(self, name))
        one_of("mlp", self.mlp, efficiency.MLP_KINDS)
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"heads must divide hidden (or give head_dim), got hidden={self.hidden}, heads={self.heads}")
        if self.heads % self.kv:
            raise ValueError(f"kv_heads must divide heads, got heads={self.heads}, kv_heads={self.kv}")
        if self.params is not None:
            positive("params", self.params)

    @property
    def kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def attention_width(self) -> int:
        """``heads x head size``: the width of Q and of the attention output."""
        return self.heads * self.head_size

    @property
    def kv_width(self) -> int:
        """Elements per token of K (or V): ``kv_heads x head size``."""
        return self.kv * self.head_size

    @property
    def n_params(self) -> float:
        if self.params is not None:
            return float(self.params)
        return gpt_params(self.layers, self.hidden, self.vocab, self.seq_len)


def shape_of(arch: facts.Architecture, **overrides) -> Shape:
    """A :class:`Shape` from a published :class:`solutions.facts.Architecture`
    (its ``params``, head size, K/V heads and MLP); ``overrides`` replace fields."""
    shape = Shape(arch.layers, arch.d_model, arch.heads, arch.seq_len, vocab=arch.vocab or 51200,
                  kv_heads=arch.kv_heads, head_dim=arch.head_dim, ffn_hidden=arch.ffn_hidden,
                  mlp=arch.mlp, params=arch.params, dropout=arch.dropout)
    return replace(shape, **overrides) if overrides else shape


@dataclass(frozen=True)
class Layout:
    """How a run is split: degrees, ZeRO stage, micro-batch (sequences),
    recomputation, schedule and model chunks per stage (``virtual_stages``,
    more than 1 only for ``schedule='interleaved'``)."""

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

    def __post_init__(self):
        for name in ("tp", "cp", "pp", "dp", "micro_batch", "virtual_stages"):
            positive_integer(name, getattr(self, name))
        one_of("zero", self.zero, memory.ZERO_STAGES)
        one_of("recompute", self.recompute, RECOMPUTE)
        one_of("schedule", self.schedule, SCHEDULES)
        one_of("attention", self.attention, ATTENTION)
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise ValueError(f"virtual_stages > 1 needs schedule='interleaved', got {self.schedule!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class Cluster:
    """GPUs and links: ``nvlink`` and ``network`` in bytes/s per GPU and direction."""

    gpu: facts.GPU
    nvlink: float
    network: float
    gpus_per_server: int = GPUS_PER_SERVER
    #: (S10): seconds per message on every link, and whether communication can overlap compute.
    latency_s: float = 0.0
    overlap: bool = True


@dataclass(frozen=True)
class Calibration:
    """The two fitted constants of (S3) for one GPU generation, and the runs that set them."""

    e_max: float
    w0: float
    set_by: tuple
    #: (S10): fixed seconds per layer and micro-batch (forward and backward together).
    layer_overhead_s: float = 0.0


#: (S3)'s constants. A100: fitted to the two ends of Narayanan et al. 2021
#: Table 1 (the 1.7B and 1T runs), solving predicted = published for both.
#: H100: ``w0`` carried over from the A100 (the tile shapes of the GEMM kernels
#: are alike), ``e_max`` set by Llama 3 405B on 16,384 GPUs (Dubey et al. 2024
#: Table 4). :data:`solutions.facts.PUBLISHED_RUNS` keeps the runs;
#: ``tests/solutions/test_steptime.py`` re-derives these numbers from them with :func:`calibrate`.
CALIBRATION = {
    "A100": Calibration(0.673, 977.0, ("Megatron 1.7B", "Megatron 1008B")),
    "H100": Calibration(0.620, 977.0, ("Llama 3 405B, 16,384 GPUs",)),
}


#: The share of the network's line rate that collectives across servers reach
#: (NCCL rings over many nodes); set by the most communication-bound run of the
#: table, ZeRO-3 on 1,536 A100s (Narayanan et al. 2021, Table 2).
NETWORK_EFFICIENCY = 0.63


#: The rows of :data:`solutions.facts.PUBLISHED_RUNS` that set a constant; the others are held out.
SETTING_RUNS = frozenset({*CALIBRATION["A100"].set_by, *CALIBRATION["H100"].set_by, "ZeRO-3 174.6B, 1536 GPUs"})
#: What the model promises on the held-out rows (relative error of the MFU): the median and the
#: worst case that ``tests/solutions/test_steptime.py`` asserts, and the band the book draws.
PUBLISHED_BOUNDS = {"median": 0.15, "worst": 0.35, "band": 0.15}


def generation(gpu: facts.GPU) -> str:
    """``'A100'`` or ``'H100'`` (the H200 has the H100's compute): which :data:`CALIBRATION` applies."""
    name = gpu.name.upper()
    if name.startswith("A100"):
        return "A100"
    if name.startswith("H100") or name.startswith("H200"):
        return "H100"
    raise ValueError(f"no calibration for {gpu.name!r}; calibrated GPUs: A100, H100, H200")


# --------------------------------------------------------------------------
# (S1), (S2): FLOPs
# --------------------------------------------------------------------------


@lru_cache(maxsize=256)
def model_flops_per_token(shape: Shape) -> float:
    """(S1): ``6 N + 12 L s a d_head`` (Chowdhery et al. 2022, App. B), by
    :func:`solutions.compute.flops_per_token`."""
    return float(compute.flops_per_token(shape.n_params, shape.layers, shape.seq_len, shape.hidden,
                                         attention_width=shape.attention_width))


def hardware_flops_per_token(shape: Shape, recompute: str = "none") -> float:
    """(S2): model FLOPs plus the recomputed forward: selective ``4 L s a d_head``
    (the attention core), full ``2 (N - V h) + 4 L s a d_head``."""
    one_of("recompute", recompute, RECOMPUTE)
    core = 4.0 * shape.layers * shape.seq_len * shape.attention_width
    extra = {"none": 0.0, "selective": core,
             "full": 2.0 * (shape.n_params - shape.vocab * shape.hidden) + core}[recompute]
    return model_flops_per_token(shape) + extra


def gemm_efficiency(hidden, tp, calibration: Calibration) -> float:
    """(S3): ``e_max h / (h + w0)``; ``tp`` is accepted and does not enter
    (TP's cost is its communication, (S4))."""
    positive_integer("tp", tp)
    w = positive("hidden", hidden)
    return calibration.e_max * w / (w + calibration.w0)


# --------------------------------------------------------------------------
# (S8): bubble
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


def activation_bytes(shape: Shape, lay: Layout, m: int) -> float:
    """Activation bytes on the busiest GPU: its layers times the
    micro-batches in flight (:func:`_layer_microbatches`) times :func:`solutions.efficiency.activation_bytes_per_layer`
    (FlashAttention stores no scores; sequence parallelism when ``tp > 1``;
    ``s / cp`` tokens). Selective recomputation drops the stored scores of
    standard attention; full recomputation keeps each layer's input only,
    ``2 s b h / (tp cp)``, plus one layer's full activations while it is recomputed."""
    def full_layer(attention):
        return efficiency.activation_bytes_per_layer(
            shape.seq_len, lay.micro_batch, shape.hidden, shape.heads, ffn_hidden=shape.ffn_hidden,
            mlp=shape.mlp, attention=attention, kv_heads=shape.kv, dropout=shape.dropout, tp=lay.tp,
            sequence_parallel=lay.tp > 1, cp=lay.cp)

    flight = _in_flight(lay.pp, m, lay.schedule, lay.virtual_stages)
    layer_micro = _layer_microbatches(shape.layers, lay.pp, flight)
    if lay.recompute == "full":
        per_layer = 2.0 * shape.seq_len * lay.micro_batch * shape.hidden / (lay.tp * lay.cp)
        return float(layer_micro * per_layer + full_layer(lay.attention))
    attention = "flash" if lay.recompute == "selective" and lay.attention == "standard" else lay.attention
    stored = full_layer(attention)
    if lay.recompute == "selective" and lay.attention == "standard":
        stored -= 4.0 * shape.heads * shape.seq_len * lay.micro_batch / lay.tp / lay.cp  # no LSE either
    return float(layer_micro * stored)


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


def state_bytes(shape: Shape, lay: Layout, convention="zero_16") -> float:
    """Model-state bytes per GPU: :func:`solutions.memory.memory_per_gpu_3d` with
    ZeRO sharding over the ``dp x cp`` ranks that hold the same weights (as
    Megatron's distributed optimizer does)."""
    return float(memory.memory_per_gpu_3d(shape.n_params, lay.tp, lay.pp, lay.dp * lay.cp, lay.zero, convention))


# --------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step and what they are made of (``breakdown_s``:
    ``compute``, ``tp``, ``cp``, ``pp``, ``dp``, ``bubble``), traffic per GPU
    per step (``bytes``), throughput and utilisation, memory per GPU."""

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
    #: (S10): messages per GPU per step on each axis (ring steps, point-to-point sends).
    messages: dict = field(default_factory=dict)

    @property
    def memory_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes


def _link(group_span, cluster: Cluster, network_efficiency):
    """NVLink when the axis's group fits in one server, else the network at
    ``network_efficiency`` of its line rate."""
    if group_span <= cluster.gpus_per_server:
        return "nvlink", cluster.nvlink
    return "network", cluster.network * network_efficiency


def step_time(shape: Shape, lay: Layout, cluster: Cluster, global_batch: int, convention="zero_16",
              calibration: Calibration | None = None, bytes_per_element=2, defer_grad_sync=False,
              network_efficiency: float | None = None) -> StepTime:
    """(S1)-(S9) for one optimizer step of ``global_batch`` sequences.

    ``defer_grad_sync``: ZeRO-3 reduce-scatters the gradients once per step
    instead of every micro-batch (FSDP2's ``set_requires_gradient_sync(False)``)."""
    global_batch = positive_integer("global_batch", global_batch)
    if shape.seq_len % lay.cp:
        raise ValueError(f"cp must divide seq_len, got cp={lay.cp}, seq_len={shape.seq_len}")
    if global_batch % (lay.dp * lay.micro_batch):
        raise ValueError(f"dp x micro_batch must divide global_batch, got dp={lay.dp}, "
                         f"micro_batch={lay.micro_batch}, global_batch={global_batch}")
    if lay.tp > shape.heads or shape.heads % lay.tp:
        raise ValueError(f"tp must divide the number of heads ({shape.heads}), got tp={lay.tp}")
    layers_here = math.ceil(shape.layers / lay.pp)
    if lay.virtual_stages > 1 and layers_here % lay.virtual_stages:
        raise ValueError(f"virtual_stages must divide the layers per stage ({layers_here}), got {lay.virtual_stages}")
    cal = calibration or CALIBRATION[generation(cluster.gpu)]
    net = NETWORK_EFFICIENCY if network_efficiency is None else network_efficiency
    m = global_batch // (lay.dp * lay.micro_batch)
    b, s, h, nb = lay.micro_batch, shape.seq_len, shape.hidden, bytes_per_element
    P = shape.n_params

    # (S2)-(S3): one micro-batch on one GPU of the busiest stage.
    tokens_mb = b * s / lay.cp
    layer_hw = (hardware_flops_per_token(shape, lay.recompute) - 6.0 * shape.vocab * shape.hidden) / shape.layers
    flops_mb = (layers_here * layer_hw + 6.0 * shape.vocab * shape.hidden) * tokens_mb / lay.tp
    eta = gemm_efficiency(h, lay.tp, cal)
    rate = eta * cluster.gpu.peak_flops_per_s
    t_mb = flops_mb / rate + (layers_here + 1) * cal.layer_overhead_s
    t_fwd = t_mb / (4.0 if lay.recompute == "full" else 3.0)
    t_bwd = t_mb - t_fwd

    links, nbytes, exposed, messages = {}, {}, {}, {}
    alpha, hides = cluster.latency_s, cluster.overlap

    def hidden(seconds, behind):
        """What of ``seconds`` of communication stays exposed behind ``behind`` of compute."""
        return max(0.0, seconds - behind) if hides else seconds
    # (S4) tensor parallelism
    tp_name, tp_bw = _link(lay.tp, cluster, net)
    links["tp"] = tp_name
    per_layer = communication.tensor_parallel_bytes_per_layer(b, s // lay.cp, h, lay.tp, nb) if lay.tp > 1 else 0.0
    tp_calls = (1.5 if lay.recompute == "full" else 1.0) * layers_here * m
    nbytes["tp"] = per_layer * tp_calls
    messages["tp"] = 4 * 2 * (lay.tp - 1) * tp_calls  # 4 ring all-reduces of 2 (t - 1) steps
    exposed["tp"] = nbytes["tp"] / tp_bw + messages["tp"] * alpha
    # (S5) context parallelism, overlapped with the attention core
    cp_name, cp_bw = _link(lay.tp * lay.cp, cluster, net)
    links["cp"] = cp_name
    if lay.cp > 1:
        cp_layer = context.context_parallel_bytes_per_layer(b, s, shape.kv_width // lay.tp or 1, lay.cp, nb)
        core = 12.0 * s * shape.attention_width * tokens_mb / lay.tp / rate / 2  # causal: half the blocks
        nbytes["cp"] = cp_layer * layers_here * m
        messages["cp"] = 2 * (lay.cp - 1) * layers_here * m  # a ring pass forward, one backward
        exposed["cp"] = hidden(cp_layer / cp_bw + 2 * (lay.cp - 1) * alpha, core) * layers_here * m
    else:
        nbytes["cp"] = exposed["cp"] = messages["cp"] = 0.0
    # (S6) pipeline sends
    pp_name, pp_bw = _link(lay.gpus, cluster, net)
    links["pp"] = pp_name
    send = b * s * h * nb / (lay.cp * lay.tp)
    nbytes["pp"] = 2 * send * m * lay.virtual_stages if lay.pp > 1 else 0.0
    messages["pp"] = 2 * m * lay.virtual_stages if lay.pp > 1 else 0.0
    crossings = 2 * lay.virtual_stages * (lay.pp - 1)  # the fill and the drain
    exposed["pp"] = crossings * (send / pp_bw + alpha)
    if not hides and lay.pp > 1:  # and every steady-state send of this stage as well
        exposed["pp"] += nbytes["pp"] / pp_bw + messages["pp"] * alpha
    # (S7) data parallelism / ZeRO over the dp x cp ranks that share the weights
    d = lay.dp * lay.cp
    dp_name, dp_bw = _link(lay.tp * lay.cp * lay.dp, cluster, net)
    links["dp"] = dp_name
    shard = P / (lay.tp * lay.pp) * nb
    ring = (d - 1) / d
    units = layers_here + 1  # ZeRO-3 gathers layer by layer (and the output layer)
    if d == 1:
        nbytes["dp"] = exposed["dp"] = messages["dp"] = 0.0
    elif lay.zero == 3:
        passes = 2 if defer_grad_sync else 3
        per_mb = passes * shard * ring
        nbytes["dp"] = per_mb * m + (shard * ring if defer_grad_sync else 0.0)
        msgs_mb = passes * (d - 1) * units
        messages["dp"] = msgs_mb * m + ((d - 1) * units if defer_grad_sync else 0)
        exposed["dp"] = m * hidden(per_mb / dp_bw + msgs_mb * alpha, t_mb)
        if defer_grad_sync:
            exposed["dp"] += hidden(shard * ring / dp_bw + (d - 1) * units * alpha, t_bwd)
    else:
        k = m if lay.zero == 2 else 1
        reduce = shard * ring * k * (2 if lay.zero == 0 else 1)
        gather = shard * ring if lay.zero in (1, 2) else 0.0
        reduce_msgs = (d - 1) * k * (2 if lay.zero == 0 else 1)  # one bucket per reduction
        gather_msgs = (d - 1) if lay.zero in (1, 2) else 0
        nbytes["dp"] = reduce + gather
        messages["dp"] = reduce_msgs + gather_msgs
        hide = t_bwd * k
        exposed["dp"] = hidden(reduce / dp_bw + reduce_msgs * alpha, hide) + gather / dp_bw + gather_msgs * alpha
    # (S8) bubble
    bubble = pipeline_bubble_time(lay.pp, m, lay.schedule, t_fwd, t_bwd, lay.virtual_stages)

    compute_s = m * t_mb
    breakdown = {"compute": compute_s, **exposed, "bubble": bubble}
    step = sum(breakdown.values())
    tokens = global_batch * s
    tps = tokens / step
    peak_all = lay.gpus * cluster.gpu.peak_flops_per_s
    st = state_bytes(shape, lay, convention)
    act = activation_bytes(shape, lay, m)
    return StepTime(step, breakdown, nbytes, tps, tps * model_flops_per_token(shape) / peak_all,
                    tps * hardware_flops_per_token(shape, lay.recompute) / peak_all, m, st, act,
                    st + act <= cluster.gpu.memory_gb * 1e9, eta, links, messages)


# --------------------------------------------------------------------------
# (S10): a CPU machine, calibrated (the labs' own runs)
# --------------------------------------------------------------------------


def cpu_cluster(matmul_flops_per_s, bandwidth, latency_s, cores, memory_gb=1.0) -> Cluster:
    """One CPU core per rank as the "GPU": ``matmul_flops_per_s`` is its peak, gloo's
    ``bandwidth`` (bytes/s per rank and direction) and ``latency_s`` per message on every
    link, and no overlap: a rank's communication (gloo copies, the labs' rings) runs on the
    core that computes. ``cores`` is checked, not used: more ranks than cores is the
    user's choice (and the labs warn about it)."""
    core = facts.GPU("CPU core", positive("matmul_flops_per_s", matmul_flops_per_s), "fp32 matmul",
                     positive("memory_gb", memory_gb), "measured")
    bw = positive("bandwidth", bandwidth)
    if not latency_s >= 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s!r}")
    positive_integer("cores", cores)
    # Every rank is on this one machine, so every group is "inside the server": one link.
    return Cluster(core, bw, bw, 2**31, float(latency_s), overlap=False)


def calibrate_cpu(cluster: Cluster, runs) -> Calibration:
    """(S3)'s ``w0`` and (S10)'s ``c`` (``e_max = 1``: the peak is the measured matmul
    rate) from measured runs ``(shape, layout, global_batch, seconds)``. The step is linear
    in both, ``t = A (1 + w0 / h) + B + (L' + 1) m c``, with ``A`` the compute at the peak
    and ``B`` the rest: two runs of different widths solve it exactly; more are fitted by
    least squares on the relative error (each run weighted by ``1 / t``)."""
    import numpy as np

    if len(runs) < 2:
        raise ValueError(f"calibrate_cpu needs at least two runs, got {len(runs)}")
    rows, rhs = [], []
    for shape, lay, batch, seconds in runs:
        t = positive("seconds", seconds)
        base = step_time(shape, lay, cluster, batch, calibration=Calibration(1.0, 0.0, ()))
        units = (math.ceil(shape.layers / lay.pp) + 1) * base.microbatches
        rows.append([base.breakdown_s["compute"] / shape.hidden / t, units / t])
        rhs.append((t - base.step_s) / t)
    a = np.array(rows)
    if np.linalg.matrix_rank(a / np.abs(a).max(axis=0)) < 2:
        raise ValueError("calibrate_cpu needs runs of at least two different widths")
    (w0, c), *_ = np.linalg.lstsq(a, np.array(rhs), rcond=None)
    names = tuple(f"{shape.layers} layers of width {shape.hidden}, {lay.micro_batch} x {batch // lay.micro_batch}"
                  for shape, lay, batch, _ in runs)
    return Calibration(1.0, float(w0), names, float(c))


def days_to_train(tokens, tokens_per_s) -> float:
    """(S9): ``tokens / (tokens/s) / 86,400``."""
    return float(positive("tokens", tokens) / positive("tokens_per_s", tokens_per_s) / 86400)


# --------------------------------------------------------------------------
# Published runs (solutions.facts.PUBLISHED_RUNS)
# --------------------------------------------------------------------------


def run_shape(run: facts.PublishedRun) -> Shape:
    """The run's :class:`Shape`; GPT-style (GeLU) models take eq. 2's parameter count."""
    return Shape(run.layers, run.hidden, run.heads, run.seq_len, run.vocab, run.kv_heads, None, run.ffn_hidden,
                 run.mlp, None if run.mlp == "gelu" else run.params, run.dropout)


def run_cluster(run: facts.PublishedRun) -> Cluster:
    return Cluster(facts.GPUS[run.gpu], run.nvlink, run.network)


def run_layout(run: facts.PublishedRun, virtual_stages=1) -> Layout:
    v = run.virtual_stages if run.virtual_stages is not None else virtual_stages
    return Layout(run.tp, run.cp, run.pp, run.dp, run.zero, run.micro_batch, run.recompute,
                  run.schedule if v > 1 or run.schedule != "interleaved" else "1f1b", v, run.attention)


def published_mfu(run: facts.PublishedRun) -> float:
    """The run's MFU as published, or from its TFLOP/s per GPU: tokens/s =
    ``n X / (FLOPs per token as counted)``, MFU = tokens/s x (S1) / (n peak)."""
    if run.mfu is not None:
        return run.mfu
    shape = run_shape(run)
    counted = hardware_flops_per_token(shape, run.recompute) if run.flops_counted == "hardware" \
        else model_flops_per_token(shape)
    return run.tflops_per_gpu * 1e12 / counted * model_flops_per_token(shape) / facts.GPUS[run.gpu].peak_flops_per_s


def predict_run(run: facts.PublishedRun, calibration: Calibration | None = None,
                network_efficiency: float | None = None) -> tuple:
    """``(StepTime, Layout)`` for the run; where its chunks per stage are not
    published, the ``v`` (dividing the layers per stage, at most 8) that the
    model predicts fastest."""
    shape, cluster = run_shape(run), run_cluster(run)
    options = [1]
    if run.virtual_stages is None and run.pp > 1:
        per_stage = math.ceil(run.layers / run.pp)
        options = [v for v in (1, 2, 4, 8) if per_stage % v == 0]
    best = None
    for v in options:
        lay = run_layout(run, v)
        st = step_time(shape, lay, cluster, run.global_batch, calibration=calibration,
                       network_efficiency=network_efficiency)
        if best is None or st.step_s < best[0].step_s:
            best = (st, lay)
    return best


def calibrate(rows, w0=None) -> Calibration:
    """(S3)'s constants from published runs: with ``w0`` given, the ``e_max``
    that matches the first row's MFU; otherwise ``(e_max, w0)`` matching two rows."""
    from scipy.optimize import brentq

    def err(row, e, w):
        return predict_run(row, Calibration(e, w, ()))[0].mfu - published_mfu(row)

    names = tuple(r.name for r in rows)
    if w0 is not None:
        return Calibration(brentq(lambda e: err(rows[0], e, w0), 0.05, 1.5, xtol=1e-6), w0, names)
    a, b = rows

    def e_for(w):
        return brentq(lambda e: err(a, e, w), 0.05, 20.0, xtol=1e-7)

    w = brentq(lambda w: err(b, e_for(w), w), 1.0, 50000.0, xtol=1e-3)
    return Calibration(e_for(w), w, names)
