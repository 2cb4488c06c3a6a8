"""Lab 5: pipeline parallelism. GPipe and 1F1B by hand, the bubble measured, and PyTorch's own.

    python -m labs.pipeline_parallel --nproc 2 [--backend auto|gloo|nccl] --report PATH

The labs' GPT (``labs/model.py``) is cut into ``p`` stages, one per rank: stage 0 holds the
embeddings and the first ``L/p`` blocks, the last stage the last blocks and the output head.
A step's batch is split into ``m`` micro-batches, which flow down the pipeline (activations,
point-to-point sends) and back up (gradients of the activations). Two schedules, written by
hand from ``torch.distributed`` sends and receives:

* **GPipe** (Huang et al. 2019): all ``m`` forward passes, then all ``m`` backward passes;
* **1F1B** (PipeDream-Flush; Narayanan et al. 2019, 2021): a warm-up of ``p - stage - 1``
  forward passes, then one forward and one backward pass in turn, then the remaining
  backward passes.

Each stage runs its passes in exactly the order ``solutions.pipeline.pipeline_schedule``
simulates, and records when each pass starts and ends. What it checks:

* **Pipeline = one process**: each stage's gradients equal the unsplit model's on the same
  batch, for both schedules (micro-batch losses are scaled by ``1/m``).
* **The bubble**: the share of ``p x`` step time the stages spend idle, measured from the
  recorded times with ``solutions.pipeline.idle_fraction``, is within a stated tolerance of
  ``(p-1)/(m+p-1)`` (``bubble_fraction``) for every ``m`` of ``--microbatches``. By default
  every pass is padded to a fixed length (``--pace``): the formula assumes equal stages, and
  the padding makes them so and keeps the measurement from depending on the machine's load.
  With ``--pace 0`` the passes run as they are, and the bubble is checked only where every
  rank has a core (or a GPU) of its own.
* **Stashed activations**: the most micro-batches whose activations a stage holds at once
  (forward done, backward not), counted, and their bytes (autograd's saved tensors): GPipe
  holds all ``m``, 1F1B at most ``p - stage`` (``peak_in_flight``).
* **Traffic**: the bytes each stage sends per step, ``b s h`` per micro-batch and boundary
  (``solutions.model_parallel.pipeline_bytes_sent_per_stage``; the busiest stage is
  ``communication_breakdown``'s ``'pp'``).
* **PyTorch's own**: the same stages through ``torch.distributed.pipelining``
  (``PipelineStage`` with ``ScheduleGPipe`` and ``Schedule1F1B``) give the same gradients.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from solutions._format import plural
from solutions.communication import communication_breakdown
from solutions.model_parallel import pipeline_bytes_sent_per_stage
from solutions.pipeline import (SCHEDULE_KINDS, PipelineEvent, bubble_fraction, idle_fraction, peak_in_flight,
                                pipeline_schedule)

from . import launch
from .data import batch_offsets, get_batch, load_corpus
from .ddp import relative_l2
from .model import GPT, GPTConfig, padded_vocab, param_count
from .training import check_model_fits
from .report import check_at_most, check_exact
from .tensor_parallel import SavedTensorBytes

LAB = "pipeline_parallel"
#: Bound on |g_pipeline - g_one| / |g_one| (L2 over a stage's parameters), fp32: the same
#: sums in a different order (m micro-batches accumulated one by one).
TOLERANCE = 1e-5
#: How far the measured bubble may lie from (p-1)/(m+p-1), in absolute terms (0.06 is six
#: percentage points of the step). The formula assumes equal stages and free sends; here the
#: first and last stages also hold the embeddings and the head, and every send costs a
#: little latency, which is idle time the formula does not count.
BUBBLE_TOLERANCE = 0.06
#: ``--pace auto``: pad every forward pass to 80 ms and every backward pass to 160 ms. CPU ranks
#: share their cores with each other and with whatever else runs; a rank that sleeps out the
#: rest of its pass needs no core, so the pipeline's timing then measures the schedule (and
#: its sends) rather than the machine's load. On GPUs the lab's small passes would take well
#: under a millisecond, and launch and send latencies, not the schedule, would set the bubble.
DEFAULT_PACE = 0.08

__all__ = ["Stage", "stage_bounds", "stage_order", "p2p_plan", "run_schedule", "build_parser", "worker", "main"]


# --------------------------------------------------------------------------- the stages


def stage_bounds(n_layer: int, p: int, stage: int) -> tuple[int, int]:
    """Blocks ``[lo, hi)`` of stage ``stage``: ``n_layer / p`` each."""
    if n_layer % p:
        raise ValueError(f"n_layer={n_layer} must be divisible by the number of stages {p}")
    per = n_layer // p
    return stage * per, (stage + 1) * per


class Stage(nn.Module):
    """Stage ``stage`` of ``p`` of a ``labs.model.GPT``: its blocks, plus the embeddings on
    the first stage and the final norm and head on the last. Takes token ids (first stage)
    or the previous stage's activation; returns an activation, or logits (last stage)."""

    def __init__(self, model: GPT, stage: int, p: int):
        super().__init__()
        lo, hi = stage_bounds(model.cfg.n_layer, p, stage)
        self.embed = model.embed if stage == 0 else None
        self.blocks = nn.ModuleList(model.blocks[lo:hi])
        self.out = model.out if stage == p - 1 else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x) if self.out is not None else x


