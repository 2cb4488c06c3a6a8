"""A training planner: from a compute budget, or a model size and token count, and a
cluster, to a compute-optimal allocation, the fastest parallel layout that fits, its
memory per GPU, predicted step time, throughput, MFU and days to train.

    python -m solutions.plan --budget 5.88e23 --gpu H100 --count 1024
    python -m solutions.plan --model 70e9 --tokens 1.4e12 --gpu H100 --count 1024
    python -m solutions.plan --model 405e9 --tokens 15.6e12 --gpu H100 --count 16384 --tp 8 --pp 16 --json
    python -m solutions.plan --arch DeepSeek-V3 --tokens 14.8e12 --gpu H800 --count 2048 --precision fp8 --ep 64
    python -m solutions.plan --arch "Llama 3 405B" --tokens 15.6e12 --gpu GB200 --count 256 --precision mxfp8

Every figure comes from the rest of :mod:`solutions`: the allocation from
:mod:`solutions.scaling`, the step time (compute from the shapes each GPU runs, exposed and
hidden communication per axis, the bubble) from :mod:`solutions.steptime`, the hardware from
the GPU table of :mod:`solutions.hardware`, the precision recipes from
:mod:`solutions.precision` and the mixture-of-experts terms from :mod:`solutions.moe_step`.

**The search.** Every layout the cluster allows is predicted: TP within a scale-up domain
(a power of two dividing the heads), CP (only for sequences of 32K tokens or more, unless
set), PP (any degree dividing the GPU count, up to the layer count), DP with ZeRO stage 0-3,
for a mixture of experts EP (a power of two dividing the experts, folded into TP x CP x DP),
the micro-batch (1-8 sequences), the recomputation (none, selective, full: the lightest
that fits) and, with pipelining, interleaving (``v`` chunks per stage). Layouts whose model
state and activations do not fit in the memory CUDA reports (less an allocator reserve)
are dropped; the fastest predicted step wins. Anything given on the command line is kept,
and the plan says what was chosen and what was given. ``--mfu`` overrides the predicted MFU
in the time to train (the layout is still the fastest predicted).

**FSDP.** ZeRO stage 3 is planned with FSDP2's defaults: the weights are gathered again for
each micro-batch's forward and backward pass (``reshard_after_forward=True``) and every
micro-batch's gradients are reduce-scattered. Those are defaults, not a property of FSDP:
``reshard_after_forward=False`` keeps the gathered weights between forward and backward
(ZeRO-2's memory), and ``set_requires_gradient_sync(False)`` defers the reduction to the last
micro-batch.

:func:`choose_layout` keeps the rule of thumb of the course's first edition (DP, then FSDP,
then TP + FSDP, then TP + PP + ZeRO-1); the plan predicts it too and says how it compares.

References: hoffmann2022chinchilla, besiroglu2024chinchilla, rajbhandari2020zero,
korthikanti2022reducing, narayanan2021megatron, dubey2024llama3, liu2024deepseekv3.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import sys
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from . import (after_chinchilla, calibration, efficiency, facts, hardware, layer_time, memory, moe_step, precision, scaling,
               sizing, steptime)
from ._format import count as count_words, gib as _gib, plural as _n, seconds as _time, wrap_lines
from ._validate import count_with_suffix, nonnegative_integer, one_of, positive, positive_integer, terse_argparse_errors

__all__ = [
    "GPUS_PER_SERVER", "STATE_SHARE", "DEFAULT_BATCH_TOKENS", "DEFAULT_CONSTANTS", "RECOMPUTE_MODES", "Plan",
    "find_gpu", "nearest_architecture", "regime", "choose_layout", "state_breakdown_3d", "cluster_for",
    "search_layouts", "make_plan", "format_plan", "memory_budget_words", "link_name", "traffic_words", "plan_json",
    "build_parser", "main",
]

#: GPUs per HGX/DGX server: the reach of NVLink on the course's reference machines.
GPUS_PER_SERVER = steptime.GPUS_PER_SERVER
#: The share of a GPU's memory the layout rule lets model state take.
STATE_SHARE = 0.25
#: Tokens per optimizer step: Llama 3 405B's batch for most of its training, 16M tokens
#: (Dubey et al. 2024, sec. 3.4.1; from :data:`solutions.facts.LLAMA3_405B_BATCH_SCHEDULE`).
DEFAULT_BATCH_TOKENS = facts.LLAMA3_405B_BATCH_SCHEDULE.stages[-1][0]
#: The constant set the plan's compute-optimal line uses: the Epoch AI refit, which section 3
#: stands behind (the paper's rounded constants are a rounding artefact there: 32.5B at 93
#: tokens per parameter for Chinchilla's own budget). The other sets are shown beside it.
DEFAULT_CONSTANTS = "epoch_2024"
RECOMPUTE_MODES = ("none", "selective", "full")
#: The largest model the planner sizes: a thousand trillion parameters, some 500 times the
#: largest published (about 2T). Beyond it a resized shape's depth outgrows what a float counts
#: exactly, and no plan of it means anything.
MAX_MODEL_PARAMS = 1e15
#: How far a shape whose depth the user gave may count from the size asked for and still take
#: that size as its count: published counts and the shape's own differ by a few per cent (Gopher
#: and Chinchilla by 7-8%, embeddings and norms counted differently), a wrong shape by far more.
SHAPE_COUNT_TOLERANCE = 0.10
_PUBLISHED = ("epoch_2024", "hoffmann_rounded", "hoffmann_precise")
#: The constant sets by the names readers know them by.
CONSTANT_NAMES = {"epoch_2024": "the Epoch AI refit", "hoffmann_rounded": "Hoffmann et al., rounded",
                   "hoffmann_precise": "Hoffmann et al., unrounded", "exercise": "Exercise 1's constants"}


def find_gpu(name) -> hardware.GPUSpec:
    """The GPU of :data:`solutions.hardware.GPU_TABLE` called ``name`` or an alias of it
    (case and spaces ignored: ``H100`` is the SXM part, ``A100`` the 80 GB one, ``GB200 NVL72``
    the GB200); a one-line ``ValueError`` listing the known ones otherwise, or naming a GPU the
    table keeps for the labs only (:data:`solutions.hardware.PLANNABLE` leaves it out)."""
    g = hardware.find_gpu(name)
    if g.lab_only:
        raise ValueError(f"gpu {g.name} is in the hardware table for the labs only, not for planning clusters; "
                         f"choose one of {', '.join(hardware.PLANNABLE)}")
    return g


def nearest_architecture(params: float) -> facts.Architecture:
    """The published dense shape (:data:`solutions.facts.ARCHITECTURES`) closest in parameter
    count on a log scale; ties go to the first listed. Layers, width, heads and sequence
    length drive activations and tensor-parallel traffic."""
    params = float(positive("model_params", params))
    return min(facts.ARCHITECTURES.values(), key=lambda a: abs(math.log(a.params / params)))


def regime(params: float) -> str:
    """``'small'``, ``'medium'``, ``'large'`` or ``'frontier'``: the chapter's size regimes
    (boundaries :data:`solutions.quoted.REGIME_BOUNDS`)."""
    from .quoted import REGIME_BOUNDS

    params = float(positive("model_params", params))
    if params <= REGIME_BOUNDS["small_max"]:
        return "small"
    if params <= REGIME_BOUNDS["medium_max"]:
        return "medium"
    if params <= REGIME_BOUNDS["frontier_min"]:
        return "large"
    return "frontier"


def _check_divides(count, tp, pp):
    if count % (tp * pp):
        raise ValueError(f"tp * pp must divide count: tp={tp} x pp={pp} = {tp * pp} does not divide count={count}")


def choose_layout(params, count, gpu_memory_bytes, convention="zero_16", tp=None, pp=None, zero=None):
    """``(tp, pp, dp, zero_stage, reasons)`` by the module's layout rule; any of ``tp``,
    ``pp``, ``zero`` given by the caller is kept. ``reasons`` are sentences for the plan."""
    P = float(positive("model_params", params))
    count = positive_integer("count", count)
    mem = float(positive("gpu_memory_bytes", gpu_memory_bytes))
    for name, v in (("tp", tp), ("pp", pp)):
        if v is not None:
            positive_integer(name, v)
    if zero is not None:
        one_of("zero", zero, memory.ZERO_STAGES)
    kind = regime(P)
    reasons = []
    server = min(GPUS_PER_SERVER, count)
    if kind == "small":
        t, p, z = 1, 1, 0
        reasons.append("under 1B parameters: plain data parallelism, the full state fits on every GPU")
    elif kind == "medium":
        t, p, z = 1, 1, 3
        reasons.append("1B to 30B parameters: FSDP (ZeRO-3) over all GPUs shards the state and keeps the code data-parallel")
    elif kind == "large":
        t, p, z = server, 1, 3
        reasons.append(f"30B to 100B parameters: tensor parallelism over the {server} GPUs of a server "
                       "(activations, fast links), FSDP over the servers")
    else:
        t, z = server, 1
        p = 1
        while True:
            dp = count // (t * p) if count % (t * p) == 0 else 0
            if dp and memory.memory_per_gpu_3d(P, t, p, dp, z, convention) <= STATE_SHARE * mem:
                break
            if t * p * 2 > count or count % (t * p * 2):
                break
            p *= 2
        reasons.append(f"over 100B parameters: TP{t} in the server, PP across servers, DP with ZeRO-1; "
                       f"PP{p} is the smallest power of two that brings the state per GPU under "
                       f"{STATE_SHARE:.0%} of the GPU's memory")
    if tp is not None:
        t = tp
        reasons.append(f"tp={tp} set by hand")
    if pp is not None:
        p = pp
        reasons.append(f"pp={pp} set by hand")
    if zero is not None:
        z = zero
        reasons.append(f"ZeRO stage {zero} set by hand")
    _check_divides(count, t, p)
    return t, p, count // (t * p), z, reasons


def state_breakdown_3d(model_params, tp, pp, dp, zero_stage=0, convention="zero_16") -> dict:
    """Model-state bytes per GPU of a dense model under TP x PP x DP with ZeRO, by component:
    ``{"weights", "grads", "optimizer"}``; the sum is :func:`solutions.memory.memory_per_gpu_3d`."""
    P = float(positive("model_params", model_params))
    tp = positive_integer("tp", tp)
    pp = positive_integer("pp", pp)
    dp = positive_integer("dp", dp)
    one_of("zero_stage", zero_stage, memory.ZERO_STAGES)
    conv = memory.get_convention(convention)
    shard = P / (tp * pp)
    sharded = {"optimizer": zero_stage >= 1, "grads": zero_stage >= 2, "weights": zero_stage >= 3}
    out = {part: getattr(conv, part) * shard / (dp if sharded[part] else 1) for part in ("weights", "grads", "optimizer")}
    total = memory.memory_per_gpu_3d(P, tp, pp, dp, zero_stage, convention)
    if not np.isclose(sum(out.values()), total, rtol=1e-12):  # pragma: no cover - one formula, two spellings
        raise AssertionError("state_breakdown_3d disagrees with memory.memory_per_gpu_3d")
    return out


#: Sequences of at least this many tokens make the search try context parallelism.
CP_FROM_SEQ_LEN = 32_768
#: What the search tries when a degree is not given.
TP_CHOICES = (1, 2, 4, 8)
CP_CHOICES = (1, 2, 4, 8, 16, 32)
EP_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MICRO_BATCH_CHOICES = (1, 2, 4, 8)
VIRTUAL_STAGE_CHOICES = (1, 2, 4, 8)
#: The rules that turn a candidate layout away in :func:`search_layouts`: offloading every layer
#: of a stage, a pipeline setting without stages, chunks that do not divide a stage's layers, no
#: room for EP x ETP, a global batch that is no whole number of micro-batches per replica (for
#: the interleaved schedule, no multiple of the stages), a model state that alone overflows
#: where another layout already needs less (``memory``: not predicted, and not fitting either),
#: and a sequence that TP x CP cannot cut evenly (``sequence``).
REJECTIONS = ("offload", "pipeline", "chunks", "experts", "batch", "memory", "sequence")
#: How many of the fastest layouts the plan prints.
TOP = 5


def cluster_for(gpu, network_bytes_per_s=None, nvlink_bytes_per_s=None) -> steptime.Cluster:
    """The GPU's reference system (:mod:`solutions.hardware`): its scale-up links and one
    GPU's share of its node's NICs, unless given (bytes/s per GPU and direction)."""
    if network_bytes_per_s is not None:
        positive("network", network_bytes_per_s)
    return steptime.cluster_of(gpu, network_bytes_per_s, nvlink_bytes_per_s)


def _ep_choices(shape, t, c, d, ep, etp):
    if not shape.is_moe:
        return [1]
    if ep is not None:
        return [ep] if (t * c * d) % (ep * etp) == 0 and shape.moe.experts % ep == 0 else []
    return [e for e in EP_CHOICES if shape.moe.experts % e == 0 and (t * c * d) % (e * etp) == 0]


def search_layouts(shape: steptime.Shape, cluster: steptime.Cluster, count, global_batch, convention="zero_16",
                   tp=None, cp=None, pp=None, dp=None, zero=None, micro_batch=None, recompute=None,
                   virtual_stages=None, schedule=None, attention="flash", ep=None, etp=1, precision_name="bf16",
                   overlap=None, ep_dispatch="deepep", offload_layers=0, expert_kernels="grouped",
                   attention_precision="bf16", rejected=None):
    """Every layout of ``count`` GPUs with the given degrees kept: ``(fitting, others)``,
    ``fitting`` a list of ``(StepTime, Layout)`` predicted by :func:`solutions.steptime.step_time`
    and sorted by step time, ``others`` (which do not fit) a list of ``(bytes needed per GPU,
    Layout)`` sorted by memory (:func:`solutions.steptime.memory_bytes`: a layout that does not
    fit is not timed, which is most of the work of a search that memory limits). For each layout the lightest recomputation that fits is kept (a
    heavier one only costs time), unless the recomputation is given. A layout whose model state
    alone overflows is predicted only where it could need less memory than every layout tried
    before it, and then with its heaviest recomputation; the others count as ``'memory'``
    rejections (they do not fit either). ``rejected``, a dict if
    given, counts the candidates each rule turned away (:data:`REJECTIONS`), so that a search
    that finds nothing can say why."""
    tally = rejected if rejected is not None else {}

    def reject(rule):
        tally[rule] = tally.get(rule, 0) + 1

    count = positive_integer("count", count)
    tps = [tp] if tp else [t for t in TP_CHOICES if t <= cluster.domain and shape.heads % t == 0
                           and (shape.kv % t == 0 or t % shape.kv == 0) and count % t == 0]
    if cp:
        cps = [cp]
    elif shape.seq_len >= CP_FROM_SEQ_LEN:
        cps = [c for c in CP_CHOICES if _splits_sequence(shape.seq_len, 1, c)]
    else:
        cps = [1]
    pps = [pp] if pp else [p for p in range(1, min(shape.layers, count) + 1) if count % p == 0]
    zeros = [zero] if zero is not None else list(memory.ZERO_STAGES)
    mbs = [micro_batch] if micro_batch else list(MICRO_BATCH_CHOICES)
    recs = [recompute] if recompute else list(steptime.RECOMPUTE)
    fitting, others = [], []
    limit = cluster.gpu.usable_memory_bytes
    least = math.inf  # the least memory of a layout that does not fit, so far
    for t in tps:
        for c in cps:
            if not _splits_sequence(shape.seq_len, t, c):
                reject("sequence")
                continue
            for p in pps:
                if count % (t * c * p):
                    continue
                d = count // (t * c * p)
                if dp and d != dp:
                    continue
                per_stage = math.ceil(shape.layers / p)
                if offload_layers >= per_stage:  # offloading keeps at least one layer per stage on the GPU
                    reject("offload")
                    continue
                if p == 1 and _asks_for_pipeline(schedule, virtual_stages):
                    reject("pipeline")
                    continue  # layouts with a pipeline only
                if virtual_stages and per_stage % virtual_stages:
                    reject("chunks")
                    continue  # every chunk holds the same number of layers
                if p == 1:
                    scheds = [("1f1b", 1)]
                elif schedule and schedule != "interleaved":
                    scheds = [(schedule, 1)]
                else:
                    vs = [virtual_stages] if virtual_stages else [v for v in VIRTUAL_STAGE_CHOICES if per_stage % v == 0]
                    scheds = [("interleaved" if v > 1 else "1f1b", v) for v in vs]
                    if schedule == "interleaved":  # one chunk per stage is plain 1F1B, not interleaving
                        scheds = [x for x in scheds if x[0] == "interleaved"]
                        if not scheds:
                            reject("chunks")
                            continue
                experts = _ep_choices(shape, t, c, d, ep, etp)
                if not experts:
                    reject("experts")
                for e in experts:
                    # where no ZeRO group has more than one rank (DP x CP = 1, one expert-data-parallel
                    # rank), every stage is stage 0: search it once
                    alone = d * c == 1 and (not shape.is_moe or (t * c * d) // (e * etp) == 1)
                    for z in (zeros if zero is not None or not alone else [0]):
                        base = steptime.Layout(t, c, p, d, z, 1, "none", "1f1b", 1, attention, e, etp,
                                               ep_dispatch=ep_dispatch, offload_layers=offload_layers,
                                               expert_kernels=expert_kernels, attention_precision=attention_precision)
                        state = steptime.state_bytes(shape, base, convention, precision_name)
                        for b in mbs:
                            if global_batch % (d * b):
                                reject("batch")
                                continue
                            m = global_batch // (d * b)
                            for sch, v in scheds:
                                if sch == "interleaved" and m % p:
                                    reject("batch")
                                    continue
                                for r in recs:
                                    lay = replace(base, micro_batch=b, recompute=r, schedule=sch, virtual_stages=v)
                                    # the state alone does not fit: only this layout's lightest setting
                                    # (its heaviest recomputation) may need less than the least so far
                                    if state > limit and (r != recs[-1] or state >= least):
                                        reject("memory")
                                        continue
                                    # memory first: a layout that does not fit is not timed (the state
                                    # does not depend on the micro-batch, schedule or recomputation)
                                    needed = state + steptime.activation_bytes(shape, lay, m, precision_name)
                                    if needed > limit:
                                        others.append((needed, lay))
                                        least = min(least, needed)
                                        continue
                                    st = steptime.step_time(shape, lay, cluster, global_batch, convention,
                                                            precision_name=precision_name, overlap=overlap)
                                    fitting.append((st, lay))
                                    break
    fitting.sort(key=lambda x: x[0].step_s)
    others.sort(key=lambda x: x[0])
    return fitting, others


def _splits_sequence(seq_len: int, tp: int, cp: int) -> bool:
    """Whether Megatron-LM can cut a sequence over ``cp`` context-parallel ranks and then over
    ``tp`` sequence-parallel ones: load-balanced causal CP splits it into 2 x CP equal chunks
    (``seq-length should be a multiple of 2 * context-parallel-size``, megatron/training/arguments.py),
    and sequence parallelism scatters each rank's part evenly over TP (megatron/core/tensor_parallel/mappings.py)."""
    if cp > 1 and seq_len % (2 * cp):
        return False
    return (seq_len // cp) % tp == 0


def _tokens(n: float) -> str:
    """A token count in words: ``'16.8M'``, ``'8,192'``."""
    return f"{n / 1e6:.1f}M" if n >= 1e5 else f"{n:,.0f}"


def _asks_for_pipeline(schedule, virtual_stages) -> bool:
    """A pipeline schedule or model chunks given: settings only a pipeline has."""
    return schedule is not None or (virtual_stages or 1) > 1


def _check_pipeline(shape, pp, virtual_stages, schedule) -> None:
    """One-line ``ValueError`` where a pipeline setting cannot apply: more stages than layers, a
    schedule or model chunks without pipeline stages, or chunks that do not divide a stage's
    layers (Megatron-LM's interleaved schedule gives every chunk the same number of layers)."""
    if pp is not None and pp > shape.layers:
        raise ValueError(f"pp must be at most the model's {shape.layers} layers (every pipeline stage holds at "
                         f"least one), got pp={pp}")
    if pp == 1 and _asks_for_pipeline(schedule, virtual_stages):
        what = f"--schedule {schedule}" if schedule is not None else f"--virtual-stages {virtual_stages}"
        raise ValueError(f"{what} needs pipeline stages: give --pp above 1, or leave it out (got pp=1)")
    if pp is not None and virtual_stages and math.ceil(shape.layers / pp) % virtual_stages:
        raise ValueError(f"virtual_stages must divide the {math.ceil(shape.layers / pp)} layers of each of the "
                         f"{pp} pipeline stages, got virtual_stages={virtual_stages}")


def _no_layout(count, gb, rejected, shape, given, offload_layers, schedule, virtual_stages, etp) -> str:
    """Why :func:`search_layouts` found no layout, in one line, from the rules that turned the
    candidates away (``rejected``, :data:`REJECTIONS`): the batch where it was to blame (then
    changing the batch or the count helps), else the setting no layout could hold."""
    gpus = _n(count, "GPU")
    pinned = ", ".join(f"{k}={v}" for k, v in given.items() if v is not None)
    with_pinned = f" with {pinned}" if pinned else ""
    degrees = any(given[k] is not None for k in ("tp", "cp", "pp", "dp", "ep"))
    if "batch" in rejected:
        fixes = ["--global-batch", "--batch-tokens", "--count"] + (["--micro-batch"] if given["micro_batch"] else []) \
            + (["the degrees given"] if degrees else [])
        return (f"no layout of {gpus} divides the global batch of {gb:,} sequences{with_pinned}"
                + ("" if schedule != "interleaved" else
                   " into micro-batches whose number per replica is a multiple of the pipeline stages (the "
                   "interleaved schedule's rule)")
                + "; change " + ", ".join(fixes[:-1]) + " or " + fixes[-1])
    if "offload" in rejected and set(rejected) <= {"offload", "pipeline", "chunks"}:
        return (f"offload_layers ({offload_layers}) must be fewer than the layers per pipeline stage "
                f"(the model has {shape.layers} layers)")
    what = f"--schedule {schedule}" if schedule is not None else f"--virtual-stages {virtual_stages}"
    if set(rejected) == {"pipeline"}:
        return (f"{what} needs pipeline stages, and no layout of {gpus}{with_pinned} leaves room for "
                f"them; leave it out, or give degrees that do")
    if "chunks" in rejected and "experts" not in rejected and not virtual_stages:
        return (f"--schedule interleaved needs at least two layers on each pipeline stage, and no layout of "
                f"{gpus}{with_pinned} has them (the model has {shape.layers} layers); choose fewer stages (--pp) "
                f"or another --schedule")
    if "chunks" in rejected and "experts" not in rejected:
        return (f"virtual_stages={virtual_stages} divides the layers of no pipeline stage of a layout of "
                f"{gpus}{with_pinned} (the model has {shape.layers} layers); choose another --virtual-stages or --pp")
    also = f" and {what}" if schedule or virtual_stages else ""
    if "experts" in rejected:
        group = f"ep={given['ep']} x etp={etp}" if given["ep"] else f"etp={etp}"
        return (f"no layout of {gpus}{with_pinned}{also} leaves room for {group} in the ranks of a "
                "pipeline stage; change the degrees given")
    return (f"no layout of {gpus}{with_pinned}{also} exists (a pipeline has at most one stage per layer, "
            f"{shape.layers} here); change the degrees given or --count")


def _more_memory_words(gpu: hardware.GPUSpec) -> str:
    """Advice for a plan that does not fit: the next two GPUs of the same maker with at least 5%
    more memory (:data:`solutions.hardware.PLANNABLE`), where there are any, or more GPUs."""
    bigger = sorted((g for g in map(hardware.GPU_TABLE.get, hardware.PLANNABLE)
                     if g.vendor == gpu.vendor and g.memory_bytes > 1.05 * gpu.memory_bytes),
                    key=lambda g: g.memory_bytes)
    if not bigger:
        return "use more GPUs"
    return f"use GPUs with more memory ({', '.join(f'{g.name}: {g.memory_vendor}' for g in bigger[:2])}) or more GPUs"


def _check_expert_room(shape, count, pp, ep, etp) -> None:
    """One-line ``ValueError`` where EP x ETP cannot fold into the ranks of a pipeline stage
    (``count / pp`` of them, or ``count`` while PP is searched), whatever the other degrees:
    EP64 on 8 GPUs, or ETP3 on 8. Said before the search, which would otherwise only find
    no layout and blame the batch."""
    if not shape.is_moe:
        return
    group = (ep or 1) * etp
    room = count // (pp or 1)
    where = f"the {room:,} GPUs of each of the {pp} pipeline stages" if (pp or 1) > 1 else f"the {room:,} GPUs"
    if room % group:
        given = f"ep={ep} x etp={etp} = {group}" if ep else f"etp={etp}"
        raise ValueError(f"ep x etp must divide {where} (expert parallelism is carved out of tp x cp x dp): "
                         f"{given} does not")


def _describe(lay: steptime.Layout) -> str:
    sched = f", {lay.schedule}" + (f" v={lay.virtual_stages}" if lay.virtual_stages > 1 else "") if lay.pp > 1 else ""
    ep = (f", EP{lay.ep}" + (f" x ETP{lay.etp}" if lay.etp > 1 else "")) if lay.ep * lay.etp > 1 else ""
    return (f"TP{lay.tp} x CP{lay.cp} x PP{lay.pp} x DP{lay.dp}{ep}, ZeRO-{lay.zero}, micro-batch {lay.micro_batch}, "
            f"{_recompute_words(lay.recompute)} recomputation{sched}")


def _why_slower(st: steptime.StepTime, best: steptime.StepTime) -> str:
    """The breakdown entry that grew most against the winner."""
    diff = {k: st.breakdown_s[k] - best.breakdown_s[k] for k in st.breakdown_s}
    key = max(diff, key=diff.get)
    names = {"compute": "compute (recomputation, smaller products, or more layers on the busiest stage)",
             "tp": "exposed TP traffic", "cp": "exposed CP traffic", "pp": "pipeline sends",
             "dp": "exposed DP/ZeRO traffic", "ep": "exposed expert all-to-alls", "bubble": "pipeline bubble",
             "offload": "exposed activation offloading"}
    return f"{names[key]} +{_time(diff[key])}"


@dataclass(frozen=True)
class Plan:
    """Everything the planner decided and computed (bytes, seconds, FLOPs)."""

    params: float
    tokens: float
    flops: float
    budget_given: bool
    optimal: dict  # constant-set name -> (N, D, ratio, loss)
    twenty: tuple  # (N, D) at 20 tokens per parameter
    gpu: hardware.GPUSpec
    count: int
    arch: object  # the published shape borrowed, if any
    shape: steptime.Shape
    shape_name: str
    regime: str
    layout: steptime.Layout
    convention: str
    reasons: tuple
    state: dict  # weights, grads, optimizer bytes per GPU
    step: steptime.StepTime
    global_batch: int
    steps: int
    mfu: float  # the MFU used for the time to train: predicted, or --mfu
    mfu_given: bool
    days: float
    given: tuple  # names of the layout fields set by the caller
    alternatives: tuple  # (StepTime, Layout) of the next fastest layouts
    losers: tuple  # sentences: why other families of layouts lose
    rule: tuple | None  # (StepTime, Layout) of choose_layout's rule, if it is a valid layout
    cluster: steptime.Cluster
    advice: tuple = field(default=())
    overtrained: dict | None = None
    precision: str = "bf16"
    overlap: frozenset = steptime.DEFAULT_OVERLAP
    constants: str = DEFAULT_CONSTANTS
    track: tuple = ("no published run", ())  # (what matched, ((set, calibration.Row), ...)): runs like this plan

    # the names of the first edition, kept for callers
    tp = property(lambda self: self.layout.tp)
    cp = property(lambda self: self.layout.cp)
    pp = property(lambda self: self.layout.pp)
    dp = property(lambda self: self.layout.dp)
    ep = property(lambda self: self.layout.ep)
    zero = property(lambda self: self.layout.zero)
    recompute = property(lambda self: self.layout.recompute)
    micro_batch = property(lambda self: self.layout.micro_batch)
    microbatches = property(lambda self: self.step.microbatches)
    activations = property(lambda self: self.step.activation_bytes)
    fits = property(lambda self: self.step.fits)
    predicted_mfu = property(lambda self: self.step.mfu)

    @property
    def step_seconds(self) -> float:
        if not self.mfu_given:
            return self.step.step_s
        return (self.global_batch * self.shape.seq_len * steptime.model_flops_per_token(self.shape)
                / (self.count * self.gpu.bf16_peak * self.mfu))

    @property
    def sequences_per_step(self) -> int:
        return self.global_batch

    @property
    def bubble(self) -> float:
        """The bubble's share of the step."""
        return self.step.breakdown_s["bubble"] / self.step.step_s

    @property
    def memory_total(self) -> float:
        return self.step.memory_bytes


def _moe_config(base_cfg, experts, top_k, expert_ffn, shared_experts, dense_layers, moe_layer_freq, imbalance):
    given = dict(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_experts=shared_experts,
                 dense_layers=dense_layers, layer_freq=moe_layer_freq, imbalance=imbalance)
    given = {k: v for k, v in given.items() if v is not None}
    if base_cfg is None:
        if not given:
            return None
        if "experts" not in given or "top_k" not in given:
            raise ValueError("a mixture of experts needs --experts and --top-k (or --arch naming a MoE model)")
        given.setdefault("expert_ffn", None)
        if given["expert_ffn"] is None:
            raise ValueError("a mixture of experts needs --expert-ffn-hidden (each expert's MLP width)")
        for name in ("experts", "top_k", "expert_ffn", "layer_freq"):
            if name in given:
                positive_integer(name, given[name])
        return moe_step.MoEConfig(**given)
    for name in ("experts", "top_k", "expert_ffn", "layer_freq"):
        if name in given:
            positive_integer(name, given[name])
    return replace(base_cfg, **given)


def _shape(N, arch, seq_len, layers, hidden, heads, kv_heads, head_dim, ffn_hidden, vocab, size_from, moe_args,
           mlp=None):
    """The shape: the named or nearest published one, with any field replaced. ``size_from``
    names where ``N`` came from (``'--model'``, or a budget's compute-optimal size), ``None``
    where the shape counts itself; a size the shape must take and a depth the user gave meet in
    :func:`_at_given_depth`."""
    model_given = size_from is not None
    custom = {k: v for k, v in dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                    ffn_hidden=ffn_hidden, vocab=vocab, seq_len=seq_len, mlp=mlp).items()
              if v is not None}
    if arch is not None:
        names = {**facts.ARCHITECTURES, **facts.MOE_ARCHITECTURES}
        one_of("arch", arch, names)
        base = names[arch]
    else:
        base = nearest_architecture(N)
    if {"layers", "hidden", "heads"} <= set(custom):
        # a shape of the caller's own: GPT-style (GELU, dropout) unless told otherwise; a SwiGLU one
        # trains without dropout, as every published SwiGLU design here does; N from the shape if
        # no model given
        shape = steptime.Shape(custom.pop("layers"), custom.pop("hidden"), custom.pop("heads"),
                               custom.pop("seq_len", base.seq_len), **custom,
                               dropout=custom.get("mlp", "gelu") == "gelu")
        cfg = _moe_config(None, *moe_args)
        if cfg is not None:
            shape = replace(shape, moe=cfg, mlp="swiglu", dropout=False)
        if model_given:
            shape, _ = _at_given_depth(shape, N, size_from, "the shape given", widen=False)
        return shape, None, "given"
    published = steptime.shape_of(base)
    if custom.get("mlp") == published.mlp:
        del custom["mlp"]  # the design's own MLP: nothing changed
    if "heads" in custom and "head_dim" not in custom and getattr(base, "head_dim", None) is not None:
        custom["head_dim"] = None
    scaled = None
    resize = model_given and "layers" not in custom  # a size the shape must take (not one the user drew)
    width_given = bool({"hidden", "heads", "kv_heads", "head_dim", "ffn_hidden"} & set(custom))
    counts_itself = width_given or bool({"vocab", "mlp"} & set(custom))  # the published count is of another shape
    redrawn = not model_given and bool(set(custom) - {"seq_len"})  # no longer the published design: it counts itself
    if isinstance(base, facts.MoEArchitecture):
        shape = steptime.shape_of(base, **custom)
        if model_given or redrawn:
            shape = replace(shape, params=N if model_given else None)
    else:
        shape = steptime.shape_of(base, params=None if redrawn else N, **custom)
        if resize and _moe_config(None, *moe_args) is None:
            # a width the user gave stays, and the shape then counts its size itself
            published = replace(shape, params=None).n_params if counts_itself else base.params
            shape, scaled = _sized(shape, N, published, keep_width=width_given)
    cfg = _moe_config(shape.moe, *moe_args)
    if cfg is not None and cfg is not shape.moe:
        # experts other than the published ones: the shape counts itself, unless a size is given
        shape = replace(shape, moe=cfg, mlp="swiglu", dropout=False, params=N if model_given else None)
    if resize and shape.moe is not None:
        # a mixture at a size of its own: the depth at which it counts that size, experts included
        # (as a named mixture's published total counts it, where its experts are the published ones)
        mixture = replace(shape, params=None)
        as_published = (isinstance(base, facts.MoEArchitecture) and not counts_itself
                        and not any(a is not None for a in moe_args))
        # a named mixture keeps its width (its experts' width belongs to it); experts the user
        # put on a dense design resize as that design would, experts included in the count
        shape, scaled = _sized(mixture, N, base.total_params if as_published else mixture.n_params,
                               keep_width=width_given or isinstance(base, facts.MoEArchitecture))
    if model_given and "layers" in custom:
        ratio = 1.0
        if not counts_itself and shape.moe == published.moe:  # the published design's width: count as it is counted
            ratio = replace(published, params=None).n_params / (getattr(base, "total_params", None) or base.params)
        shape, scaled = _at_given_depth(shape, N, size_from, base.name + "'s width", ratio=ratio,
                                        widen=not width_given and shape.moe is None)
    if scaled:
        embeddings = sizing.embedding_share(shape)
        if embeddings > 2 / 3:
            scaled += (f" (its {shape.vocab:,}-token embeddings are {embeddings:.0%} of them: a smaller --vocab "
                       "suits a model this small)")
    notes = ([", ".join(sorted(custom)) + " given"] if custom else []) + ([scaled] if scaled else [])
    return shape, base, base.name + ("'s, with " + "; ".join(notes) if notes else "'s")


