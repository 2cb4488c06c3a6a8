"""A training planner: from a compute budget, or a model size and token count, and a
cluster, to a compute-optimal allocation, a parallel layout, memory per GPU,
communication per step and days to train.

    python -m solutions.plan --budget 5.88e23 --gpu H100 --count 1024
    python -m solutions.plan --model 70e9 --tokens 1.4e12 --gpu H100 --count 1024 --mfu 0.4
    python -m solutions.plan --model 405e9 --tokens 15.6e12 --gpu H100 --count 16384 --tp 8 --pp 16

Every figure comes from the rest of :mod:`solutions`: the allocation from
:mod:`solutions.scaling`, the memory from :mod:`solutions.memory`, the traffic from
:mod:`solutions.communication`, the time from :mod:`solutions.compute`, the process
grid from :mod:`solutions.layout`, the bubble from :mod:`solutions.pipeline`, the
hardware and shapes from :mod:`solutions.facts`.

**The layout rule** (the four regimes of the chapter's "When to use what", with degrees):

* up to 1B parameters: data parallelism, the full state on every GPU;
* up to 30B: FSDP (ZeRO-3) over all GPUs;
* up to 100B: tensor parallelism across the GPUs of one server, FSDP over the servers;
* beyond: tensor parallelism in the server, pipeline parallelism across servers, and
  data parallelism with ZeRO-1 over the rest. The pipeline degree is the smallest power
  of two that brings the model state per GPU under :data:`STATE_SHARE` of the GPU's
  memory, leaving the rest for activations, communication buffers and fragmentation.

The rule is the chapter's rule of thumb, not an optimiser: a real run also tunes the
micro-batch, the recomputation and the interconnect. Any degree can be set by hand
(``--tp``, ``--pp``, ``--zero``); the plan then says whether that layout fits.

Activations are estimated per GPU for one sequence per micro-batch with Korthikanti et
al.'s per-layer formulas (sequence parallelism whenever ``tp > 1``), for the busiest
pipeline stage under 1F1B (it holds ``min(p, m)`` micro-batches of ``ceil(L/p)``
layers); the planner takes the lightest recomputation (none, selective, full) that fits.

References: hoffmann2022chinchilla, rajbhandari2020zero, korthikanti2022reducing,
narayanan2021megatron, dubey2024llama3.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from . import after_chinchilla, communication, compute, facts, layout, memory, pipeline, scaling
from ._validate import one_of, positive, positive_integer

__all__ = [
    "GPU_ALIASES",
    "GPUS_PER_SERVER",
    "STATE_SHARE",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_CONSTANTS",
    "RECOMPUTE_MODES",
    "Plan",
    "find_gpu",
    "nearest_architecture",
    "regime",
    "choose_layout",
    "activation_bytes_per_gpu",
    "state_breakdown_3d",
    "make_plan",
    "format_plan",
    "main",
]

#: Short names accepted by ``--gpu``, for the entries of :data:`solutions.facts.GPUS`.
GPU_ALIASES = {"H100": "H100 SXM", "A100": "A100 80GB"}
#: GPUs per server (DGX/HGX nodes): the reach of NVLink, so the most tensor parallelism gets.
GPUS_PER_SERVER = 8
#: The share of a GPU's memory the layout rule lets model state take.
STATE_SHARE = 0.25
#: Tokens per optimizer step: Llama 3 405B's batch for most of its training, 16M tokens
#: (Dubey et al. 2024, sec. 3.4.1; from :data:`solutions.facts.LLAMA3_405B_BATCH_SCHEDULE`).
DEFAULT_BATCH_TOKENS = facts.LLAMA3_405B_BATCH_SCHEDULE.stages[-1][0]
#: The constant set the plan's compute-optimal line uses (the others are shown beside it).
DEFAULT_CONSTANTS = "hoffmann_rounded"
RECOMPUTE_MODES = ("none", "selective", "full")
_PUBLISHED = ("hoffmann_rounded", "hoffmann_precise", "epoch_2024")


def find_gpu(name: str) -> facts.GPU:
    """The :class:`solutions.facts.GPU` called ``name`` (case and spaces ignored; ``H100``
    means the SXM part, ``A100`` the 80 GB one)."""
    if not isinstance(name, str):
        raise ValueError(f"gpu must be a name, one of {sorted(facts.GPUS)}, got {name!r}")

    def key(s):
        return "".join(s.lower().split())

    wanted = key(GPU_ALIASES.get(name.strip().upper(), name))
    for gpu_name, gpu in facts.GPUS.items():
        if key(gpu_name) == wanted:
            return gpu
    raise ValueError(f"gpu must be one of {sorted(facts.GPUS)} (or {sorted(GPU_ALIASES)}), got {name!r}")


def nearest_architecture(params: float) -> facts.Architecture:
    """The published shape (:data:`solutions.facts.ARCHITECTURES`) closest in parameter
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