def stage_params(model: GPT, stage: int, p: int) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of the unsplit ``model`` that stage ``stage`` holds, in the
    order of ``Stage(model, stage, p).parameters()``."""
    ids = {id(q) for q in Stage(model, stage, p).parameters()}
    return [(n, q) for n, q in model.named_parameters() if id(q) in ids]


# --------------------------------------------------------------------------- the schedules


def stage_order(p: int, m: int, kind: str, stage: int) -> list[tuple[str, int]]:
    """The passes ``(phase, micro-batch)`` stage ``stage`` runs, in order: read off the
    simulation in ``solutions.pipeline``, so that the lab runs the schedule it predicts."""
    events = sorted((e for e in pipeline_schedule(p, m, kind) if e.stage == stage), key=lambda e: e.start)
    return [(e.phase, e.microbatch) for e in events]


def p2p_plan(p: int, m: int, kind: str, stage: int) -> list[tuple[list, tuple | None]]:
    """What stage ``stage`` does, as a list of ``(messages, pass)``: post ``messages``
    together and wait for all of them, then compute ``pass`` (``None`` after the last).

    A message is ``('send' | 'recv', peer, 'act' | 'grad', micro-batch)``. A forward pass
    needs the previous stage's activation and sends its own to the next stage; a backward
    pass needs the next stage's gradient and sends its input's gradient back. Each send is
    posted together with the receive the next pass needs (Megatron's
    ``send_forward_recv_backward`` and its kin), so that two neighbours that both send and
    then receive never wait on each other: the exchange completes even where a send waits
    for its receive to be posted (NCCL)."""
    order = stage_order(p, m, kind, stage)

    def recv(op):
        phase, i = op
        if phase == "F" and stage > 0:
            return ("recv", stage - 1, "act", i)
        if phase == "B" and stage < p - 1:
            return ("recv", stage + 1, "grad", i)
        return None

    def send(op):
        phase, i = op
        if phase == "F" and stage < p - 1:
            return ("send", stage + 1, "act", i)
        if phase == "B" and stage > 0:
            return ("send", stage - 1, "grad", i)
        return None

    plan, pending = [], None
    for op in order:
        plan.append(([msg for msg in (pending, recv(op)) if msg is not None], op))
        pending = send(op)
    plan.append(([pending] if pending is not None else [], None))
    return plan


class _Clock:
    """When each pass starts and ends, in seconds since this rank's own start (``start()``,
    called just after a barrier). No clock is compared across ranks: two hosts' clocks differ
    by anything from microseconds to days, while the barrier releases every rank within the
    time of one message, so "seconds since the barrier" lines the ranks' timelines up on one
    host and across nodes alike. On CPU, ``time.perf_counter``; on a GPU, CUDA events on the
    compute stream (no host synchronisation between passes, which would also wait for pending
    sends), measured from a first synchronised event.

    ``skew`` (debug, environment ``LABS_DEBUG_CLOCK_SKEW`` seconds times the rank) offsets this
    rank's host clock, as another host's clock would be: the timelines must not change."""

    def __init__(self, device, skew: float = 0.0):
        self.cuda = device.type == "cuda"
        self.skew = skew

    def _host(self) -> float:
        return time.perf_counter() + self.skew

    def start(self):
        if self.cuda:
            torch.cuda.synchronize()
            self.origin = torch.cuda.Event(enable_timing=True)
            self.origin.record()
            self.origin.synchronize()
        self.host_origin = self._host()

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return self._host()

    def seconds(self, mark) -> float:
        """Seconds from ``start()`` to ``mark``."""
        if self.cuda:
            mark.synchronize()
            return self.origin.elapsed_time(mark) / 1e3
        return mark - self.host_origin

    def wait_until(self, begin, seconds: float) -> None:
        """Pad a pass that began at ``begin`` to last ``seconds`` (see ``--pace``)."""
        if seconds <= 0:
            return
        left = self.seconds(begin) + seconds - (self._host() - self.host_origin)
        if left > 0:
            time.sleep(left)


def debug_clock_skew(rank: int) -> float:
    """Seconds by which rank ``rank``'s clock is offset for a test of cross-host timing
    (``LABS_DEBUG_CLOCK_SKEW``, default 0)."""
    return rank * float(os.environ.get("LABS_DEBUG_CLOCK_SKEW", "0") or 0)


def run_schedule(stage_mod: Stage, ctx, kind: str, xs, ys, act_shape, params, record_bytes: bool = False,
                 pace: float = 0.0) -> dict:
    """One training step (forward and backward, no optimizer step) of ``len(xs)``
    micro-batches with schedule ``kind``. Gradients accumulate in ``.grad``. Returns the
    pass times (seconds from this rank's start after the step's barrier), bytes sent, and the stash: the most
    micro-batches held at once and (``record_bytes``) the most bytes autograd held for them.
    With ``pace > 0`` each forward pass is padded to last ``pace`` seconds and each backward
    pass ``2 pace`` (``--pace``)."""
    p, s, dev = ctx.world_size, ctx.rank, ctx.device
    m = len(xs)
    inputs, outputs, grads_in = {}, {}, {}
    live, peak_live, live_bytes, peak_bytes, stash_bytes = 0, 0, 0, 0, {}
    marks, sent, pending_sends = [], 0, []
    clock = _Clock(dev, debug_clock_skew(s))
    plan = p2p_plan(p, m, kind, s)
    dist.barrier()
    # gloo: post every receive of the step at once, in the order the plan needs them (each
    # peer's messages arrive in the order it sends them). A send whose receive is already
    # posted goes straight through; otherwise it waits a round trip for the receiver, and on a
    # loaded machine the sender's waking up for it can take longer than a pass. (NCCL runs a
    # pair's sends and receives in one stream, in order: receives posted ahead of a send would
    # block it, so there the plan's fused batches are used as they are.)
    early = {}
    if ctx.backend == "gloo":
        for messages, _ in plan:
            for direction, peer, what, i in messages:
                if direction == "recv":
                    buf = torch.empty(act_shape, device=dev)
                    early[(what, i)] = (dist.irecv(buf, src=peer), buf)
    clock.start()
    for messages, op in plan:
        if early:
            for direction, peer, what, i in messages:
                if direction == "send":
                    tensor = (outputs[i].detach() if what == "act" else inputs[i].grad).contiguous()
                    sent += tensor.numel() * tensor.element_size()
                    pending_sends.append((dist.isend(tensor, peer), tensor))
            for direction, peer, what, i in messages:
                if direction == "recv":
                    req, buf = early.pop((what, i))
                    req.wait()
                    (inputs if what == "act" else grads_in)[i] = buf
            messages = []
        ops, is_recv = [], []
        for direction, peer, what, i in messages:
            if direction == "send":
                tensor = (outputs[i].detach() if what == "act" else inputs[i].grad).contiguous()
                sent += tensor.numel() * tensor.element_size()
                ops.append(dist.P2POp(dist.isend, tensor, peer))
            else:
                buf = torch.empty(act_shape, device=dev)
                (inputs if what == "act" else grads_in)[i] = buf
                ops.append(dist.P2POp(dist.irecv, buf, peer))
            is_recv.append(direction == "recv")
        if ops:
            reqs = dist.batch_isend_irecv(ops)
            if len(reqs) == len(ops):
                # Wait for what this pass needs; a send may finish while we compute (its
                # tensor stays referenced in pending_sends until then).
                for req, op_, recv in zip(reqs, ops, is_recv):
                    if recv:
                        req.wait()
                    else:
                        pending_sends.append((req, op_.tensor))
            else:  # one handle for the whole batch (NCCL's coalesced ops)
                for req in reqs:
                    req.wait()
        if op is None:
            break
        phase, i = op
        begin = clock.mark()
        if phase == "F":
            x = xs[i] if s == 0 else inputs[i].requires_grad_(True)
            saved = SavedTensorBytes(params) if record_bytes else contextlib.nullcontext()
            with saved:
                out = stage_mod(x)
                if s == p - 1:  # the loss of the whole batch is the mean of the micro-batch means
                    out = F.cross_entropy(out.float().view(-1, out.size(-1)), ys[i].reshape(-1)) / m
            outputs[i] = out
            live += 1
            peak_live = max(peak_live, live)
            if record_bytes:
                stash_bytes[i] = saved.bytes
                live_bytes += saved.bytes
                peak_bytes = max(peak_bytes, live_bytes)
        else:
            if s == p - 1:
                outputs[i].backward()
            else:
                outputs[i].backward(grads_in.pop(i))
            del outputs[i]  # frees this micro-batch's graph: its activations leave the stash
            live -= 1
            live_bytes -= stash_bytes.get(i, 0)
        done = clock.mark()
        clock.wait_until(begin, pace * (1 if phase == "F" else 2))
        marks.append((phase, i, begin, done, clock.mark() if pace > 0 else done))
    for req, _ in pending_sends:
        req.wait()
    # (phase, micro-batch, start, end of the computation, end of the pass), seconds
    times = [(phase, i, clock.seconds(a), clock.seconds(c), clock.seconds(z)) for phase, i, a, c, z in marks]
    return {"times": times, "bytes_sent": sent, "peak_live": peak_live, "peak_bytes": peak_bytes,
            "bytes_per_microbatch": stash_bytes.get(0, 0)}


# --------------------------------------------------------------------------- helpers


def _microbatches(corpus, cfg: GPTConfig, m: int, b: int, step: int, seed: int, dev):
    offsets = batch_offsets(len(corpus.train), cfg.block_size, m * b, step, seed)
    x, y = get_batch(corpus.train, offsets, cfg.block_size)
    x, y = x.to(dev), y.to(dev)
    # Each micro-batch its own storage: a chunk() view keeps the whole step's tensor alive, and
    # the stash would charge every micro-batch with all of the step's token ids.
    return x, y, [c.clone() for c in x.chunk(m)], [c.clone() for c in y.chunk(m)]


def _max_over_ranks(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _gather(obj, n):
    out = [None] * n
    dist.all_gather_object(out, obj)
    return out


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _zero_grads(module) -> None:
    for q in module.parameters():
        q.grad = None


def _torch_pipelining(stage_mod, ctx, kind, x, y, m):
    """One step of ``torch.distributed.pipelining``'s schedule on the same stage module;
    leaves the gradients in ``.grad``."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    p, s = ctx.world_size, ctx.rank

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    stage = PipelineStage(stage_mod, s, p, ctx.device)
    schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[kind](stage, n_microbatches=m, loss_fn=loss_fn)
    # With its default scale_grads=True the schedule divides the gradients by m: the mean
    # of the micro-batch losses, as in the hand-written schedules.
    args = (x,) if s == 0 else ()
    kwargs = {"target": y} if s == p - 1 else {}
    schedule.step(*args, **kwargs)