def _at_given_depth(shape, N, size_from, what, ratio=1.0, widen=True) -> tuple:
    """``(shape, note)`` for a size ``N`` the plan must reach at a depth the user gave. Where the
    shape counts ``N`` within :data:`SHAPE_COUNT_TOLERANCE` (its own count over ``ratio``, the
    published design's counted-to-published ratio) it takes ``N`` as its count, as a published
    shape takes its published one. Else, with ``widen``, the width changes
    (:func:`solutions.sizing.width_for`); without, a one-line error: a count charged to a shape
    that does not have it would price the step of one model and the FLOPs of another."""
    own = replace(shape, params=None).n_params
    if abs(own / ratio / N - 1) <= SHAPE_COUNT_TOLERANCE:
        return replace(shape, params=N), ""
    if widen:
        try:
            wide = sizing.width_for(replace(shape, params=None), N)
        except ValueError as e:
            raise ValueError(f"{e}; give fewer --layers, or leave --layers out") from None
        return wide, (f"width set to {wide.hidden:,} (MLP {wide.ffn:,}) for {count_words(N)} parameters at "
                      f"{shape.layers} layers")
    experts = ", experts included" if shape.moe is not None else ""
    ways = [] if what == "the shape given" else ["leave --layers out (the planner then sets the depth for that size)"]
    ways.append("leave --model out (the shape then counts itself)" if size_from == "--model" else
                "give --tokens in place of --budget (the shape then counts itself)")
    raise ValueError(f"{what} counts {own:.3g} parameters at {shape.layers} layers{experts}, not the {N:.3g} asked "
                     f"for ({size_from}); " + ", or ".join(ways))


