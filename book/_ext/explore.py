"""Interactive explorers for the book: the numbers come from ``solutions/`` at build time.

The ``explorer`` directive (``{explorer} chinchilla``, ``memory``, ``pipeline``, ``collectives`` or
``fsdp``, ``planner`` in a MyST page; a section's page may carry one too) calls the course's tested functions over a grid of inputs and writes
the results into the page as JSON. The planner's table is too large to ride in its page: it is
written to ``_static/explore/planner-data.js`` and fetched (as a script, which also works from a
folder on disk) when the form comes into view (:data:`DEFERRED`). A small script, ``book/_static/explore/explore.js``, draws the controls and
*looks values up* in that table: it computes no formula of its own, so what the reader sees
is exactly what the tests check. The script and its style sheet are copied into the built
site, so the explorers work offline and without a server (no CDN, no request at view time).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

import coursefig

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # planner_form sits beside this module in book/_ext
    sys.path.insert(0, str(HERE))
import planner_form  # noqa: E402

ROOT = HERE.parents[1]
ASSETS = HERE.parent / "_static" / "explore"
GB = 1e9


def explorer_colours() -> dict:
    """Every colour the explorers draw with, in one table (taken from ``coursefig`` where the
    house style names the concept). The browser script receives it with each explorer's data and
    defines no colour of its own, so a change of the house style reaches every explorer."""
    named = coursefig.COLORS
    return {
        # the three published Chinchilla fits, in the order of CHINCHILLA_SETS
        "fits": [named[key] for key, _, _ in CHINCHILLA_SETS],
        # what a GPU holds
        **{k: named[k] for k in ("weights", "gradients", "optimizer", "activations")},
        # pipeline passes; the weight-gradient pass W of the zero-bubble schedules is a gradient
        "forward": named["forward"], "backward": named["backward"], "weight_grad": named["gradients"],
        # FSDP's collectives: the all-gather moves weights, the reduce-scatter gradients
        "gather": named["weights"], "reduce": named["gradients"],
        # a chunk of a ring all-reduce (of data-parallel gradients), shaded from empty to complete
        "chunk": named["dp"],
    }


def _sig(x, digits=6):
    """A float rounded to ``digits`` significant digits (keeps the JSON small)."""
    return float(f"{float(x):.{digits}g}")


# --------------------------------------------------------------------------
# Chinchilla: compute-optimal N, D, D/N and loss under three constant sets
# --------------------------------------------------------------------------

#: log10 of the compute budgets on the slider, from 1e18 to 1e27 FLOPs in tenths of a decade.
CHINCHILLA_LOG10_C = np.round(np.arange(180, 271) / 10, 1)
#: (key, label, short label) of the published fits, in the explorer's order.
#: Names as in the Chinchilla section's figures (coursefig.NAMES).
CHINCHILLA_SETS = tuple(
    (key, f"{coursefig.NAMES[key]} ({when})", short) for key, when, short in (
        ("hoffmann_rounded", "2022, as printed", "Hoffmann, rounded"),
        ("hoffmann_precise", "2022, TeX source", "Hoffmann, unrounded"),
        ("epoch_2024", "2024 replication", coursefig.NAMES["epoch_2024"]),
    ))
#: The loss-against-size panel: model sizes in steps of VALLEY_STEP decades, VALLEY_HALF steps
#: either side of the geometric mean of the three fits' optima at the chosen budget.
VALLEY_HALF, VALLEY_STEP = 20, 0.075


def valley_grid(C_optima) -> np.ndarray:
    """log10 N of the panel's points for one budget, centred on the fits' optima."""
    centre = float(np.mean(np.log10(C_optima)))
    return np.round(centre + VALLEY_STEP * np.arange(-VALLEY_HALF, VALLEY_HALF + 1), 4)


def chinchilla_data() -> dict:
    from solutions import scaling

    budgets = 10.0 ** CHINCHILLA_LOG10_C
    sets = []
    optima = np.array([scaling.compute_optimal_closed_form(budgets, scaling.CONSTANT_SETS[k])[0]
                       for k, _, _ in CHINCHILLA_SETS])  # (fit, budget)
    grids = [valley_grid(optima[:, i]) for i in range(len(budgets))]
    for colour, (key, label, short) in zip(explorer_colours()["fits"], CHINCHILLA_SETS):
        c = scaling.CONSTANT_SETS[key]
        # Loss along the iso-FLOP line D = C / (6N) at every budget: the valley whose floor is N_opt.
        valley = [[_sig(x, 5) for x in scaling.parametric_loss(
                      10.0 ** g, scaling.iso_flop_tokens(C, 10.0 ** g), c)]
                  for C, g in zip(budgets, grids)]
        N, D, ratio, loss = scaling.compute_optimal_closed_form(budgets, c)
        sets.append({
            "key": key, "label": label, "short": short, "colour": colour, "cite": c.cite,
            "constants": {f: getattr(c, f) for f in ("E", "A", "B", "alpha", "beta")},
            "a": _sig(scaling.allocation_exponent(c)),
            "N": [_sig(x) for x in N], "D": [_sig(x) for x in D],
            "ratio": [_sig(x) for x in ratio], "loss": [_sig(x) for x in loss], "valley": valley,
        })
    return {"log10C": [float(x) for x in CHINCHILLA_LOG10_C], "C": [_sig(x) for x in budgets],
            "valleyLog10N": [[float(x) for x in g] for g in grids],
            "default": int(np.argmin(np.abs(CHINCHILLA_LOG10_C - 23.0))), "sets": sets}


# --------------------------------------------------------------------------
# Memory: model state and activations per GPU under TP x PP x DP with ZeRO
# --------------------------------------------------------------------------

MEMORY_GPUS = (1, 2, 4, 8, 16, 24, 64, 256, 1024, 4096, 16384)
MEMORY_TP = (1, 2, 4, 8)
MEMORY_PP = (1, 2, 4, 8, 16)
#: Sequence lengths (tokens) and micro-batch sizes (sequences) the activation controls offer.
MEMORY_SEQ = (1024, 2048, 4096, 8192, 16384, 32768)
MEMORY_MICRO_BATCH = (1, 2, 4, 8)
#: Readable names of the byte conventions of solutions.memory (their descriptions say more).
CONVENTION_LABELS = {
    "chapter_12": "12 bytes: bf16 weights and gradients, fp32 Adam, no master copy",
    "zero_16": "16 bytes: mixed precision with fp32 master weights (ZeRO's count)",
    "fp32_grads_18": "18 bytes: as ZeRO's 16, gradients kept in fp32",
    "fp32_accum_20": "20 bytes: ZeRO's 16 + fp32 gradient accumulation (Megatron-DeepSpeed)",
    "adam8bit_10": "10 bytes: 8-bit Adam states",
    "fp32_adamw_16": "16 bytes: everything in fp32 (what the labs store)",
}
#: Activation options: (key, label, keyword arguments of activation_memory_per_layer).
RECOMPUTE = (
    ("none", "none: store every activation", {}),
    ("selective", "selective: recompute attention scores", {"selective_recompute": True}),
    ("full", "full: store only each layer's input", {"full_recompute": True}),
)
#: ZeRO stage -> the strategy name that memory_breakdown gives it.
ZERO_STRATEGY = {0: "dp", 1: "zero1", 2: "zero2", 3: "zero3"}


def stage0_activation_bytes(arch, tp, pp, sequence_parallel, recompute_kwargs,
                            seq_len=None, micro_batch=1) -> float:
    """Activation bytes on the busiest GPU (pipeline stage 0) for micro-batches of
    ``micro_batch`` sequences of ``seq_len`` tokens (default: the model's training length).

    Per layer: Korthikanti et al.'s count (``solutions.memory.activation_memory_per_layer``);
    stage 0 holds ``ceil(layers / pp)`` layers and, under 1F1B with at least ``pp``
    micro-batches, the activations of ``peak_in_flight`` micro-batches (``pp`` of them).
    """
    from solutions import memory

    per_layer = memory.activation_memory_per_layer(
        seq_len or arch.seq_len, micro_batch, arch.d_model, arch.heads, tp=tp,
        sequence_parallel=sequence_parallel,
        **recompute_kwargs)
    return per_layer * math.ceil(arch.layers / pp) * _stage0_in_flight(pp)


@functools.lru_cache(maxsize=None)
def _stage0_in_flight(pp) -> int:
    """Micro-batches whose activations stage 0 holds at once under 1F1B (m = 2 pp)."""
    from solutions import pipeline

    return pipeline.peak_in_flight(pipeline.pipeline_schedule(pp, 2 * pp, "1f1b"), 0)


#: Expert-parallel degrees offered (a mixture of experts only) and the training precisions.
MEMORY_EP = (1, 2, 4, 8, 16, 32, 64)
MEMORY_PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")


def memory_devices() -> list:
    """``(GB the vendor sells, GPUSpec)`` of every GPU the planner plans, in its table's order
    (T4 and L4 to Blackwell and AMD's Instinct); the chapters' GPUs with the GB they quote."""
    from solutions import facts, hardware

    return [(facts.GPUS[n].memory_gb if n in facts.GPUS else float(hardware.GPU_TABLE[n].memory_vendor.split()[0]),
             hardware.GPU_TABLE[n]) for n in hardware.PLANNABLE]


PRECISION_LABELS = {
    "bf16": "BF16",
    "fp8": "FP8 (per-tensor scales)",
    "mxfp8": "MXFP8 (a scale per 32 values)",
    "nvfp4": "NVFP4 (4-bit, a scale per 16 values)",
}


def _per_token_activations(arch, tp, pp, recompute, sp, precision_name, attention):
    """Activation bytes per token (of the micro-batch's ``s b``) on pipeline stage 0, by
    ``solutions.steptime.activation_bytes`` with 1F1B's ``pp`` micro-batches in flight: linear
    in the tokens with FlashAttention, and so is what a precision saves with either attention."""
    from solutions import steptime

    shape = steptime.shape_of(arch)
    lay = steptime.Layout(tp=tp, pp=pp, micro_batch=1, recompute=recompute, attention=attention,
                          sequence_parallel=sp)
    return steptime.activation_bytes(shape, lay, 2 * pp, precision_name) / shape.seq_len


def memory_data() -> dict:
    from solutions import facts, memory, precision, steptime

    dense_models = list(facts.ARCHITECTURES.values())
    moe_models = list(facts.MOE_ARCHITECTURES.values())
    models = dense_models + moe_models
    conventions = list(memory.BYTE_CONVENTIONS.values())
    shapes = [steptime.shape_of(m) for m in models]
    expert = [sh.expert_params if sh.is_moe else 0.0 for sh in shapes]
    params = [getattr(m, "total_params", None) or m.params for m in models]
    pairs, layouts, ep_pairs, ep_layouts = [], {}, [], {}
    for g in MEMORY_GPUS:
        for tp in MEMORY_TP:
            for pp in MEMORY_PP:
                if g % (tp * pp):
                    continue  # no whole data-parallel degree: the page says so
                dp = g // (tp * pp)
                pair = (tp * pp, dp)
                if pair not in pairs:
                    pairs.append(pair)
                layouts[f"{g},{tp},{pp}"] = [pairs.index(pair), dp]
                for ep in MEMORY_EP:
                    if (tp * dp) % ep:
                        continue  # EP is carved out of TP x DP: the page says so
                    ep_pair = (pp * ep, tp * dp // ep)
                    if ep_pair not in ep_pairs:
                        ep_pairs.append(ep_pair)
                    ep_layouts[f"{g},{tp},{pp},{ep}"] = [ep_pairs.index(ep_pair), ep_pair[1]]

    def breakdown(n, z, degree, conv):
        return [_sig(v / GB, 5) for v in memory.memory_breakdown(n, ZERO_STRATEGY[z], degree, conv.name).values()]

    # state[dense model][convention][zero][pair]: the TP x PP shard, ZeRO over DP
    state = [[[[breakdown(m.params / k, z, dp, conv) for k, dp in pairs] for z in memory.ZERO_STAGES]
              for conv in conventions] for m in dense_models]
    # A mixture of experts, per billion parameters (the state is linear in them):
    # unit[convention][zero][pair] for its dense part on the TP x PP shard, ZeRO over DP;
    # unit_ep[convention][zero][ep pair] for its experts on PP x EP (not split by TP, as
    # Megatron-Core's expert TP of 1), ZeRO over the TP x DP / EP ranks that hold the same
    # experts (solutions.moe_step.state_shards)
    unit = [[[breakdown(1e9 / k, z, dp, conv) for k, dp in pairs] for z in memory.ZERO_STAGES]
            for conv in conventions]
    unit_ep = [[[breakdown(1e9 / k, z, edp, conv) for k, edp in ep_pairs] for z in memory.ZERO_STAGES]
               for conv in conventions]
    # act[dense model][tp][pp][recompute][sp][seq][micro-batch], in GB (BF16, Korthikanti et al.)
    act = [[[[[[[_sig(stage0_activation_bytes(m, tp, pp, sp, kw, s, b) / GB, 5) for b in MEMORY_MICRO_BATCH]
                for s in MEMORY_SEQ]
               for sp in (False, True)]
              for _, _, kw in RECOMPUTE]
             for pp in MEMORY_PP]
            for tp in MEMORY_TP]
           for m in dense_models]
    # saved[dense model][precision][tp][pp][recompute][sp]: GB per token that storing the
    # linear layers' inputs in the precision saves against BF16
    saved = [[[[[[_sig((_per_token_activations(m, tp, pp, r, sp, "bf16", "standard")
                        - _per_token_activations(m, tp, pp, r, sp, pr, "standard")) / GB, 5)
                  for sp in (False, True)] for r, _, _ in RECOMPUTE] for pp in MEMORY_PP] for tp in MEMORY_TP]
              for pr in MEMORY_PRECISIONS] for m in dense_models]
    # moe_act[mixture of experts][precision][tp][pp][recompute][sp]: GB per token (FlashAttention)
    moe_act = [[[[[[_sig(_per_token_activations(m, tp, pp, r, sp, pr, "flash") / GB, 5)
                    for sp in (False, True)] for r, _, _ in RECOMPUTE] for pp in MEMORY_PP] for tp in MEMORY_TP]
                for pr in MEMORY_PRECISIONS] for m in moe_models]
    model_rows = []
    for i, (m, sh) in enumerate(zip(models, shapes)):
        row = {"name": m.name, "params": params[i], "layers": m.layers, "seq_len": m.seq_len, "d_model": m.d_model,
               "heads": m.heads}
        if sh.is_moe:
            row.update({"moe": len(model_rows) - len(dense_models), "experts": m.experts, "top_k": m.top_k,
                        "active": sh.active_params, "expert_params": expert[i]})
        else:
            row["dense"] = i
        model_rows.append(row)
    return {
        "models": model_rows,
        "conventions": [{"name": c.name, "label": CONVENTION_LABELS[c.name], "total": c.total, "weights": c.weights, "grads": c.grads,
                         "optimizer": c.optimizer, "description": c.description} for c in conventions],
        # weight_bytes[convention]: bytes per parameter of the weights under the precision
        # (solutions.precision.Recipe.weight_bytes), for the page to scale the state's weights
        "precisions": [{"name": n, "label": PRECISION_LABELS[n], "weight_copy": precision.RECIPES[n].weight_copy_bytes,
                        "copies_only": precision.RECIPES[n].quantised_weights_only,
                        "weight_bytes": [precision.RECIPES[n].weight_bytes(c.weights) for c in conventions]}
                       for n in MEMORY_PRECISIONS],
        "gpus": list(MEMORY_GPUS), "tp": list(MEMORY_TP), "pp": list(MEMORY_PP), "ep": list(MEMORY_EP),
        "zero": list(memory.ZERO_STAGES), "seq": list(MEMORY_SEQ), "micro_batch": list(MEMORY_MICRO_BATCH),
        "recompute": [[key, label] for key, label, _ in RECOMPUTE],
        # the datasheet's GB names the GPU; what a layout must fit in is what CUDA can allocate
        # less the allocator's reserve (hardware.GPUSpec.usable_memory_bytes), as in the planner
        "devices": [{"name": g.name, "memory_gb": memory_gb, "usable_gb": _sig(g.usable_memory_bytes / GB, 5),
                     "cuda_gb": _sig(g.memory_bytes / GB, 5), "basis": g.memory_basis, "formats": list(g.formats)}
                    for memory_gb, g in memory_devices()],
        "layouts": layouts, "ep_layouts": ep_layouts, "state": state, "unit": unit, "unit_ep": unit_ep, "act": act,
        "saved": saved, "moe_act": moe_act,
        "colours": explorer_colours(),
        "defaults": {"model": "Llama 3 70B", "gpus": 64, "tp": 8, "pp": 1, "zero": 1, "micro_batch": 1,
                     "convention": "zero_16", "device": "H100 SXM", "recompute": "selective", "sp": True,
                     "precision": "bf16", "ep": 1},
    }


# --------------------------------------------------------------------------
# Pipeline: simulated schedules and their bubble
# --------------------------------------------------------------------------

PIPELINE_P = tuple(range(1, 9))
PIPELINE_M = (1, 2, 3, 4, 6, 8, 12, 16)
#: (key, label, kind, chunks per stage)
PIPELINE_SCHEDULES = (
    ("gpipe", "GPipe", "gpipe", 1),
    ("1f1b", "1F1B (PipeDream-Flush)", "1f1b", 1),
    ("interleaved2", "interleaved 1F1B, 2 chunks per GPU", "interleaved", 2),
    ("zb-h1", "ZB-H1 (zero bubble, 1F1B's memory)", "zb-h1", 1),
    ("zb-h2", "ZB-H2 (zero bubble, more memory)", "zb-h2", 1),
    ("dualpipe", "DualPipe (from both ends)", "dualpipe", 1),
)
#: The schedules that split the backward into B and W are tabulated on a smaller grid (the
#: page stays light): these stages and micro-batches.
SPLIT_P, SPLIT_M = (2, 4, 6, 8), (4, 8, 12, 16)
T_FWD, T_BWD = 1.0, 2.0
#: Times are stored as integers in units of 1/TIME_SCALE (every pass lasts a multiple of 1/2).
TIME_SCALE = 2
#: Pass codes: 2 x phase + chunk, the phase 0 (F), 1 (B) or 2 (W).
PHASES = ("F", "B", "W")


def _ticks(x, scale) -> int:
    """A time as an integer number of 1/scale units (exact for the explorers' grids)."""
    n = round(x * scale)
    assert abs(n - x * scale) < 1e-9, f"{x} is not a multiple of 1/{scale}"
    return n


def pipeline_formulas(kind, p, m, v) -> tuple:
    """(share of total, relative to ideal): the schedule's printed bubble formula. GPipe, 1F1B
    and interleaved: ``solutions.pipeline.bubble_fraction``; ZB-H1 and ZB-H2:
    ``solutions.efficiency.pipeline_bubble`` (Qi et al. 2024); DualPipe:
    ``solutions.pipeline.dualpipe_bubble`` (DeepSeek-V3 report, Table 2), all with the
    backward split into input and weight gradients of one unit each."""
    from solutions import efficiency, pipeline

    if kind in pipeline.ZERO_BUBBLE or kind == pipeline.DUALPIPE:
        t = T_BWD / 2
        rel = (efficiency.pipeline_bubble(p, m, kind, T_FWD, t, t) if kind != pipeline.DUALPIPE
               else pipeline.dualpipe_bubble(p, m, T_FWD, t, t))
        return rel / (1 + rel), rel
    return (pipeline.bubble_fraction(p, m, "share_of_total", v), pipeline.bubble_fraction(p, m, "relative_to_ideal", v))


def pipeline_data() -> dict:
    from solutions import pipeline

    runs = {}
    for key, _, kind, v in PIPELINE_SCHEDULES:
        split = kind in pipeline.ZERO_BUBBLE or kind == pipeline.DUALPIPE
        for p in PIPELINE_P:
            for m in PIPELINE_M:
                name = f"{key},{p},{m}"
                if split and (p not in SPLIT_P or m not in SPLIT_M):
                    runs[name] = {"error": f"this page tabulates {kind.upper() if kind != 'dualpipe' else 'DualPipe'} "
                                           f"for p = {', '.join(map(str, SPLIT_P))} and m = {', '.join(map(str, SPLIT_M))}"}
                    continue
                try:
                    events = pipeline.pipeline_schedule(p, m, kind, T_FWD, T_BWD, interleave=v)
                except ValueError as exc:  # e.g. interleaving needs m to be a multiple of p
                    runs[name] = {"error": str(exc)}
                    continue
                flat = []
                for e in events:
                    flat += [e.stage, e.microbatch, 2 * PHASES.index(e.phase) + e.chunk,
                             _ticks(e.start, TIME_SCALE), _ticks(e.end, TIME_SCALE)]
                share, relative = pipeline_formulas(kind, p, m, v)
                runs[name] = {
                    "events": flat,
                    "makespan": _sig(pipeline.makespan(events)),
                    "idle": _sig(pipeline.idle_fraction(events)),
                    "inner": _sig(pipeline.inner_idle_fraction(events)),
                    "share": _sig(share),
                    "relative": _sig(relative),
                    "peak0": pipeline.peak_in_flight(events, 0),
                }
    return {"p": list(PIPELINE_P), "m": list(PIPELINE_M), "t_fwd": T_FWD, "t_bwd": T_BWD, "scale": TIME_SCALE,
            "schedules": [[key, label, v] for key, label, _, v in PIPELINE_SCHEDULES], "runs": runs,
            "colours": explorer_colours(),
            "defaults": {"schedule": "1f1b", "p": 4, "m": 8}}


# --------------------------------------------------------------------------
# FSDP: one step of one GPU, gather, compute, free, prefetch, reduce-scatter
# --------------------------------------------------------------------------

FSDP_UNITS = 4
FSDP_M = (1, 2, 4)
#: The all-gather's time per unit, in forward passes of that unit (the reduce-scatter's too).
FSDP_RATIO = (0.25, 0.5, 1.0, 2.0)
FSDP_T_FWD, FSDP_T_BWD = 1.0, 2.0
FSDP_SCALE = 4
#: Event codes, in the order the page names them.
FSDP_KINDS = (("gather", "F"), ("gather", "B"), ("reduce-scatter", ""), ("forward", ""), ("backward", ""))


def fsdp_data() -> dict:
    """For every choice: the timeline of ``solutions.fsdp.fsdp_timeline`` (codes of
    FSDP_KINDS, unit, micro-batch, start and end in 1/FSDP_SCALE), the step's length, its
    exposed communication, the units held whole over time (``held_units`` after every
    event boundary) and at the peak, and the number of collectives."""
    from solutions import fsdp

    runs = {}
    for m in FSDP_M:
        for r in FSDP_RATIO:
            for prefetch in (True, False):
                for reshard in (True, False):
                    events = fsdp.fsdp_timeline(FSDP_UNITS, m, FSDP_T_FWD, FSDP_T_BWD, r * FSDP_T_FWD,
                                                prefetch=prefetch, reshard_after_forward=reshard)
                    flat = []
                    for e in events:
                        flat += [FSDP_KINDS.index((e.kind, e.phase)), e.unit, e.microbatch,
                                 _ticks(e.start, FSDP_SCALE), _ticks(e.end, FSDP_SCALE)]
                    times = sorted({0.0} | {e.start for e in events} | {e.end for e in events})
                    held = [[_ticks(t, FSDP_SCALE), fsdp.held_units(events, t)] for t in times]
                    runs[f"{m},{r:g},{int(prefetch)},{int(reshard)}"] = {
                        "events": flat, "held": held,
                        "makespan": _sig(fsdp.makespan(events)),
                        "exposed": _sig(fsdp.exposed_communication(events)),
                        "compute": _sig(sum(e.end - e.start for e in events if e.stream == "compute")),
                        "peak": fsdp.peak_held_units(events),
                        "gathers": sum(e.kind == "gather" for e in events),
                        "reduces": sum(e.kind == "reduce-scatter" for e in events),
                    }
    return {"units": FSDP_UNITS, "m": list(FSDP_M), "ratio": list(FSDP_RATIO), "scale": FSDP_SCALE,
            "t_fwd": FSDP_T_FWD, "t_bwd": FSDP_T_BWD, "kinds": [list(k) for k in FSDP_KINDS], "runs": runs,
            "colours": explorer_colours(),
            "defaults": {"m": 1, "ratio": 0.5, "prefetch": True, "reshard": True}}


# --------------------------------------------------------------------------
# Collectives: a ring all-reduce (reduce-scatter, then all-gather), chunk by chunk
# --------------------------------------------------------------------------

COLLECTIVE_P = tuple(range(2, 9))
#: (key, label, the ring simulation's steps it consists of)
COLLECTIVES = (
    ("all-reduce", "all-reduce", ("reduce-scatter", "all-gather")),
    ("reduce-scatter", "reduce-scatter", ("reduce-scatter",)),
    ("all-gather", "all-gather", ("all-gather",)),
)


def collective_buffers() -> list:
    """(label, bytes) of the buffer sizes offered: a round gigabyte and the bf16 gradients of
    two models (``solutions.memory``'s ZeRO convention: 2 bytes of gradient per parameter)."""
    from solutions import facts, memory

    grad_bytes = memory.BYTE_CONVENTIONS["zero_16"].grads
    out = [("1 GB", 1e9)]
    for name in ("Llama 3 8B", "Llama 3 70B"):
        size = facts.ARCHITECTURES[name].params * grad_bytes
        out.append((f"{size / GB:,.0f} GB: the bf16 gradients of {name}", size))
    return out


def ring_states(p: int) -> dict:
    """Every step of ``solutions.communication.simulate_ring_allreduce`` on ``p`` GPUs.

    GPU ``r`` starts with a one-hot buffer (chunk ``c`` holds a 1 in slot ``r``), so each
    chunk's state says whose contributions it has summed. Returns, per step, the phase, the
    chunk each GPU sends, a bitmask of contributors for every (GPU, chunk), and the bytes of the
    chunk each GPU sent as a share of one GPU's buffer (read from the simulated arrays).
    """
    from solutions import communication

    start = np.zeros((p, p, p), dtype=np.int64)
    for r in range(p):
        start[r, :, r] = 1
    result = communication.simulate_ring_allreduce(start)
    weights = 1 << np.arange(p)

    def masks(state):
        assert state.max() <= 1, "a contribution was counted twice"
        return [[int(state[r, c] @ weights) for c in range(p)] for r in range(p)]

    steps = []
    for step in result.steps:
        share = [step.state[r, step.sends[r]].nbytes / result.buffer_bytes for r in range(p)]
        steps.append({"phase": step.phase, "sends": list(step.sends), "mask": masks(step.state),
                      "share": [_sig(x, 12) for x in share]})
    total = np.sum([st["share"] for st in steps], axis=0)
    assert np.allclose(total, result.bytes_sent_per_rank / result.buffer_bytes), "bytes disagree"
    return {"start": masks(start), "steps": steps}


def collective_data() -> dict:
    """For each p, collective and buffer size: the chunk states step by step and the bytes each
    GPU has sent after each step (the simulation's chunks, summed), with the ring formula's total
    from ``solutions.communication`` to compare (nccl-tests PERFORMANCE.md)."""
    from solutions import communication

    formula = {"all-reduce": communication.allreduce_bytes_per_rank,
               "reduce-scatter": communication.reduce_scatter_bytes_per_rank,
               "all-gather": communication.allgather_bytes_per_rank}
    buffers = collective_buffers()
    runs = {}
    for p in COLLECTIVE_P:
        ring = ring_states(p)
        for key, _, phases in COLLECTIVES:
            steps = [st for st in ring["steps"] if st["phase"] in phases]
            # all-gather alone starts where the reduce-scatter ends: GPU r owns chunk (r + 1) % p
            start = ring["start"] if phases[0] == "reduce-scatter" else ring["steps"][p - 2]["mask"]
            sent = np.cumsum([st["share"] for st in steps], axis=0)  # (step, GPU), share of buffer
            if key == "all-gather":  # a chunk is there (all p bits) or not yet (0)
                full = (1 << p) - 1
                keep = lambda m: [[x if x == full else 0 for x in row] for row in m]  # noqa: E731
            else:
                keep = lambda m: m  # noqa: E731
            runs[f"{key},{p}"] = {
                "start": keep(start),
                "steps": [{"phase": st["phase"], "sends": st["sends"], "mask": keep(st["mask"])}
                          for st in steps],
                "sent": [[[_sig(x * size, 6) for x in row] for row in sent] for _, size in buffers],
                "formula": [_sig(formula[key](size, p), 6) for _, size in buffers],
            }
    return {"p": list(COLLECTIVE_P), "collectives": [[k, label] for k, label, _ in COLLECTIVES],
            "buffers": [label for label, _ in buffers], "runs": runs, "colours": explorer_colours(),
            "defaults": {"collective": "all-reduce", "p": 4, "buffer": 0}}


BUILDERS = {"chinchilla": chinchilla_data, "memory": memory_data, "pipeline": pipeline_data,
            "collectives": collective_data, "fsdp": fsdp_data, "planner": planner_form.planner_data}
#: Explorers whose table is written to a script of its own, loaded when the explorer is in view.
DEFERRED = {"planner"}
#: The modules whose change must rebuild an explorer page.
SOURCES = {
    "chinchilla": ["solutions/scaling.py", "coursefig/__init__.py"],
    "memory": ["solutions/memory.py", "solutions/facts.py", "solutions/pipeline.py", "solutions/hardware.py",
               "solutions/data/gpus.toml", "solutions/precision.py", "solutions/steptime.py", "coursefig/__init__.py"],
    "pipeline": ["solutions/pipeline.py", "solutions/efficiency.py", "coursefig/__init__.py"],
    "fsdp": ["solutions/fsdp.py", "coursefig/__init__.py"],
    "collectives": ["solutions/communication.py", "solutions/memory.py", "solutions/facts.py",
                    "coursefig/__init__.py"],
    "planner": [str(p.relative_to(ROOT)) for p in sorted((ROOT / "solutions").glob("*.py"))]
               + ["book/_ext/planner_form.py"],
}


class ExplorerDirective(SphinxDirective):
    """``{explorer} NAME``: the explorer's container and its table of values as JSON."""

    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0]
        if name not in BUILDERS:
            raise self.error(f"unknown explorer {name!r}; known: {', '.join(BUILDERS)}")
        for source in SOURCES[name] + ["book/_ext/explore.py"]:
            self.env.note_dependency(str(ROOT / source))
        data = BUILDERS[name]()
        if name in DEFERRED:
            # a table in parts (``chunks``) rides in one script per part, loaded when the reader
            # picks it; the rest (the choices) in the explorer's own script
            chunks = [json.dumps(c, separators=(",", ":")) for c in data.pop("chunks", [])]
            payload = json.dumps({**data, "chunk_count": len(chunks)}, separators=(",", ":"))
            stored = getattr(self.env, "course_explorer_data", {})
            stored[name] = payload
            stored.update({f"{name}-{i}": c for i, c in enumerate(chunks)})
            self.env.course_explorer_data = stored
            version = hashlib.sha256("".join([payload, *chunks]).encode()).hexdigest()[:12]
            up = "../" * self.env.docname.count("/")
            html = (f'<div class="explorer" data-explorer="{name}" '
                    f'data-src="{up}_static/explore/{name}-data.js?v={version}" '
                    f'data-chunk-src="{up}_static/explore/{name}-{{i}}-data.js?v={version}">'
                    f'<noscript>This explorer needs JavaScript.</noscript>'
                    f'<p class="explorer-loading">Loading the {name}\u2026</p></div>')
            return [nodes.raw("", html, format="html")]
        payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
        html = (
            f'<div class="explorer" data-explorer="{name}">'
            f'<noscript>This explorer needs JavaScript.</noscript>'
            f'<script type="application/json" class="explorer-data">{payload}</script></div>'
        )
        return [nodes.raw("", html, format="html")]


def _add_assets(app, pagename, templatename, context, doctree):
    if 'class="explorer"' in context.get("body", ""):
        app.add_css_file("explore/explore.css")
        app.add_js_file("explore/explore.js", defer="defer")


def _copy_assets(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "explore"
    target.mkdir(parents=True, exist_ok=True)
    for source in ASSETS.iterdir():
        if source.is_file():
            shutil.copyfile(source, target / source.name)
    for name, payload in getattr(app.env, "course_explorer_data", {}).items():
        script = f"(window.courseExplorerData = window.courseExplorerData || {{}})[{json.dumps(name)}] = {payload};\n"
        (target / f"{name}-data.js").write_text(script, encoding="utf-8")


def _merge_data(app, env, docnames, other):
    env.course_explorer_data = {**getattr(env, "course_explorer_data", {}),
                                **getattr(other, "course_explorer_data", {})}


def setup(app):
    app.add_directive("explorer", ExplorerDirective)
    app.connect("html-page-context", _add_assets)
    app.connect("build-finished", _copy_assets)
    app.connect("env-merge-info", _merge_data)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