# --------------------------------------------------------------------------- the lab


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.pipeline_parallel", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("pipeline")
    g.add_argument("--n-layer", type=int, default=4, help="transformer blocks (divisible by the number of stages)")
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--d-model", type=int, default=128)
    g.add_argument("--block-size", type=int, default=64, help="characters per sequence")
    g.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch b")
    g.add_argument("--microbatches", default="1,2,4,8",
                   help="comma-separated micro-batch counts m at which to time both schedules")
    g.add_argument("--repeats", type=int, default=3, help="timed steps per schedule and m (the least disturbed counts)")
    g.add_argument("--pace", default="auto",
                   help="seconds each forward pass is padded to (backward: twice that), or 0 for none; "
                        f"auto: {DEFAULT_PACE:g}")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-torch-pipelining", action="store_true",
                   help="skip the torch.distributed.pipelining comparison")
    return parser


def validate(args, world_size: int) -> tuple[list[int], float]:
    """``(micro-batch counts, pace)`` of these arguments, or a one-line ``ValueError``
    before any rank starts (the stages must split the blocks evenly)."""
    try:
        ms = sorted({int(v) for v in args.microbatches.split(",")})
    except ValueError:
        raise ValueError(f"--microbatches must be comma-separated integers, got {args.microbatches!r}") from None
    if not ms or ms[0] < 1 or args.repeats < 1 or args.micro_batch < 1:
        raise ValueError("--microbatches, --repeats and --micro-batch must be >= 1")
    try:
        pace = DEFAULT_PACE if args.pace == "auto" else float(args.pace)
    except ValueError:
        raise ValueError(f"--pace must be 'auto' or seconds >= 0, got {args.pace!r}") from None
    if not 0 <= pace < float("inf"):
        raise ValueError(f"--pace must be 'auto' or seconds >= 0, got {args.pace!r}")
    cfg = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model)
    if args.n_layer % world_size:
        raise ValueError(f"--n-layer {args.n_layer} must be divisible by the number of stages {world_size} (--nproc)")
    check_model_fits(cfg, args.micro_batch * ms[-1], world_size, args.backend)  # a whole batch in flight at most
    return ms, pace