def _sized(shape, N, published, keep_width) -> tuple:
    """:func:`solutions.sizing.sized`, its one-line error naming the planner's flags."""
    try:
        return sizing.sized(shape, N, published, keep_width=keep_width)
    except ValueError as e:
        if shape.moe is not None:
            raise ValueError(f"{e}; give fewer or narrower experts (--experts, --expert-ffn-hidden), or --layers, "
                             "--hidden and --heads, for a mixture this small") from None
        raise ValueError(f"{e}; give a smaller --vocab, or --layers, --hidden and --heads, for a model this "
                         "small") from None


def _recompute_words(recompute: str) -> str:
    """How a plan names its recomputation: 'no', 'selective', 'full', or the modules a
    recipe names ('selective (layernorm, moe_act)')."""
    mods = layer_time.recompute_modules(recompute)
    if mods is not None:
        return "selective (" + ", ".join(m for m in layer_time.RECOMPUTE_MODULES if m in mods) + ")"
    return "no" if recompute == "none" else recompute


def _name_key(name) -> str:
    """A published architecture's name as a user may type it: any case, without spaces,
    hyphens or underscores ("Qwen3-30B-A3B", "qwen3_30b_a3b" and "qwen3 30b a3b" agree); a
    version's dot stays ("llama-3.1-405b" is not "llama-31-405b")."""
    return re.sub(r"[\s_-]+", "", str(name).lower())