def activation_bytes_per_gpu(arch: facts.Architecture, tp, pp, num_microbatches, recompute="selective",
                             micro_batch=1):
    """Activation bytes on the busiest GPU: ``min(pp, m)`` micro-batches in flight (1F1B's
    first stage; all ``m`` would be GPipe's) times ``ceil(L/pp)`` layers times
    :func:`solutions.memory.activation_memory_per_layer` (sequence parallelism when
    ``tp > 1``; ``recompute`` one of :data:`RECOMPUTE_MODES`). With full recomputation one
    layer's full activations are added back: they exist while that layer is recomputed."""
    tp = positive_integer("tp", tp)
    pp = positive_integer("pp", pp)
    m = positive_integer("num_microbatches", num_microbatches)
    one_of("recompute", recompute, RECOMPUTE_MODES)

    def per_layer(mode):
        return memory.activation_memory_per_layer(
            arch.seq_len, micro_batch, arch.d_model, arch.heads, tp=tp, sequence_parallel=tp > 1,
            full_recompute=mode == "full", selective_recompute=mode == "selective")

    layers = math.ceil(arch.layers / pp)
    stored = min(pp, m) * layers * per_layer(recompute)
    if recompute == "full":
        stored += per_layer("none")
    return float(stored)


def state_breakdown_3d(model_params, tp, pp, dp, zero_stage=0, convention="zero_16") -> dict:
    """Model-state bytes per GPU under TP x PP x DP with ZeRO, by component:
    ``{"weights", "grads", "optimizer"}``. The shard ``P / (tp pp)`` holds each
    component at the convention's bytes per parameter; ZeRO stage 1 divides the
    optimizer state by ``dp``, stage 2 also the gradients, stage 3 also the weights
    (Rajbhandari et al. 2020). The sum is :func:`solutions.memory.memory_per_gpu_3d`."""
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


@dataclass(frozen=True)
class Plan:
    """Everything the planner decided and computed (bytes, seconds, FLOPs)."""

    params: float
    tokens: float
    flops: float
    budget_given: bool
    optimal: dict  # constant-set name -> (N, D, ratio, loss)
    twenty: tuple  # (N, D) at 20 tokens per parameter
    gpu: facts.GPU
    count: int
    arch: facts.Architecture
    regime: str
    tp: int
    pp: int
    dp: int
    zero: int
    convention: str
    reasons: tuple
    state: dict  # weights, grads, optimizer bytes per GPU
    recompute: str
    activations: float
    fits: bool
    batch_tokens: int
    sequences_per_step: int
    microbatches: int
    bubble: float
    steps: int
    comm: dict  # communication_breakdown output (bytes, seconds) per step
    step_seconds: float  # compute time per step at the stated MFU
    mfu: float
    days: float
    advice: tuple = field(default=())
    #: with ``inference_tokens``: the model that reaches the same loss with the fewest
    #: training + inference FLOPs (Sardana et al. 2024), ``{tokens, N, D, lifetime, baseline}``,
    #: ``baseline`` being the compute-optimal model's lifetime FLOPs for the same inference.
    overtrained: dict | None = None

    @property
    def memory_total(self) -> float:
        return sum(self.state.values()) + self.activations