def worker(ctx, args) -> dict:
    p, s, dev = ctx.world_size, ctx.rank, ctx.device
    ms, pace = validate(args, p)
    corpus = load_corpus()
    cfg = GPTConfig(vocab_size=padded_vocab(corpus.vocab_size), block_size=args.block_size, n_layer=args.n_layer,
                    n_head=args.n_head, d_model=args.d_model)
    stage_bounds(cfg.n_layer, p, s)  # validates the split
    b, T, h = args.micro_batch, cfg.block_size, cfg.d_model
    act_shape = (b, T, h)
    torch.manual_seed(args.seed)
    full = GPT(cfg).to(dev)  # every rank builds the same model, then keeps its stage
    reference = copy.deepcopy(full)
    stage_mod = Stage(full, s, p)
    params = list(stage_mod.parameters())
    mine = stage_params(reference, s, p)
    lo, hi = stage_bounds(cfg.n_layer, p, s)
    ctx.log(f"{plural(p, 'stage')} of {plural(cfg.n_layer // p, 'block')}; micro-batch {b} x {T} tokens; m in {ms}")

    checks = []
    # ---- gradients against the unsplit model, at the largest m
    m_big = ms[-1]
    x, y, xs, ys = _microbatches(corpus, cfg, m_big, b, 0, args.seed, dev)
    _, loss = reference(x, y)
    loss.backward()
    ref_grads = [q.grad for _, q in mine]
    stash = {}
    for kind in SCHEDULE_KINDS:
        ctx.maybe_fail(0)
        _zero_grads(stage_mod)
        run = run_schedule(stage_mod, ctx, kind, xs, ys, act_shape, params, record_bytes=True)
        diff = _max_over_ranks(relative_l2([q.grad for q in params], ref_grads), dev)
        checks.append(check_at_most(f"{kind.upper()} vs one process: gradients, relative L2 (m={m_big})",
                                    TOLERANCE, diff))
        stash[kind] = run
        if kind == "gpipe":
            sent = _gather(run["bytes_sent"], p)
    per_stage = [pipeline_bytes_sent_per_stage(k, p, b, T, h, m_big, 4) if p > 1 else 0 for k in range(p)]
    busiest = (communication_breakdown(param_count(cfg), dp=1, tp=1, pp=p, num_layers=cfg.n_layer, seq_len=T,
                                       micro_batch=b, num_microbatches=m_big, d_model=h,
                                       bytes_per_element=4)["pp"]["bytes"])
    c = check_exact(f"bytes the busiest stage sends per step (m={m_big})", busiest, max(sent))
    c["ok"] = c["ok"] and [float(v) for v in sent] == [float(v) for v in per_stage]
    checks.append(c)

    # ---- stashed activations, counted and in bytes (stage by stage; stage 0 reported)
    stash_table = {}
    for kind in SCHEDULE_KINDS:
        sim = pipeline_schedule(p, m_big, kind)
        predicted = [peak_in_flight(sim, k) for k in range(p)]
        live = _gather(stash[kind]["peak_live"], p)
        per_mb = _gather(stash[kind]["bytes_per_microbatch"], p)
        peak_bytes = _gather(stash[kind]["peak_bytes"], p)
        stash_table[kind] = {"predicted_live": predicted, "live": live, "bytes_per_microbatch": per_mb,
                             "peak_bytes": peak_bytes}
        c = check_exact(f"{kind.upper()}: most micro-batches stashed at once, stage 0 (m={m_big})", predicted[0],
                        live[0], unit="micro-batches")
        c["ok"] = c["ok"] and live == predicted
        checks.append(c)
        c = check_exact(f"{kind.upper()}: peak stashed activation bytes, stage 0", predicted[0] * per_mb[0],
                        peak_bytes[0])
        c["ok"] = c["ok"] and peak_bytes == [k * v for k, v in zip(predicted, per_mb)]
        checks.append(c)

    # ---- PyTorch's schedules: the same gradients
    torch_diffs = {}
    if not args.no_torch_pipelining:
        for kind in SCHEDULE_KINDS:
            ctx.maybe_fail(1)
            if kind == "1f1b" and m_big < p:
                ctx.log(f"torch's Schedule1F1B needs at least as many micro-batches as stages ({p}); "
                        f"with m={m_big} it is left out")
                continue
            _zero_grads(stage_mod)
            _torch_pipelining(stage_mod, ctx, kind, x, y, m_big)
            diff = _max_over_ranks(relative_l2([q.grad for q in params], ref_grads), dev)
            torch_diffs[kind] = diff
            name = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}[kind]
            checks.append(check_at_most(f"torch.distributed.pipelining {name} vs one process: gradients, relative L2",
                                        TOLERANCE, diff))

    # ---- the bubble, timed
    timed = ctx.backend == "nccl" or pace > 0 or p <= _usable_cores()
    if ctx.backend == "nccl":
        why = "one GPU per stage"
    else:
        why = f"{plural(p, 'rank')} on {plural(_usable_cores(), 'usable core')}"
    if pace > 0:
        why += f"; passes paced to {pace * 1e3:g} ms forward, {2 * pace * 1e3:g} ms backward"
    if not timed:
        why += ": the stages cannot compute at the same time, so the bubble is not checked"
    ctx.log(f"timing: the schedules, {why}")  # machine-dependent: a "timing:" line
    bubbles, timelines = {}, {}
    for m in ms:
        _, _, xs_m, ys_m = _microbatches(corpus, cfg, m, b, 1, args.seed, dev)
        for kind in SCHEDULE_KINDS:
            fractions, runs = [], []
            for _ in range(args.repeats):  # the gradient checks above were the warm-up
                ctx.maybe_fail(2)
                _zero_grads(stage_mod)
                run = run_schedule(stage_mod, ctx, kind, xs_m, ys_m, act_shape, params, pace=pace)
                # Each rank's times count from its own start after the barrier (never one
                # host's clock against another's).
                times = _gather(run["times"], p)
                events = [PipelineEvent(k, i, ph, t0, t1) for k, rows in enumerate(times) for ph, i, t0, _, t1 in rows]
                fractions.append(idle_fraction(events))
                runs.append(times)
            # Whatever disturbs a run (another process taking the core, a slow wake-up) can only
            # add idle time, never remove it: the least disturbed run is the best measure of
            # the schedule's own bubble (the reasoning of timeit's minimum).
            best = min(fractions)
            bubbles[f"{kind}/{m}"] = {"kind": kind, "m": m, "predicted": bubble_fraction(p, m), "measured": best,
                                      "median": statistics.median(fractions), "all": fractions}
            timelines[f"{kind}/{m}"] = runs[fractions.index(best)]
            ctx.log(f"timing: {kind:>5} m={m:<3} bubble measured {best:.3f} (least disturbed of {len(fractions)}), "
                    f"predicted {bubble_fraction(p, m):.3f}")
    if timed:
        for key, row in bubbles.items():
            diff = abs(row["measured"] - row["predicted"])
            c = check_at_most(f"{row['kind'].upper()} bubble, m={row['m']}: |measured - (p-1)/(m+p-1)|",
                              BUBBLE_TOLERANCE, diff, unit="")
            c["measured_bubble"], c["predicted_bubble"] = row["measured"], row["predicted"]
            checks.append(c)

    return {
        "config": {"model": cfg.to_dict(), "stages": p, "micro_batch": b, "microbatches": ms, "repeats": args.repeats,
                   "blocks_per_stage": cfg.n_layer // p, "dtype": "torch.float32", "tolerance": TOLERANCE,
                   "bubble_tolerance": BUBBLE_TOLERANCE, "bubble_checked": timed, "bubble_note": why,
                   "pace_seconds": pace},
        "checks": checks,
        "bubbles": bubbles,
        "timelines": timelines,
        "stash": stash_table,
        "bytes_sent_per_stage": {"measured": sent, "predicted": per_stage},
        "torch_pipelining": torch_diffs,
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