def make_plan(*, budget=None, model=None, tokens=None, gpu="H100", count=8, mfu=None, tp=None, pp=None, zero=None,
              convention="zero_16", constants=DEFAULT_CONSTANTS, batch_tokens=DEFAULT_BATCH_TOKENS,
              arch=None, inference_tokens=None, cp=None, dp=None, seq_len=None, global_batch=None,
              micro_batch=None, layers=None, hidden=None, heads=None, kv_heads=None, head_dim=None,
              ffn_hidden=None, vocab=None, mlp=None, recompute=None, attention="flash", virtual_stages=None,
              schedule=None, network=None, precision=None, overlap=None, experts=None, top_k=None,
              expert_ffn=None, shared_experts=None, dense_layers=None, moe_layer_freq=None, imbalance=None,
              ep=None, etp=None, ep_dispatch=None, nvlink=None, offload_layers=0, expert_kernels="grouped",
              attention_precision="bf16") -> Plan:
    """Build a :class:`Plan`. Give ``budget`` (FLOPs; the model is then the compute-optimal
    one under ``constants``) or ``tokens`` and a model: ``model`` (parameters), or a shape
    (``layers``, ``hidden``, ``heads``), or ``arch`` naming a published one (dense or MoE).
    Degrees, micro-batch (sequences), recomputation, schedule and shape fields that are given
    are kept; the rest are searched (:func:`search_layouts`). ``global_batch`` is in sequences
    (default ``batch_tokens / seq_len``). ``precision`` is the training recipe
    (:mod:`solutions.precision`), ``overlap`` what hides behind compute
    (:func:`solutions.steptime.parse_overlap`). ``experts``, ``top_k``, ``expert_ffn``,
    ``shared_experts``, ``dense_layers``, ``moe_layer_freq`` and ``imbalance`` make the model a
    mixture of experts (or change a named MoE); ``ep`` and ``etp`` fix expert parallelism;
    ``expert_kernels`` says how the experts run (:data:`solutions.moe_step.EXPERT_KERNELS`) and
    ``attention_precision`` FlashAttention's precision (``'fp8'`` where the GPU has FP8).
    ``mfu`` overrides the predicted MFU in the time to train. With ``inference_tokens``, the
    plan also names the over-trained alternative that reaches the compute-optimal loss at the
    lowest lifetime cost (Sardana et al. 2024)."""
    shape_given = layers is not None and hidden is not None and heads is not None
    if arch is not None:  # any case, spaces, hyphens or underscores: "llama3-8b" is Llama 3 8B
        names = {_name_key(k): k for k in (*facts.ARCHITECTURES, *facts.MOE_ARCHITECTURES)}
        names.update({_name_key(alias): k for alias, k in facts.ARCHITECTURE_ALIASES.items()})
        if _name_key(arch) not in names:
            raise ValueError(f"arch must be one of {sorted(set(names.values()))}, got {arch!r}")
        arch = names[_name_key(arch)]
    moe_named = arch in facts.MOE_ARCHITECTURES
    named = arch is not None and (arch in facts.ARCHITECTURES or moe_named)
    if budget is not None and (model is not None or tokens is not None):
        raise ValueError("give either budget, or model and tokens, not both")
    if budget is None and tokens is None and (named or model is not None):
        raise ValueError(f"give --tokens (how many tokens the run trains on) with --{'arch' if named else 'model'}")
    if budget is None and (tokens is None or (model is None and not shape_given and not named)):
        raise ValueError("give a budget, or both model and tokens")
    moe_args = (experts, top_k, expert_ffn, shared_experts, dense_layers, moe_layer_freq, imbalance)
    if budget is not None and (moe_named or any(a is not None for a in moe_args)):
        raise ValueError("give --model (or --arch) and --tokens for a mixture of experts: the compute-optimal "
                         "split of a budget is for dense models")
    one_of("constants", constants, scaling.CONSTANT_SETS)
    g = find_gpu(gpu)
    count = int(positive_integer("count", count))
    if precision is None:  # the chip's 16-bit format: BF16, or FP16 where it has none (T4)
        precision = g.sixteen_bit
    precision = str(precision).lower()  # "NVFP4", as vendors write it, is nvfp4
    one_of("precision", precision, hardware.PRECISIONS)
    g.peak(precision)  # one line if the GPU lacks it
    ov = steptime.parse_overlap(overlap)
    if mfu is not None:  # of the 16-bit peak, as MFU is quoted: above 1 only where the precision's peak is
        mfu = float(positive("mfu", mfu))
        most = g.peak(precision) / g.bf16_peak
        if mfu > most:
            raise ValueError(f"mfu (of the {g.sixteen_bit.upper()} peak) must be in (0, {most:g}] for "
                             f"{precision.upper()} on the {g.name}, got {mfu!r}")
    memory.get_convention(convention)
    batch_tokens = int(positive_integer("batch_tokens", batch_tokens))
    for name, v in dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, seq_len=seq_len, global_batch=global_batch,
                        micro_batch=micro_batch, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                        head_dim=head_dim, ffn_hidden=ffn_hidden, vocab=vocab, virtual_stages=virtual_stages).items():
        if v is not None:
            positive_integer(name, v)
    if zero is not None:
        one_of("zero", zero, memory.ZERO_STAGES)
    one_of("attention", attention, steptime.ATTENTION)
    if mlp is not None:
        one_of("mlp", mlp, efficiency.MLP_KINDS)
        if mlp != "swiglu" and (moe_named or any(a is not None for a in moe_args)):
            raise ValueError(f"mlp {mlp!r}: the planner's mixtures of experts run SwiGLU MLPs, as every published "
                             "one in its table does; leave --mlp out")
    dispatch_given = ep_dispatch is not None
    # "HybridEP" or "DeepEP", as their authors write them; '' is no name, not the default
    ep_dispatch = "deepep" if ep_dispatch is None else str(ep_dispatch).lower()
    one_of("ep_dispatch", ep_dispatch, moe_step.DISPATCHERS)
    one_of("expert_kernels", expert_kernels, moe_step.EXPERT_KERNELS)
    steptime.check_attention_precision(g, attention_precision)
    if schedule is not None:
        one_of("schedule", schedule, steptime.SCHEDULES)
    offload_layers = nonnegative_integer("offload_layers", offload_layers)
    if offload_layers:
        g.host_link()  # one line where the GPU has no figure
    if tp is not None and tp > g.scale_up_gpus:
        if g.scale_up_gpus == 1:
            raise ValueError(f"tp must be 1 on the {g.name}: the planner keeps tensor parallelism inside a scale-up "
                             f"domain, and the {g.name}'s GPUs share none (each meets the host over "
                             f"{g.scale_up_name}), got tp={tp}")
        raise ValueError(f"tp must be at most the {g.scale_up_gpus} GPUs of the {g.name}'s {link_name('nvlink', g)} "
                         f"domain, got tp={tp}")

    if budget is not None:
        C = float(positive("budget", budget))
        with np.errstate(all="ignore"):  # a budget too small to split underflows: said below, once
            try:
                N, D = scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[constants])[:2]
            except ValueError:  # the split underflowed to no model at all
                N = D = 0.0
        if not (N >= 1 and D >= 1 and math.isfinite(N * D)):
            raise ValueError(f"budget {C:.3g} FLOPs is too small to split into a model and its tokens (the "
                             f"compute-optimal model would have {N:.3g} parameters on {D:.3g} tokens); give a larger "
                             "--budget")
    else:
        D = float(positive("tokens", tokens))
        if model is not None:
            N = float(positive("model", model))
        elif named:
            N = (facts.MOE_ARCHITECTURES.get(arch) or facts.ARCHITECTURES[arch])
            N = getattr(N, "total_params", None) or N.params
        else:
            N = steptime.Shape(layers, hidden, heads, seq_len or 2048, vocab or 51200, kv_heads, head_dim,
                               ffn_hidden, mlp or "gelu").n_params
        C = None
    if N > MAX_MODEL_PARAMS:
        raise ValueError(f"model must be at most {MAX_MODEL_PARAMS:.0e} parameters ({count_words(MAX_MODEL_PARAMS)}; the "
                         f"largest published are about 2T), got {N:.3g}"
                         + (f", the compute-optimal size for a budget of {C:.3g} FLOPs" if budget is not None else ""))
    size_from = ("--model" if model is not None else
                 f"the compute-optimal size for a budget of {C:.3g} FLOPs" if budget is not None else None)
    shape, base, shape_name = _shape(N, arch, seq_len, layers, hidden, heads, kv_heads, head_dim, ffn_hidden, vocab,
                                     size_from, moe_args, mlp)
    N = shape.n_params
    if C is None:
        # 6 N D, with the parameters a token uses (a mixture of experts' active ones)
        C = float(scaling.training_flops(shape.active_params, D))
        if not math.isfinite(C):
            raise ValueError(f"tokens {D:.3g} at {shape.active_params:.3g} parameters is more training compute (6 N D) "
                             "than a float holds; give fewer --tokens")
    optimal = {name: scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[name]) for name in
               dict.fromkeys((constants, *_PUBLISHED))}
    twenty = scaling.twenty_tokens_allocation(C)
    overtrained = None
    if inference_tokens is not None:
        N_opt, D_opt, _, loss = optimal[constants]
        N_i, D_i, lifetime = after_chinchilla.inference_aware_optimal(
            loss, inference_tokens, scaling.CONSTANT_SETS[constants])
        overtrained = {"tokens": float(inference_tokens), "N": N_i, "D": D_i, "loss": loss, "lifetime": lifetime,
                       "baseline": float(after_chinchilla.lifetime_flops(N_opt, D_opt, inference_tokens))}

    if recompute is not None:
        steptime.check_recompute_for(shape, recompute)
    if tp is not None and shape.heads % tp:
        raise ValueError(f"tp must divide the number of attention heads ({shape.heads}), got tp={tp}")
    given_seq = f"seq_len ({shape.seq_len:,}{'' if seq_len is not None else ' by default'})"
    if cp is not None and not _splits_sequence(shape.seq_len, 1, cp):
        raise ValueError(f"{given_seq} must be a multiple of 2 x cp: context parallelism cuts each "
                         f"sequence into 2 x cp chunks to balance the causal mask, got cp={cp}")
    if tp is not None and not _splits_sequence(shape.seq_len, tp, cp or 1):
        raise ValueError(f"{given_seq}{' / cp' if (cp or 1) > 1 else ''} must be a multiple of tp: "
                         f"sequence parallelism gives each TP rank an equal slice of the sequence, got tp={tp}")
    etp = etp or 1
    if ep is not None and not shape.is_moe and ep > 1:
        raise ValueError(f"ep > 1 needs experts (--experts, or --arch naming a mixture of experts), got ep={ep}")
    for flag, value in (("etp", etp if etp and etp > 1 else None), ("ep_dispatch", ep_dispatch if dispatch_given else None)):
        if value is not None and not shape.is_moe:
            raise ValueError(f"{flag} {value!r} needs experts (--experts, or --arch naming a mixture of experts)")
    if expert_kernels != "grouped" and not shape.is_moe:
        raise ValueError(f"expert_kernels {expert_kernels!r} needs experts (--experts, or --arch naming a mixture of "
                         "experts)")
    if ep is not None and shape.is_moe and shape.moe.experts % ep:
        raise ValueError(f"ep must divide the number of experts: {shape.moe.experts} experts are not divisible "
                         f"by ep={ep}")
    fixed = 1
    for v in (tp, cp, pp, dp):
        fixed *= v or 1
    if tp and pp and dp and (cp or 1) * tp * pp * dp != count:
        raise ValueError(f"tp x cp x pp x dp must equal count (EP is carved out of tp x cp x dp, not multiplied "
                         f"onto it): tp={tp} x cp={cp or 1} x pp={pp} x dp={dp} = {(cp or 1) * tp * pp * dp} "
                         f"against count={count}")
    if count % fixed:
        given = " x ".join(f"{k}={v}" for k, v in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp)) if v)
        raise ValueError(f"the degrees given must divide the GPU count: {given}"
                         + (f" = {fixed}" if " x " in given else "") + f" does not divide count={count}")
    if ep and tp and dp and (cp or shape.seq_len < CP_FROM_SEQ_LEN):
        moe_step.check_expert_layout(shape.moe, ep, etp, tp, cp or 1, dp)
    _check_expert_room(shape, count, pp, ep, etp)
    _check_pipeline(shape, pp, virtual_stages, schedule)
    if global_batch is None and batch_tokens < shape.seq_len and batch_tokens != DEFAULT_BATCH_TOKENS:
        raise ValueError(f"batch_tokens must be at least one sequence ({shape.seq_len:,} tokens), got "
                         f"{batch_tokens:,}; or give --global-batch")
    gb = global_batch if global_batch is not None else max(1, batch_tokens // shape.seq_len)
    cluster = cluster_for(g, network, nvlink)
    given = tuple(k for k, v in dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, zero=zero, micro_batch=micro_batch,
                                     recompute=recompute, virtual_stages=virtual_stages,
                                     schedule=schedule).items() if v is not None)
    reasons = []
    if global_batch is None:
        # round the batch to a whole number of sequences per replica for the finest DP the cluster allows
        rounded = count * math.ceil(gb / count) if gb >= count else gb
        if batch_tokens != DEFAULT_BATCH_TOKENS:
            whence = f"--batch-tokens {batch_tokens:,} in whole sequences"
        else:
            whence = (f"about {batch_tokens / 2**20:.0f}M tokens, Llama 3's batch"
                      + (", less than one sequence" if batch_tokens < shape.seq_len else "")
                      + "; --global-batch or --batch-tokens sets it")
        if rounded != gb:
            whence += f", rounded up from {gb:,} to a multiple of the {count:,} GPUs"
        gb = rounded
        reasons.append(f"global batch {_n(gb, 'sequence')} of {shape.seq_len:,} tokens ({whence})")
    rejected = {}
    fitting, others = search_layouts(shape, cluster, count, gb, convention, tp, cp, pp, dp, zero, micro_batch,
                                     recompute, virtual_stages, schedule, attention, ep, etp, precision, ov,
                                     ep_dispatch, offload_layers, expert_kernels, attention_precision, rejected)
    if not fitting and not others:
        raise ValueError(_no_layout(count, gb, rejected, shape, dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep,
                                                                    micro_batch=micro_batch),
                                    offload_layers, schedule, virtual_stages, etp))
    if fitting:
        st, lay = fitting[0]
    else:  # the least hungry of the layouts that do not fit, timed now
        lay = others[0][1]
        st = steptime.step_time(shape, lay, cluster, gb, convention, precision_name=precision, overlap=ov)
    if not (math.isfinite(st.step_s) and st.tokens_per_s > 0):
        raise ValueError(f"the predicted step time is {st.step_s:.3g} s, beyond what a float holds"
                         + (f": --network-gbps {network * 8 / 1e9:.3g} is too slow" if network is not None else ""))
    unfit = len(others) + rejected.get("memory", 0)
    if fitting:
        reasons.append(f"the fastest of {_n(len(fitting), 'layout')} that fit{'s' if len(fitting) == 1 else ''} "
                       f"({_n(unfit, 'other')} {'does' if unfit == 1 else 'do'} not)")
    else:
        pinned = [k for k in given if k in ("tp", "cp", "pp", "dp", "ep", "zero", "micro_batch", "recompute")]
        reasons.append("no layout fits in memory" + (" with the settings given" if pinned else "")
                       + ": this is the one that needs the least")
    reasons += [f"{k}={getattr(lay, k)} set by hand" for k in given if k != "schedule"]

    # why the other families of layouts lose: the best of each (tp, cp, pp, ep, zero) after the winner's
    losers, seen = [], {(lay.tp, lay.cp, lay.pp, lay.ep, lay.zero)}
    for s2, l2 in fitting[1:]:
        key = (l2.tp, l2.cp, l2.pp, l2.ep, l2.zero)
        if key in seen:
            continue
        seen.add(key)
        losers.append(f"{_describe(l2)}: {_time(s2.step_s)} ({s2.step_s / st.step_s - 1:+.0%}), {_why_slower(s2, st)}")
        if len(losers) >= TOP:
            break
    if others:
        needed, o = others[0]
        losers.append(f"{_n(unfit, 'layout')} {'does' if unfit == 1 else 'do'} not fit in "
                      f"{g.usable_memory_bytes / 2**30:,.1f} GiB; the least "
                      f"hungry, {_describe(o)}, needs {needed / 2**30:,.1f} GiB "
                      f"({(needed - g.usable_memory_bytes) / 2**30:,.2f} GiB over)")
    rule = None
    if not shape.is_moe:
        try:
            t_r, p_r, d_r, z_r, _ = choose_layout(N, count, g.usable_memory_bytes, convention)
            if gb % d_r == 0 and shape.heads % t_r == 0 and t_r <= g.scale_up_gpus:
                lay_r = steptime.Layout(t_r, 1, p_r, d_r, z_r, 1, "none", attention_precision=attention_precision)
                for r in steptime.RECOMPUTE:  # the lightest recomputation that fits, as the rule's planner did
                    lay_r = replace(lay_r, recompute=r)
                    st_r = steptime.step_time(shape, lay_r, cluster, gb, convention, precision_name=precision,
                                              overlap=ov)
                    if st_r.fits:
                        break
                rule = (st_r, lay_r)
        except ValueError:
            rule = None

    steps = max(1, math.ceil(D / (gb * shape.seq_len)))
    used_mfu = st.mfu if mfu is None else mfu
    # a given MFU counts the FLOPs the predicted one counts (PaLM's: 6 N plus attention per token)
    days = (D * steptime.model_flops_per_token(shape) / (count * g.bf16_peak * used_mfu) / 86400 if mfu is not None
            else steptime.days_to_train(D, st.tokens_per_s))
    if not 0 < days < math.inf:
        raise ValueError(f"the days to train come to {days:.3g} ({D:.3g} tokens at {used_mfu:.3g} MFU), beyond what a float "
                         "holds; give " + ("more" if days == 0 else "fewer") + " --tokens"
                         + (" or another --mfu" if mfu is not None else ""))
    state = steptime.state_breakdown(shape, lay, convention, precision)

    advice = []
    if not st.fits:
        if lay.pp == 1:
            advice.append("add pipeline stages (--pp) to cut the state and activations per GPU")
        if lay.zero < 3:
            advice.append(f"raise the ZeRO stage (now {lay.zero}) to shard more of the state over DP={lay.dp}")
        if lay.recompute != "full":
            advice.append("recompute activations (--recompute full)")
        advice.append(_more_memory_words(g))
        advice.append("shorten the sequence or shard it (context parallelism, --cp)")
    exposed = sum(v for k, v in st.breakdown_s.items() if k not in ("compute", "bubble"))
    if exposed > 0.25 * st.breakdown_s["compute"]:
        advice.append("exposed communication is over a quarter of compute: overlap it (--overlap), grow the "
                      "micro-batch or the batch, " + ("keep TP and EP inside a scale-up domain, or use ZeRO-1 instead "
                                                      f"of ZeRO-{lay.zero}" if lay.zero >= 2 else
                                                      "or keep TP and EP inside a scale-up domain"))
    if lay.pp > 1 and st.breakdown_s["bubble"] > 0.1 * st.step_s:
        advice.append(f"the pipeline bubble is {st.breakdown_s['bubble'] / st.step_s:.0%} of the step: more "
                      "micro-batches per step, or interleaved stages (--virtual-stages)")
    if shape.is_moe and lay.expert_kernels == "grouped":
        # what the work per local expert costs: the same layout with the experts fused
        fused = steptime.step_time(shape, replace(lay, expert_kernels="fused"), cluster, gb, convention,
                                   precision_name=precision, overlap=ov)
        share = 1 - fused.step_s / st.step_s
        if share > 0.1:
            advice.append(f"the experts' work outside their products ({shape.moe.experts // lay.ep} on each GPU) is "
                          f"{share:.0%} of the step: fewer on each GPU (a larger --ep, where the GPUs allow), or one fused grouped MLP in a "
                          "full-iteration CUDA graph (--expert-kernels fused, as 2026's MXFP8 recipes on Blackwell run)")

    # how far the model has been from published runs like this one (the named architecture, else the GPU)
    what, rows = calibration.runs_like(g.name, arch=base.name if named else None, moe=shape.is_moe,
                                       precision=precision)
    return Plan(N, D, C, budget is not None, optimal, twenty, g, count, base, shape, shape_name, regime(N), lay,
                convention, tuple(reasons), state, st, gb, steps, used_mfu, mfu is not None, days, given,
                tuple(fitting[1:TOP]), tuple(losers), rule, cluster, tuple(advice), overtrained, precision, ov,
                constants, (what, tuple(rows)))


