"""Lab 2: data parallelism with DDP. A small GPT learns Shakespeare on N ranks.

    python -m labs.ddp --nproc 2 [--backend auto|gloo|nccl] --report PATH

Each rank holds a full replica and a slice of every global batch; DDP all-reduces the
gradients in buckets during the backward pass (Li et al. 2020). What it checks:

* **DDP = one process.** Rank 0 also trains a second copy of the model, alone, on the
  whole global batch. After every checked step the two must agree, parameter by parameter, to float
  tolerance: averaging the ranks' gradients is the same as the gradient of the mean loss.
* **Replicas stay identical.** Every rank hashes its parameters after every step; all
  hashes must be equal, bit for bit.
* **Gradient bytes.** A DDP communication hook sees every bucket: their bytes per step must
  equal ``P`` parameters times 4 bytes, with ``P`` from the model's closed form.
* **Ring traffic.** By default the hook all-reduces each bucket with the hand-written ring
  of Lab 1 and counts what it sends: ``2 (n-1)/n`` of the gradient bytes per rank per step
  (``solutions.communication.allreduce_bytes_per_rank``), exactly. The ring runs inside the
  hook and returns only when the bucket is reduced, so the backward pass waits for it: no
  overlap of communication with computation. ``--allreduce builtin`` hands each bucket to
  the asynchronous ``dist.all_reduce`` instead, which is how DDP overlaps the all-reduce of
  one bucket with the backward pass of the layers before it.

The first ``--check-steps`` steps are checked (the reference runs on rank 0), the others are
timed and do only the training step. It reports throughput (tokens/s) over the timed steps,
the single process's throughput on the same global batch, and the scaling efficiency; on a
GPU of ``solutions.hardware`` also model FLOPs utilisation (Chowdhery et al. 2022, App. B)
against the peak of the dtype it ran in. ``--dtype fp16`` (the default on a T4) trains with
a gradient scaler.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import math
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from solutions._format import plural
from solutions.communication import allreduce_bytes_per_rank
from solutions.compute import flops_per_token

from . import launch
from .collectives import RING_STUB_NOTE, RingStats, resolve_ring_mode, ring_all_reduce
from .data import batch_offsets, get_batch, load_corpus, rank_slice
from .model import GPT, matmul_params, param_count
from .report import check_at_most, check_exact, check_skipped
from .training import (add_model_args, validate_model_args, peak_gib, reset_peak, configs_from_args, dtype_name, format_mfu, format_rate, forward_backward,
                       lr_at, make_optimizer, make_scaler, median, mfu_metrics, optimizer_update, pick_dtype,
                       split_steps, steps_words, sync, train_step)

LAB = "ddp"
#: Bounds on the differences between DDP and one process, per compute dtype, in L2 norm
#: over all parameters: ``grad``: |g_DDP - g_one| / |g_one|, at every step;
#: ``param``: |w_DDP - w_one| / |w_one - w_start|, the difference in units of how far
#: training has moved the weights. In fp32 the two runs add the same numbers in different
#: orders, so they differ by roundings (about 1e-7 relative) that training carries along.
#: In bf16 every matmul keeps 8 bits of mantissa, so the bounds are far looser. Norms rather
#: than the largest single difference: Adam moves every weight by about the learning rate
#: whatever its gradient's size, so a gradient entry that rounds to zero in one run and not
#: in the other makes one weight differ by a whole step, which says nothing about the rest.
TOLERANCE = {torch.float32: {"grad": 1e-5, "param": 1e-3},
             torch.float16: {"grad": 1e-2, "param": 5e-2},
             torch.bfloat16: {"grad": 5e-2, "param": 1e-1}}

GRAD_CHECK = "{} vs one process: gradients, relative L2 difference, worst step"
PARAM_CHECK = "{} vs one process: weights, L2 difference / L2 of the update, worst step"

__all__ = ["GradientCounter", "wrap_ddp", "param_digest", "l2_distance", "relative_l2", "build_parser",
           "worker", "main"]


class GradientCounter:
    """Bytes of gradient buckets seen by the DDP communication hook, and buckets per step."""

    def __init__(self):
        self.bytes = 0
        self.buckets = 0


def wrap_ddp(model, ctx, mode: str, bucket_mb: float):
    """Wrap ``model`` in DDP with a hook that counts gradient bytes and all-reduces each
    bucket with the hand-written ring (``mode='ring'``) or ``dist.all_reduce`` (``'builtin'``).

    ``gradient_as_bucket_view=True`` makes the gradients views into the buckets, so the
    gradients are held once (by default DDP keeps the buckets and a separate copy)."""
    counter, ring = GradientCounter(), RingStats()
    world = ctx.world_size
    ddp = DDP(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
              bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True)

    def hook(state, bucket):
        buf = bucket.buffer()
        if mode != "none":  # count what is all-reduced: with 'none', nothing is
            counter.bytes += buf.numel() * buf.element_size()
            counter.buckets += 1
        if mode == "builtin":
            return default_hooks.allreduce_hook(None, bucket)  # divides by world size, then NCCL/gloo
        if mode != "none":  # 'none' skips the all-reduce: each rank keeps its own gradient
            buf.div_(world)  # average, as DDP's default hook does
            ring_all_reduce(buf, ring)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    ddp.register_comm_hook(None, hook)
    return ddp, counter, ring


def param_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's bytes, in order: equal digests mean bit-identical replicas."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def l2_distance(xs, ys) -> float:
    """``sqrt(sum |x - y|^2)`` over two lists of tensors, as if they were one long vector."""
    return math.sqrt(sum(float((x.detach().double() - y.detach().double()).square().sum()) for x, y in zip(xs, ys)))


def l2_norm(xs) -> float:
    return math.sqrt(sum(float(x.detach().double().square().sum()) for x in xs))


def relative_l2(xs, ys) -> float:
    """``|x - y| / |y|`` in L2 norm over lists of tensors (``|x - y|`` when ``y`` is zero)."""
    scale = l2_norm(ys)
    return l2_distance(xs, ys) / scale if scale > 0 else l2_distance(xs, ys)


@torch.no_grad()
def eval_loss(model, tokens, block_size, batch, device, dtype, batches=4) -> float:
    """Mean loss on ``batches`` fixed validation batches (the same on every rank)."""
    model.eval()
    total = 0.0
    for k in range(batches):
        x, y = get_batch(tokens, batch_offsets(len(tokens), block_size, batch, step=k, seed=99), block_size)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            total += model(x.to(device), y.to(device))[1].item()
    model.train()
    return total / batches


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.ddp", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    add_model_args(parser)
    g = parser.add_argument_group("ddp")
    g.add_argument("--allreduce", choices=("ring", "builtin", "none"), default=None,
                   help="ring (the default once Assignment 1's ring is written): the hand-written ring of Lab 1, bytes counted; builtin: dist.all_reduce (faster on "
                        "GPUs); none: no all-reduce at all, to see the checks fail")
    g.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket size in MiB")
    g.add_argument("--no-reference", action="store_true",
                   help="skip the single-process comparison (for large models on GPUs)")
    return parser


def _timed(fn, device) -> float:
    """Seconds ``fn()`` takes on this rank, with every rank starting together (a barrier)
    and the GPU's queue drained before and after."""
    dist.barrier()
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def validate(args, world_size: int) -> None:
    """Arguments checked before any rank starts (``launch.run``)."""
    validate_model_args(args, world_size)
    if not 0 < args.bucket_mb < math.inf:
        raise ValueError(f"--bucket-mb must be a finite number > 0, got {args.bucket_mb}")
    resolve_ring_mode(args, "allreduce", "--allreduce")