def make_plan(*, budget=None, model=None, tokens=None, gpu="H100", count=8, mfu=0.4, tp=None, pp=None, zero=None,
              convention="zero_16", constants=DEFAULT_CONSTANTS, batch_tokens=DEFAULT_BATCH_TOKENS,
              arch=None, inference_tokens=None) -> Plan:
    """Build a :class:`Plan`. Give ``budget`` (FLOPs; the model is then the
    compute-optimal one under ``constants``) or both ``model`` and ``tokens``. With
    ``inference_tokens`` (tokens the model will process once trained), the plan also names the
    over-trained alternative that reaches the compute-optimal loss at the lowest lifetime cost."""
    if budget is not None and (model is not None or tokens is not None):
        raise ValueError("give either budget, or model and tokens, not both")
    if budget is None and (model is None or tokens is None):
        raise ValueError("give a budget, or both model and tokens")
    one_of("constants", constants, scaling.CONSTANT_SETS)
    g = find_gpu(gpu)
    count = int(positive_integer("count", count))
    mfu = float(positive("mfu", mfu))
    if mfu > 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    memory.get_convention(convention)
    batch_tokens = int(positive_integer("batch_tokens", batch_tokens))

    if budget is not None:
        C = float(positive("budget", budget))
        N, D = scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[constants])[:2]
    else:
        N = float(positive("model", model))
        D = float(positive("tokens", tokens))
        C = float(scaling.training_flops(N, D))
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

    if arch is None:
        shape = nearest_architecture(N)
    else:
        one_of("arch", arch, facts.ARCHITECTURES)
        shape = facts.ARCHITECTURES[arch]
    t, p, d, z, reasons = choose_layout(N, count, g.memory_gb * 1e9, convention, tp, pp, zero)
    layout.process_grid(count, t, p, d)  # the ranks exist: tp * pp * dp == count
    if t > shape.heads:
        raise ValueError(f"tp must be at most the number of attention heads ({shape.heads}), got tp={t}")

    state = state_breakdown_3d(N, t, p, d, z, convention)

    seqs = max(1, batch_tokens // shape.seq_len)
    if seqs % d:
        seqs = d * math.ceil(seqs / d)  # round the batch up to a whole sequence per replica
    m = seqs // d  # one sequence per micro-batch
    mem_bytes = g.memory_gb * 1e9
    for mode in RECOMPUTE_MODES:
        act = activation_bytes_per_gpu(shape, t, p, m, mode)
        if sum(state.values()) + act <= mem_bytes:
            break
    fits = sum(state.values()) + act <= mem_bytes
    bubble = pipeline.bubble_fraction(p, m) if p > 1 else 0.0
    tokens_per_step = seqs * shape.seq_len
    steps = max(1, math.ceil(D / tokens_per_step))
    layers_padded = p * math.ceil(shape.layers / p)  # the busiest stage holds ceil(L/p) layers
    comm = communication.communication_breakdown(
        N, d, t, p, layers_padded, shape.seq_len, 1, m, shape.d_model,
        gpus_per_node=GPUS_PER_SERVER, zero_stage=z)
    seconds = compute.training_time_seconds(C, g.peak_flops_per_s, mfu, count)
    step_seconds = seconds / steps

    advice = []
    if not fits:
        if p == 1 and regime(N) in ("large", "frontier"):
            advice.append("add pipeline stages (--pp) to cut the state and activations per GPU")
        if z < 3 and p == 1:
            advice.append(f"raise the ZeRO stage (now {z}) to shard more of the state over DP={d}")
        advice.append(f"use GPUs with more memory (H200: {facts.GPUS['H200'].memory_gb:g} GB) or more GPUs")
        advice.append("shorten the sequence or shard it (context parallelism)")
    if comm["total"]["seconds"] > step_seconds:
        advice.append("communication per step exceeds compute per step: grow the batch, keep TP inside a server, "
                      "or use fewer, larger replicas")
    if p > 1 and bubble > 0.1:
        advice.append(f"the pipeline bubble is {bubble:.0%}: more micro-batches per step, or interleaved stages")

    return Plan(N, D, C, budget is not None, optimal, twenty, g, count, shape, regime(N), t, p, d, z, convention,
                tuple(reasons), state, mode, act, fits, batch_tokens, seqs, m, bubble, steps, comm, step_seconds,
                mfu, seconds / 86400, tuple(advice), overtrained)


def _count(x: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def _time(s: float) -> str:
    if s >= 1:
        return f"{s:,.2f} s"
    return f"{s * 1e3:,.1f} ms"


def format_plan(plan: Plan) -> str:
    """The plan as the numbered lines ``python -m solutions.plan`` prints."""
    lines = ["== compute"]
    given = "budget" if plan.budget_given else "6 N D"
    lines.append(f"1. training compute        {plan.flops:.3g} FLOPs ({given}); model {_count(plan.params)} "
                 f"parameters on {_count(plan.tokens)} tokens ({plan.tokens / plan.params:.1f} tokens/param)")
    lines.append("2. compute-optimal at this budget (closed form of L = E + A/N^a + B/D^b):")
    for name, (N, D, r, L) in plan.optimal.items():
        lines.append(f"     {name:<17} N={_count(N):>7}  D={_count(D):>7}  {r:6.1f} tokens/param  loss {L:.3f}")
    lines.append(f"     {'20 tokens/param':<17} N={_count(plan.twenty[0]):>7}  D={_count(plan.twenty[1]):>7}")
    if plan.overtrained:
        o = plan.overtrained
        lines.append(f"     serving {_count(o['tokens'])} tokens: N={_count(o['N'])}, D={_count(o['D'])} "
                     f"({o['D'] / o['N']:.0f} tokens/param) reaches the same loss {o['loss']:.3f} for "
                     f"{o['lifetime']:.3g} FLOPs of training + inference, against {o['baseline']:.3g} "
                     f"({1 - o['lifetime'] / o['baseline']:.0%} less)")
    a = plan.arch
    lines += ["== layout",
              f"3. shape                    {a.name}'s: {a.layers} layers, d_model {a.d_model:,}, {a.heads} heads, "
              f"sequences of {a.seq_len:,} (nearest published shape)",
              f"4. layout ({plan.regime})       TP{plan.tp} x PP{plan.pp} x DP{plan.dp} = {plan.count:,} "
              f"{plan.gpu.name}, ZeRO stage {plan.zero}"]
    lines += [f"     why: {r}" for r in plan.reasons]
    conv = memory.get_convention(plan.convention)
    lines += ["== memory per GPU",
              f"5. model state ({conv.total:g} B/param, {plan.convention})  weights {_gb(plan.state['weights'])}, "
              f"gradients {_gb(plan.state['grads'])}, optimizer {_gb(plan.state['optimizer'])}",
              f"6. activations              {_gb(plan.activations)} ({'no' if plan.recompute == 'none' else plan.recompute} recomputation; "
              f"{min(plan.pp, plan.microbatches)} micro-batch(es) of 1 sequence in flight)",
              f"7. total                    {_gb(plan.memory_total)} of {plan.gpu.memory_gb:g} GB: "
              + ("fits" if plan.fits else "DOES NOT FIT")]
    comm = plan.comm
    lines += ["== step",
              f"8. batch                    {plan.sequences_per_step:,} sequences = "
              f"{plan.sequences_per_step * a.seq_len / 1e6:.1f}M tokens per step; {plan.microbatches} micro-batch(es) "
              f"per replica; {plan.steps:,} steps",
              f"9. pipeline bubble          {plan.bubble:.1%} of the step (1F1B, share of total time)",
              f"10. communication per step  DP {_time(comm['dp']['seconds'])}, TP {_time(comm['tp']['seconds'])}, "
              f"PP {_time(comm['pp']['seconds'])}; total {_time(comm['total']['seconds'])} "
              f"({comm['total']['bytes'] / 1e9:,.2f} GB sent per GPU)",
              f"11. compute per step        {_time(plan.step_seconds)} at {plan.mfu:.0%} MFU "
              f"({plan.gpu.peak_flops_per_s / 1e12:g} TFLOP/s peak)",
              "== time",
              f"12. days to train           {plan.days:,.1f} days on {plan.count:,} GPUs at {plan.mfu:.0%} MFU "
              f"({plan.days * plan.count / 365.25:,.1f} GPU-years)"]
    if plan.advice:
        lines.append("== what to change")
        lines += [f"   - {x}" for x in plan.advice]
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m solutions.plan", description="Plan a training run: allocation, layout, memory, "
                "communication and time, from solutions/.")
    p.add_argument("--budget", type=float, help="compute budget in FLOPs (then the model is compute-optimal)")
    p.add_argument("--model", type=float, help="parameters, e.g. 70e9")
    p.add_argument("--tokens", type=float, help="training tokens, e.g. 1.4e12")
    p.add_argument("--gpu", default="H100", help=f"one of {sorted(facts.GPUS)} or {sorted(GPU_ALIASES)}")
    p.add_argument("--count", type=int, default=8, help="number of GPUs")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation, in (0, 1]")
    p.add_argument("--tp", type=int, help="tensor-parallel degree (default: the layout rule's)")
    p.add_argument("--pp", type=int, help="pipeline-parallel degree (default: the layout rule's)")
    p.add_argument("--zero", type=int, help="ZeRO stage 0-3 (default: the layout rule's)")
    p.add_argument("--convention", default="zero_16", help=f"bytes per parameter, one of {sorted(memory.BYTE_CONVENTIONS)}")
    p.add_argument("--constants", default=DEFAULT_CONSTANTS, help=f"one of {sorted(scaling.CONSTANT_SETS)}")
    p.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS, help="tokens per optimizer step")
    p.add_argument("--inference-tokens", type=float,
                   help="tokens the trained model will serve: also plan the over-trained model that is cheapest over its lifetime")
    p.add_argument("--arch", help=f"shape to assume, one of {sorted(facts.ARCHITECTURES)} (default: nearest in size)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = make_plan(budget=args.budget, model=args.model, tokens=args.tokens, gpu=args.gpu, count=args.count,
                         mfu=args.mfu, tp=args.tp, pp=args.pp, zero=args.zero, convention=args.convention,
                         constants=args.constants, batch_tokens=args.batch_tokens, arch=args.arch,
                         inference_tokens=args.inference_tokens)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_plan(plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