_AXES = steptime.OVERLAP_AXES


def memory_budget_words(plan: Plan) -> str:
    """Line 7 before its verdict: what the busiest GPU holds against what CUDA leaves usable,
    and where that comes from (the printout and :mod:`solutions.plan_html` both say it)."""
    st, g = plan.step, plan.gpu
    whence = {"cuda": f"as CUDA reports the {g.memory_vendor}",
              "nvidia-smi": f"as nvidia-smi reports the {g.memory_vendor}",
              "mig": f"at most: NVIDIA's full-GPU MIG profile of the {g.memory_vendor}, nvidia-smi's total rounded up",
              }.get(g.memory_basis, f"the {g.memory_vendor} read as GiB, no public CUDA figure")
    return (f"{_gib(st.memory_bytes)} of {_gib(st.usable_bytes)} usable ({_gib(g.memory_bytes)} {whence}, less a "
            f"{hardware.ALLOCATOR_RESERVE_BYTES / 2**30:g} GiB reserve for the CUDA context and NCCL)")


def link_name(kind: str, gpu: hardware.GPUSpec) -> str:
    """A link of :func:`solutions.network.link_for` as a reader names it: the GPU's scale-up
    link by its own name (NVLink 4, Infinity Fabric, ...), anything else as it is."""
    return (gpu.scale_up_name or "NVLink") if kind == "nvlink" else kind