def worker(ctx, args) -> dict:
    n, dev = ctx.world_size, ctx.device
    resolve_ring_mode(args, "allreduce", "--allreduce")  # done by validate, unless called directly
    if getattr(args, "ring_stub", False):
        ctx.log(RING_STUB_NOTE)
    corpus = load_corpus()
    mcfg, tcfg = configs_from_args(args, corpus.vocab_size)
    checked = split_steps(tcfg.steps, args.check_steps)
    dtype, dtype_reason = pick_dtype(args.dtype, dev)
    P = param_count(mcfg)
    global_batch = n * tcfg.batch_per_rank
    tokens_per_step = global_batch * mcfg.block_size

    torch.manual_seed(tcfg.seed)
    model = GPT(mcfg).to(dev)  # same seed on every rank; DDP also broadcasts rank 0's weights
    reference = ref_opt = ref_scaler = None
    if ctx.is_main and not args.no_reference:
        reference = copy.deepcopy(model)
        ref_opt = make_optimizer(reference, tcfg)
        ref_scaler = make_scaler(dev, dtype)
    ddp, grads, ring = wrap_ddp(model, ctx, args.allreduce, args.bucket_mb)
    opt = make_optimizer(ddp.module, tcfg)
    scaler = make_scaler(dev, dtype)
    ctx.log(f"model: {P:,} parameters; {plural(n, 'rank')} x {tcfg.batch_per_rank} sequences x "
            f"{mcfg.block_size} characters; compute dtype {dtype_name(dtype)} ({dtype_reason}); "
            f"{steps_words(checked, tcfg.steps)}")

    step_times, ref_times, losses = [], [], []
    baseline = None
    mismatched_steps, worst_grad, worst_param = 0, 0.0, 0.0
    initial = [p.detach().clone() for p in model.parameters()] if reference is not None else None
    for step in range(tcfg.steps):
        ctx.maybe_fail(step)
        offsets = batch_offsets(len(corpus.train), mcfg.block_size, global_batch, step, tcfg.seed)
        x, y = get_batch(corpus.train, rank_slice(offsets, ctx.rank, n), mcfg.block_size)
        x, y = x.to(dev), y.to(dev)
        lr = lr_at(step, tcfg)
        out = {}
        if step >= checked:  # a timed step: the training step and nothing else
            def one_step():
                out["loss"] = train_step(ddp, opt, x, y, lr, tcfg, dev, dtype, scaler)
            step_times.append(_timed(one_step, dev))
            loss = out["loss"]
        else:  # a checked step, untimed: the same training step, compared with one process
            loss = forward_backward(ddp, x, y, dev, dtype, scaler)
            if reference is not None:
                xg, yg = get_batch(corpus.train, offsets, mcfg.block_size)
                xg, yg = xg.to(dev), yg.to(dev)

                def ref_fwd_bwd():
                    forward_backward(reference, xg, yg, dev, dtype, ref_scaler)
                sync(dev)
                t0 = time.perf_counter()
                ref_fwd_bwd()
                sync(dev)
                ref_times.append(time.perf_counter() - t0)
                # The claim of data parallelism itself: the averaged gradient of the slices is the
                # gradient of the whole batch (compared before clipping, which would hide a scale
                # error; with fp16 both are multiplied by the same loss scale, which the relative
                # difference does not see).
                worst_grad = max(worst_grad, relative_l2([p.grad for p in ddp.module.parameters()],
                                                         [p.grad for p in reference.parameters()]))
                time.sleep(args.reference_delay)
            optimizer_update(ddp.module, opt, lr, tcfg, scaler)
            if reference is not None:
                sync(dev)
                t0 = time.perf_counter()
                optimizer_update(reference, ref_opt, lr, tcfg, ref_scaler)
                sync(dev)
                ref_times[-1] += time.perf_counter() - t0
                ref_opt.zero_grad(set_to_none=True)
                ref_params = list(reference.parameters())
                moved = l2_distance(ref_params, initial)
                worst_param = max(worst_param, l2_distance(list(ddp.module.parameters()), ref_params) / moved)
        opt.zero_grad(set_to_none=True)
        if step == checked - 1:
            if reference is not None:
                del reference, ref_opt, ref_scaler, initial  # the timed steps run without it
                reference = None
            baseline = reset_peak(dev)  # the peak of the timed steps is measured from here

        mean_loss = loss.float().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / n)
        digests = [None] * n
        dist.all_gather_object(digests, param_digest(ddp.module))
        mismatched_steps += len(set(digests)) > 1
        ctx.log(f"step {step + 1:>3}/{tcfg.steps}  loss {losses[-1]:.3f}  lr {lr:.2e}"
                + ("  (timed)" if step >= checked else "  (checked)"))

    val = eval_loss(ddp.module, corpus.val, mcfg.block_size, 8, dev, dtype)
    ctx.log(f"validation loss after {tcfg.steps} steps: {val:.3f}")

    fpt = flops_per_token(matmul_params(mcfg), mcfg.n_layer, mcfg.block_size, mcfg.d_model)
    metrics = {"tokens_per_step": tokens_per_step, "flops_per_token": fpt, "timed_steps": len(step_times),
               "checked_steps": checked}
    times = []
    if step_times:
        # Every rank's step time counts: a step ends when the slowest rank finishes.
        t = torch.tensor(step_times, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
        step_s = median(times)
        metrics.update(step_seconds=step_s, tokens_per_s=tokens_per_step / step_s)
        peaks, baselines = [None] * n, [None] * n
        dist.all_gather_object(peaks, peak_gib(dev))
        dist.all_gather_object(baselines, baseline)
        if peaks[0] is not None:  # GPU: the largest over ranks, and how far above the baseline
            metrics.update(peak_allocated_gib=max(peaks), baseline_allocated_gib=max(baselines),
                           peak_above_baseline_gib=max(p - b for p, b in zip(peaks, baselines)))
        metrics.update(mfu_metrics(metrics["tokens_per_s"], fpt, n, dev, dtype))
        if ref_times:
            single = tokens_per_step / median(ref_times)
            metrics.update(single_process_tokens_per_s=single, speedup=metrics["tokens_per_s"] / single,
                           scaling_efficiency=metrics["tokens_per_s"] / single / n)
        ctx.log(f"timing: {format_rate(metrics['tokens_per_s'])} tokens/s on {plural(n, 'rank')}"
                + (f"; one process {format_rate(metrics['single_process_tokens_per_s'])} tokens/s;"
                   f" scaling efficiency {metrics['scaling_efficiency']:.3g}" if ref_times else "")
                + f"; {format_mfu(metrics)}")

    grad_bytes = P * 4  # fp32 gradients (autocast keeps parameters and gradients in fp32)
    checks = [check_exact("gradient bytes all-reduced per step (DDP hook)", grad_bytes,
                          grads.bytes / tcfg.steps)]
    if args.allreduce in ("ring", "none"):
        padded = (P + ring.padding // tcfg.steps) * 4
        sent = [None] * n
        dist.all_gather_object(sent, ring.bytes_sent)
        predicted = allreduce_bytes_per_rank(padded, n) if n > 1 else 0
        c = check_exact("bytes each rank sends per step (ring)", predicted, max(sent) / tcfg.steps)
        c["ok"] = c["ok"] and len(set(sent)) == 1
        checks.append(c)
    elif getattr(args, "ring_stub", False):
        checks.append(check_skipped("bytes each rank sends per step (ring)", "ring_all_reduce is not written yet"))
    checks.append(check_exact("steps where replicas differ (bitwise)", 0, mismatched_steps, unit="steps"))
    if not args.no_reference:
        checks.append(check_at_most(GRAD_CHECK.format("DDP"), TOLERANCE[dtype]["grad"], worst_grad))
        checks.append(check_at_most(PARAM_CHECK.format("DDP"), TOLERANCE[dtype]["param"], worst_param))
    return {
        "config": {"model": mcfg.to_dict(), "train": tcfg.to_dict(), "params": P, "dtype": str(dtype),
                   "dtype_reason": dtype_reason, "allreduce": args.allreduce, "bucket_mb": args.bucket_mb,
                   "buckets_per_step": grads.buckets / tcfg.steps, "checked_steps": checked},
        "checks": checks,
        "metrics": metrics,
        "history": {"loss": losses, "val_loss": val, "step_seconds": times, "reference_seconds": ref_times},
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