def traffic_words(st: steptime.StepTime, axis: str, gpu: hardware.GPUSpec, on: str = "on") -> str:
    """An axis's bytes per step and the link they take: '4.14 GB on network'. The expert
    all-to-alls of an EP group wider than a scale-up domain take both, and say how much each
    ('168.84 GB: 71.69 GB on network, 97.15 GB on NVLink 4 (400 GB/s)' for DeepSeek-V3 at EP64
    on H800s); an ETP group wider than a domain sends its gathers over the network too."""
    total = st.bytes[axis]
    net = st.ep_network_bytes if axis == "ep" else 0.0
    if 0 < net < total:
        return (f"{total / 1e9:,.2f} GB: {net / 1e9:,.2f} GB {on} network, {(total - net) / 1e9:,.2f} GB {on} "
                f"{link_name('nvlink', gpu)}")
    return f"{total / 1e9:,.2f} GB {on} {link_name(st.links[axis], gpu)}"


def moe_words(plan: Plan) -> str:
    """A mixture of experts' layers, experts, routing and kernels, in words (empty for a dense model)."""
    sh, lay = plan.shape, plan.layout
    if not sh.is_moe:
        return ""
    m = sh.moe
    eager = [w for w, on in (("clamped GLU", m.clamped_glu), ("expert biases", m.expert_bias)) if on]
    return (f"{sh.moe_layers} MoE layers of {m.experts} experts ({m.expert_ffn:,} wide), top-{m.top_k}"
            + (f" + {m.shared_experts} shared" if m.shared_experts else "")
            + (f", imbalance x{m.imbalance:g}" if m.imbalance != 1 else "")
            + (f" (x{moe_step.busiest(m, lay.ep):.3g} at EP{lay.ep}, the most it allows: a GPU receives at most "
               f"min(top-k, experts / EP) of a token's {m.top_k} copies)"
               if moe_step.busiest(m, lay.ep) < m.imbalance else "")
            + f", {lay.expert_kernels} expert kernels"
            + (f" ({' and '.join(eager)} in passes of their own)" if eager and lay.expert_kernels == "grouped" else ""))


def weight_copy_words(plan: Plan) -> str:
    """What the plan's precision adds to the model state per parameter (its low-precision
    weight copies), in words; empty for a 16-bit run."""
    conv, rec, name = memory.get_convention(plan.convention), precision.recipe(plan.precision), plan.precision.upper()
    if rec.quantised_weights_only:
        layouts = rec.weight_copy_bytes / rec.gemm_bytes  # the weight and its transpose
        return (f"weights only as {name} copies, {layouts:g} layouts of {rec.gemm_bytes:.3g} B, in place of "
                f"{conv.weights:g} B/param of 16-bit ones")
    return f"+{rec.weight_copy_bytes:.3g} B/param of {name} weight copies" if rec.weight_copy_bytes else ""


def ceiling_words(plan: Plan) -> str:
    """The linear layers' precision, its dense peak and the ceiling they run under: measured,
    or at whose measured share of peak."""
    g, name = plan.gpu, plan.precision
    basis = g.ceiling_basis(name)
    ceiling = "measured ceiling" if basis == "measured" else f"ceiling, {basis}"
    return (f"linear layers in {name.upper()}: {g.peak(name) / 1e12:,.0f} TFLOP/s peak, "
            f"{g.ceiling(name) / 1e12:,.0f} {ceiling}")


def format_plan(plan: Plan) -> str:
    """The plan as the numbered lines ``python -m solutions.plan`` prints."""
    lines = ["== compute"]
    given = "budget" if plan.budget_given else "6 N D" + (", N active" if plan.shape.is_moe else "")
    lines.append(f"1. training compute        {plan.flops:.3g} FLOPs ({given}); model {count_words(plan.params)} "
                 f"parameters" + (f" ({count_words(plan.shape.active_params)} active)" if plan.shape.is_moe else "")
                 + f" on {count_words(plan.tokens)} tokens ({plan.tokens / plan.params:.1f} tokens/param)")
    lines.append(f"2. compute-optimal at this budget (closed form of L = E + A/N^a + B/D^b; default "
                 f"{CONSTANT_NAMES[DEFAULT_CONSTANTS]}, the set section 3 stands behind; --constants):")
    for name, (N, D, r, L) in plan.optimal.items():
        mark = " (used)" if name == plan.constants else ""
        lines.append(f"     {name:<17} N={count_words(N):>7}  D={count_words(D):>7}  {r:6.1f} tokens/param  loss {L:.3f}{mark}")
    lines.append(f"     {'20 tokens/param':<17} N={count_words(plan.twenty[0]):>7}  D={count_words(plan.twenty[1]):>7}")
    if plan.overtrained:
        o = plan.overtrained
        lines.append(f"     serving {count_words(o['tokens'])} tokens: N={count_words(o['N'])}, D={count_words(o['D'])} "
                     f"({o['D'] / o['N']:.0f} tokens/param) reaches the same loss {o['loss']:.3f} for "
                     f"{o['lifetime']:.3g} FLOPs of training + inference, against {o['baseline']:.3g} "
                     f"({1 - o['lifetime'] / o['baseline']:.0%} less)")
    sh, lay, st, g = plan.shape, plan.layout, plan.step, plan.gpu
    attn = f"{_n(sh.heads, 'head')} x {sh.head_size}" + (f", {_n(sh.kv, 'K/V head')}" if sh.kv != sh.heads else "")
    moe = f"; {moe_words(plan)}" if sh.is_moe else ""
    dispatch = f", {lay.ep_dispatch} dispatch" if lay.ep > 1 else ""
    ep = f" (EP{lay.ep} x ETP{lay.etp} folded into TP x CP x DP{dispatch})" if lay.ep * lay.etp > 1 else ""
    lines += ["== layout",
              f"3. shape                    {plan.shape_name}: {_n(sh.layers, 'layer')}, d_model {sh.hidden:,}, {attn}, "
              f"{sh.mlp} MLP{', dropout' if sh.dropout else ''}, sequences of {sh.seq_len:,}{moe}",
              f"4. layout                   TP{lay.tp} x CP{lay.cp} x PP{lay.pp} x DP{lay.dp} = {plan.count:,} "
              f"{g.name}{ep}, ZeRO stage {lay.zero}, micro-batch {lay.micro_batch}, "
              f"{_recompute_words(lay.recompute)} recomputation, "
              + (f"{lay.schedule}" + (f" (v={lay.virtual_stages})" if lay.virtual_stages > 1 else "")
                 if lay.pp > 1 else "no pipeline")
              + f", {lay.attention} attention" + (" in FP8" if lay.attention_precision == "fp8" else "")
              + f", {plan.precision.upper()}"]
    lines += [f"     why: {r}" for r in plan.reasons]
    conv = memory.get_convention(plan.convention)
    margin = st.margin_bytes
    verdict = (f"fits, {_gib(margin)} to spare" if st.fits else f"DOES NOT FIT: {_gib(-margin)} over")
    lines += ["== memory per GPU (GiB = 2^30 bytes)",
              f"5. model state ({conv.total:g} B/param, {memory.CONVENTION_LABELS.get(plan.convention, plan.convention)}, "
              f"--convention {plan.convention}"
              + (f", {weight_copy_words(plan)}" if weight_copy_words(plan) else "")
              + f")  weights {_gib(plan.state['weights'])}, gradients {_gib(plan.state['grads'])}, "
              f"optimizer {_gib(plan.state['optimizer'])}",
              f"6. activations              {_gib(st.activation_bytes)} ({_recompute_words(lay.recompute)} "
              f"recomputation, {lay.attention} attention, busiest pipeline stage"
              + (f"; {lay.offload_layers} layers' activations offloaded over {g.host_link_name}, "
                 f"{_time(st.breakdown_s['offload'])} exposed + {_time(st.hidden_s['offload'])} hidden"
                 if lay.offload_layers else "") + ")",
              f"7. total                    {memory_budget_words(plan)}: {verdict}"]
    b, hid = st.breakdown_s, st.hidden_s
    comm = ", ".join(f"{a.upper()} {_time(b[a])} exposed + {_time(hid.get(a, 0.0))} hidden ({traffic_words(st, a, g)})"
                     for a in _AXES if st.bytes.get(a, 0) > 0) or "none"
    net_gbs = plan.cluster.network / 1e9
    ov = ", ".join(sorted(plan.overlap)) or "nothing"
    # the scale-up link by its name (NVLink 4, Infinity Fabric, PCIe); where it joins one GPU,
    # every group of two or more crosses the network
    scale_up = link_name("nvlink", g) + (" (one GPU per domain)" if g.scale_up_gpus == 1 else "")
    peak16 = g.sixteen_bit.upper()  # what MFU is quoted against (hardware.GPUSpec.bf16_peak)
    lines += ["== step (predicted)",
              f"8. batch                    {_n(plan.global_batch, 'sequence')} = "
              f"{_tokens(plan.global_batch * sh.seq_len)} tokens per step; {_n(st.microbatches, 'micro-batch', 'micro-batches')} "
              f"per replica; {plan.steps:,} steps",
              f"9. compute                  {_time(b['compute'])}: {steptime.hardware_flops_per_token(sh, lay.recompute):.3g} "
              f"hardware FLOPs/token against {steptime.model_flops_per_token(sh):.3g} model; matrix products at "
              f"the ceiling are {st.efficiency:.0%} of it, the rest memory traffic, attention and "
              f"fixed costs ({ceiling_words(plan)})",
              f"10. communication           {comm}; overlapped: {ov} (--overlap); {scale_up} at "
              f"{steptime.network.NVLINK_EFFICIENCY:.0%} of {plan.cluster.nvlink / 1e9:,.0f} GB/s each way, network at "
              f"{steptime.CALIBRATION.network:.0%} of {net_gbs:,.1f} GB/s per GPU each way (calibrated), a group's NICs "
              f"summed over its members in each node",
              f"11. pipeline bubble         {_time(b['bubble'])} ({plan.bubble:.1%} of the step)",
              f"12. step                    {_time(st.step_s)}: {st.tokens_per_s:,.0f} tokens/s, "
              f"{st.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {st.flops_per_s_per_gpu / 1e12:,.0f} TFLOP/s/GPU (model); "
              f"MFU {st.mfu:.1%} of the {peak16} peak" + (" (as torchtitan and NVIDIA report)" if peak16 == "BF16" else "")
              + (f", {st.mfu_precision:.1%} of the {plan.precision.upper()} peak" if plan.precision not in ("bf16", "fp16") else "")
              + f"; hardware FLOPs utilisation {st.hfu:.1%} of the {peak16} peak"
              + (f", {st.hfu_precision:.1%} of the {plan.precision.upper()} peak"
                 if plan.precision not in ("bf16", "fp16") and st.mfu > 0 else ""),
              "== time",
              f"13. days to train           {plan.days:,.1f} days on {_n(plan.count, 'GPU')} at {plan.mfu:.1%} MFU of the {peak16} peak "
              + ("(given with --mfu) " if plan.mfu_given else "(predicted) ")
              + f"({plan.days * plan.count / 365.25:,.1f} GPU-years)"]
    if plan.alternatives or plan.losers or plan.rule:
        lines.append("== other layouts")
        for s2, l2 in plan.alternatives:
            lines.append(f"   {s2.step_s:8.2f} s  MFU {s2.mfu:5.1%}  {_describe(l2)}")
        lines += [f"   - {x}" for x in plan.losers]
        if plan.rule:
            s_r, l_r = plan.rule
            verdict = ("fits" if s_r.fits else "does not fit")
            lines.append(f"   - the rule of thumb ({regime(plan.params)}: {_describe(l_r)}) {verdict}: "
                         f"{_time(s_r.step_s)} ({s_r.step_s / st.step_s - 1:+.0%}), {_why_slower(s_r, st)}")
    lines += _track_lines(plan)
    if plan.advice:
        lines.append("== what to change")
        lines += [f"   - {x}" for x in plan.advice]
    return "\n".join(lines)


#: What a plan says where no published run used its GPU.
UNCHECKED_GPU = ("the model has not been checked against a published run on this GPU, so its figures rest on "
                 "the datasheet alone")


def _track_lines(plan: Plan) -> list:
    """The published runs like this plan, and the model's error on each (tokens/s per GPU)."""
    what, rows = plan.track
    if not rows:
        return ["== published runs like this one", f"   none on the {plan.gpu.name}: {UNCHECKED_GPU}"]
    errors = [r.error for _, r in rows]
    lines = ["== published runs like this one (error: tokens/s/GPU predicted over published, minus 1; 'table' runs "
             "fitted the constants, 'held out' and 'other stack' runs never did)",
             f"   {what}: " + (f"{len(rows)} runs, errors {min(errors):+.1%} to {max(errors):+.1%} "
                                  f"(median {statistics.median(errors):+.1%})" if len(rows) > 1
                                  else f"1 run, error {errors[0]:+.1%}")
             + "; read this plan's throughput with that margin"]
    lines += [f"     {r.name:<46s} {r.published:>10,.0f} published {r.predicted:>10,.0f} predicted {r.error:+7.1%}"
              f"  ({label})" for label, r in rows]
    return lines


def _layout_json(lay: steptime.Layout) -> dict:
    """A layout's fields; a layout without a pipeline has no schedule (``None``), as its printout
    says 'no pipeline' and the command line refuses ``--schedule`` with ``--pp 1``."""
    out = {k: getattr(lay, k) for k in ("tp", "cp", "pp", "dp", "zero", "virtual_stages", "micro_batch",
                                        "recompute", "schedule", "attention", "attention_precision", "ep", "etp",
                                        "ep_dispatch", "expert_kernels", "offload_layers")}
    if lay.pp == 1:
        out["schedule"] = None
    return out


def plan_json(plan: Plan) -> dict:
    """The plan as one JSON-ready dict (the keys of the planner's contract, and more)."""
    st = plan.step
    g = plan.gpu
    shape = {"name": plan.shape_name, **{k: v for k, v in asdict(plan.shape).items() if k != "moe"},
             "head_size": plan.shape.head_size, "attention_width": plan.shape.attention_width,
             "active_params": plan.shape.active_params,
             "moe": asdict(plan.shape.moe) if plan.shape.moe is not None else None}
    return {
        "predicted_mfu": st.mfu,
        "hardware_flops_utilization": st.hfu,
        "hardware_flops_utilization_precision_peak": st.hfu_precision,
        "step_time_s": st.step_s,
        "tokens_per_s": st.tokens_per_s,
        "days": plan.days,
        "mfu_used": plan.mfu,
        "mfu_given": plan.mfu_given,
        "mfu_bf16_peak": st.mfu,
        "mfu_precision_peak": st.mfu_precision,
        "tokens_per_s_per_gpu": st.tokens_per_s_per_gpu,
        "tflops_per_gpu": st.flops_per_s_per_gpu / 1e12,
        "precision": plan.precision,
        "overlap": sorted(plan.overlap),
        "memory_per_gpu_bytes": st.memory_bytes,
        "memory": {"state_bytes": st.state_bytes, "activation_bytes": st.activation_bytes,
                   "gpu_bytes": g.memory_bytes, "usable_bytes": st.usable_bytes,
                   "reserve_bytes": hardware.ALLOCATOR_RESERVE_BYTES, "margin_bytes": st.margin_bytes,
                   "memory_source": g.memory_source, "memory_basis": g.memory_basis, "fits": st.fits,
                   **{f"{k}_bytes": v for k, v in plan.state.items()}},
        "layout": _layout_json(plan.layout),
        "given": list(plan.given),
        "breakdown_s": dict(st.breakdown_s),
        "hidden_s": dict(st.hidden_s),
        "bytes_per_step": dict(st.bytes),
        "ep_network_bytes_per_step": st.ep_network_bytes,
        "links": dict(st.links),
        "params": plan.params,
        "tokens": plan.tokens,
        "flops": plan.flops,
        "constants": plan.constants,
        "gpu": g.name,
        "count": plan.count,
        "global_batch": plan.global_batch,
        "microbatches": st.microbatches,
        "steps": plan.steps,
        "shape": shape,
        "alternatives": [{"step_time_s": s.step_s, "predicted_mfu": s.mfu, "layout": _layout_json(l)}
                         for s, l in plan.alternatives],
        "why_others_lose": list(plan.losers),
        "advice": list(plan.advice),
        "compute_optimal": {name: {"params": N, "tokens": D, "tokens_per_param": r, "loss": L}
                            for name, (N, D, r, L) in plan.optimal.items()},
        # --inference-tokens: the over-trained model cheapest over training and serving
        "overtrained": None if not plan.overtrained else {
            "inference_tokens": plan.overtrained["tokens"], "params": plan.overtrained["N"],
            "tokens": plan.overtrained["D"], "loss": plan.overtrained["loss"],
            "lifetime_flops": plan.overtrained["lifetime"],
            "compute_optimal_lifetime_flops": plan.overtrained["baseline"]},
        "published_runs_like_this": {"match": plan.track[0],
                                     "runs": [{"name": r.name, "set": label, "published_tokens_per_s_per_gpu": r.published,
                                               "predicted_tokens_per_s_per_gpu": r.predicted, "error": r.error}
                                              for label, r in plan.track[1]]},
    }


PROG = "python -m solutions.plan"


def build_parser() -> argparse.ArgumentParser:
    p = terse_argparse_errors(argparse.ArgumentParser(
        prog=PROG, description="Plan a training run: allocation, layout, memory, predicted step time, "
                               "throughput, MFU and days, from solutions/."))
    p.add_argument("--budget", type=float, metavar="FLOPS",
                   help="compute budget in FLOPs (then the model is compute-optimal)")
    p.add_argument("--model", type=count_with_suffix, help="parameters, e.g. 70e9 or 70B; the shape (--arch, else the nearest "
                                               "published one) takes this size, its depth or width and depth resized (its width "
                                               "alone with --layers)")
    p.add_argument("--tokens", type=count_with_suffix, help="training tokens, e.g. 1.4e12 or 1.4T")
    p.add_argument("--gpu", default="H100", help=f"one of {', '.join(hardware.PLANNABLE)} (or an alias)")
    p.add_argument("--count", "--gpus", dest="count", type=int, default=8, metavar="GPUS",
                   help="number of GPUs (default: 8)")
    p.add_argument("--precision", default=None, help=f"training precision, one of {list(hardware.PRECISIONS)} "
                                                     "(default: bf16, fp16 on a GPU without it)")
    p.add_argument("--overlap", default="default",
                   help="what hides behind compute: 'default' (tp, cp, pp, dp, as Megatron-Core's recommended "
                        "settings), 'none', 'all', or axes such as 'tp,dp,ep'")
    p.add_argument("--mfu", type=float, help="override the predicted MFU in the time to train, of the BF16 peak: in (0, 1], or up to the "
                                               "precision's peak over the BF16 peak (2 for FP8)")
    for name, what in (("tp", "tensor-parallel"), ("cp", "context-parallel"), ("pp", "pipeline-parallel"),
                       ("dp", "data-parallel"), ("ep", "expert-parallel")):
        unit = "STAGES" if name == "pp" else "GPUS"
        p.add_argument(f"--{name}", type=int, metavar=unit,
                       help=f"{what} degree, in {'stages' if name == 'pp' else 'GPUs'}" + (", carved out of tp x cp x dp" if name == "ep" else "")
                            + " (default: searched)")
    p.add_argument("--etp", type=int, metavar="GPUS",
                   help="experts' tensor-parallel degree, in GPUs (default: 1, not searched)")
    p.add_argument("--zero", type=int, help="ZeRO stage 0-3 (default: searched)")
    p.add_argument("--virtual-stages", type=int, help="model chunks per pipeline stage (interleaved 1F1B)")
    p.add_argument("--schedule", help=f"pipeline schedule, one of {list(steptime.SCHEDULES)}")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the shape's)")
    p.add_argument("--global-batch", type=int, help="sequences per optimizer step")
    p.add_argument("--micro-batch", type=int, help="sequences per micro-batch")
    p.add_argument("--layers", type=int, help="depth in transformer layers; with --model (or --budget) the width "
                                              "takes the size")
    p.add_argument("--hidden", type=int, help="width d_model, in features per token")
    p.add_argument("--heads", type=int, help="attention (query) heads")
    p.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention)")
    p.add_argument("--head-dim", type=int, help="head size in features (default hidden / heads)")
    p.add_argument("--ffn-hidden", type=int, help="dense MLP width, in features")
    p.add_argument("--mlp", help="the dense MLP: gelu (two matrices, GPT's) or swiglu (three, Llama's); default: "
                                 "the published shape's, gelu for a shape of your own (with dropout, as GPT trained; "
                                 "swiglu without)")
    p.add_argument("--vocab", type=int, help="vocabulary size, in tokens")
    p.add_argument("--experts", type=int, help="routed experts per MoE layer")
    p.add_argument("--top-k", type=int, help="experts per token")
    p.add_argument("--expert-ffn-hidden", type=int, help="each expert's MLP width, in features")
    p.add_argument("--shared-experts", type=int, help="always-used experts per MoE layer")
    p.add_argument("--dense-layers", type=int, help="leading layers with a plain MLP")
    p.add_argument("--moe-layer-freq", type=int, help="one MoE layer every this many layers (after the dense ones)")
    p.add_argument("--imbalance", type=float, help="busiest GPU's expert load over the mean, a ratio of at least 1 "
                                                   "(default 1)")
    p.add_argument("--ep-dispatch", default=None, help=f"token dispatch, one of {list(moe_step.DISPATCHERS)} "
                                                       "(default deepep)")
    p.add_argument("--expert-kernels", default="grouped",
                   help=f"how the experts run, one of {list(moe_step.EXPERT_KERNELS)}: 'fused' is one fused grouped MLP "
                        "in a full-iteration CUDA graph (Megatron-Bridge's 2026 MXFP8 recipes)")
    p.add_argument("--offload-layers", type=int, default=0,
                   help="layers per stage whose activations wait in the host's memory (Megatron's cpu_offloading_num_layers)")
    p.add_argument("--recompute", help=f"one of {list(steptime.RECOMPUTE)}, or Megatron-Core modules joined by commas "
                   f"(such as layernorm,moe_act; among {list(layer_time.RECOMPUTE_MODULES)}) (default: searched)")
    p.add_argument("--attention", default="flash", help=f"one of {list(steptime.ATTENTION)}")
    p.add_argument("--attention-precision", default="bf16",
                   help=f"FlashAttention's products, one of {list(steptime.ATTENTION_PRECISIONS)} (fp8: Transformer "
                        "Engine's FP8 attention)")
    p.add_argument("--network-gbps", type=float,
                   help="network bandwidth per GPU across nodes, Gb/s (default: the GPU's reference node)")
    p.add_argument("--convention", default="zero_16", help=f"bytes per parameter, one of {sorted(memory.BYTE_CONVENTIONS)}")
    p.add_argument("--constants", default=DEFAULT_CONSTANTS, help=f"one of {sorted(scaling.CONSTANT_SETS)}")
    p.add_argument("--batch-tokens", type=count_with_suffix,
                   help=f"tokens per optimizer step, instead of --global-batch (default: {DEFAULT_BATCH_TOKENS:,}, "
                        "in whole sequences)")
    p.add_argument("--inference-tokens", type=count_with_suffix,
                   help="tokens the trained model will serve: also plan the over-trained model that is cheapest over its lifetime")
    p.add_argument("--arch", help=f"shape to assume, one of {sorted(facts.ARCHITECTURES) + sorted(facts.MOE_ARCHITECTURES)} "
                                  "(default: the dense one nearest in size, resized to --model)")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    return p


#: make_plan's names for the flags whose destination is spelt otherwise.
_KWARG_FLAGS = {"expert_ffn": "--expert-ffn-hidden"}


def _as_flags(message: str) -> str:
    """An error of :func:`make_plan` with its two-word argument names written as the flags the
    user typed (``global_batch`` -> ``--global-batch``, ``virtual_stages=5`` ->
    ``--virtual-stages=5``); one-word names (tp, ep, gpu) read the same either way."""
    flags = {a.dest: a.option_strings[0] for a in build_parser()._actions
             if a.option_strings and "_" in a.dest}
    flags.update(_KWARG_FLAGS)
    pattern = r"(?<![\w-])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True)) + r")(?!\w)"
    # what the user typed comes back quoted ('top_k' as a --gpu): only the text around it is ours
    parts = re.split(r"('[^']*'|\"[^\"]*\")", message)
    return "".join(part if i % 2 else re.sub(pattern, lambda m: flags[m.group(1)], part)
                   for i, part in enumerate(parts))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.global_batch is not None and args.batch_tokens is not None:
            raise ValueError(f"give --global-batch or --batch-tokens, not both (got {args.global_batch:,} sequences "
                             f"and {args.batch_tokens:,.0f} tokens)")
        net = None
        if args.network_gbps is not None:
            net = float(positive("network_gbps", args.network_gbps)) * 1e9 / 8
        plan = make_plan(budget=args.budget, model=args.model, tokens=args.tokens, gpu=args.gpu, count=args.count,
                         mfu=args.mfu, tp=args.tp, pp=args.pp, zero=args.zero, convention=args.convention,
                         constants=args.constants, arch=args.arch,
                         batch_tokens=DEFAULT_BATCH_TOKENS if args.batch_tokens is None else args.batch_tokens,
                         inference_tokens=args.inference_tokens, cp=args.cp, dp=args.dp, seq_len=args.seq_len,
                         global_batch=args.global_batch, micro_batch=args.micro_batch, layers=args.layers,
                         hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads, head_dim=args.head_dim,
                         ffn_hidden=args.ffn_hidden, vocab=args.vocab, mlp=args.mlp, recompute=args.recompute,
                         attention=args.attention, virtual_stages=args.virtual_stages, schedule=args.schedule,
                         network=net, precision=args.precision, overlap=args.overlap, experts=args.experts,
                         top_k=args.top_k, expert_ffn=args.expert_ffn_hidden, shared_experts=args.shared_experts,
                         dense_layers=args.dense_layers, moe_layer_freq=args.moe_layer_freq,
                         imbalance=args.imbalance, ep=args.ep, etp=args.etp, ep_dispatch=args.ep_dispatch,
                         offload_layers=args.offload_layers, expert_kernels=args.expert_kernels,
                         attention_precision=args.attention_precision)
    except ValueError as exc:
        print(f"{PROG}: error: {_as_flags(' '.join(str(exc).split()))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan_json(plan)))
    elif sys.stdout.isatty():  # a terminal: long lines broken with a hanging indent, not mid-word
        print(wrap_lines(format_plan(plan), max(60, shutil.get_terminal_size().columns - 1)))
    else:  # a file or a pipe: one line per item, for grep
        print(format_plan(plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
