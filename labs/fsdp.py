"""Lab 3: fully sharded data parallelism (FSDP2's ``fully_shard``) next to DDP.

    python -m labs.fsdp --nproc 4 [--backend auto|gloo|nccl] --report PATH

The same GPT is trained twice on the same batches: once with DDP (every rank holds
everything), once with FSDP (every rank holds ``1/n`` of the parameters, gradients and
optimizer state, and all-gathers a layer's parameters just before using them; Zhao et al.
2023, ZeRO stage 3 of Rajbhandari et al. 2020). What it checks:

* **Memory.** The bytes each rank holds for weights, gradients and AdamW state, counted
  from the tensors' storages, against ``solutions.memory.memory_breakdown`` for the
  ``'dp'`` and ``'fsdp'`` strategies, within 2%. The lab trains in fp32 (or bf16 mixed
  precision with fp32 master weights), so the convention is 4 + 4 + 8 bytes per parameter.
* **Traffic.** Every all-gather and reduce-scatter FSDP issues is intercepted and its
  buffer counted: per step, two all-gathers of the parameters (forward, and again in the
  backward because they were freed after the forward) and one reduce-scatter of the
  gradients. With the ring factors that is ``3 (n-1)/n`` of the parameter bytes per rank,
  1.5 times DDP's ``2 (n-1)/n`` (``solutions.communication.communication_breakdown``,
  ZeRO stage 3 vs 0).
* **FSDP = one process**, gradients and parameters, as in Lab 2.

On a GPU it also reports each strategy's peak allocated memory and throughput, and uses bf16
mixed precision (``MixedPrecisionPolicy``) where the GPU supports it.
"""
from __future__ import annotations

import argparse
import copy
import gc
import math
import sys
import time

import torch
import torch.distributed as dist

from solutions.communication import (allgather_bytes_per_rank, communication_breakdown,
                                     reduce_scatter_bytes_per_rank)
from solutions.compute import flops_per_token, model_flops_utilization
from solutions.memory import BYTE_CONVENTIONS, memory_breakdown

from . import launch
from .data import batch_offsets, get_batch, load_corpus, rank_slice
from .ddp import GRAD_CHECK, PARAM_CHECK, TOLERANCE, l2_distance, relative_l2, wrap_ddp
from .model import GPT, matmul_params, param_count, param_shapes
from .report import check_at_most, check_exact, check_within
from .training import (CollectiveCounter, add_model_args, configs_from_args, forward_backward, lr_at,
                       make_optimizer, median, optimizer_update, peak_flops_per_s, pick_dtype, state_bytes, sync)

LAB = "fsdp"
MEMORY_TOLERANCE_PERCENT = 2.0

# The labs keep fp32 weights, gradients and AdamW moments (bf16 runs cast a copy of the
# weights for compute only): the reference's "fp32_adamw_16" convention.
FP32_ADAMW = BYTE_CONVENTIONS["fp32_adamw_16"]

__all__ = ["FP32_ADAMW", "fsdp_padded_numel", "shard_model", "build_parser", "worker", "main"]


def _fully_shard_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        try:  # torch 2.4 and 2.5 kept FSDP2 under a private path
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError as exc:
            raise ImportError(f"FSDP2 (fully_shard) needs torch >= 2.4; this is torch {torch.__version__}") from exc
    return fully_shard, MixedPrecisionPolicy


def fsdp_padded_numel(shapes, n: int) -> int:
    """Elements FSDP2 moves for these parameter shapes on ``n`` ranks: each parameter is split
    along dimension 0 into ``n`` equal shards, the last ones padded (``ceil(d0/n) n`` rows)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return sum(math.ceil(s[0] / n) * n * math.prod(s[1:]) for s in shapes)


def shard_model(model: GPT, mesh, mp_policy=None):
    """Each transformer block is one FSDP unit, and so are the embeddings and the output
    head. The root (the whole model) then owns no parameters of its own, so every unit frees
    its gathered parameters after the forward and gathers them again for the backward, which
    is ZeRO-3's schedule. (A root that owns parameters keeps them gathered between forward and
    backward: one all-gather fewer.)"""
    fully_shard, MixedPrecisionPolicy = _fully_shard_api()
    kw = {"mesh": mesh, "reshard_after_forward": True}
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    for unit in (model.embed, *model.blocks, model.out):
        fully_shard(unit, **kw)
    fully_shard(model, **kw)
    return model


def low_precision_forward_backward(model, low, x, y) -> None:
    """What FSDP's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` computes, in
    one process: forward and backward with a bf16 copy of the fp32 weights, gradients cast
    back to fp32 onto the fp32 weights. (Autocast would differ: it keeps norms and softmax
    in fp32.)"""
    with torch.no_grad():
        for p_low, p in zip(low.parameters(), model.parameters()):
            p_low.copy_(p)
    _, loss = low(x, y)
    loss.backward()
    for p_low, p in zip(low.parameters(), model.parameters()):
        p.grad = p_low.grad.float()
        p_low.grad = None


def _gather_max(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _peak_gib(device):
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def run_phase(strategy: str, ctx, corpus, mcfg, tcfg, dtype, reference: bool) -> dict:
    """Train ``tcfg.steps`` steps with ``strategy`` ('dp' or 'fsdp'); measure state bytes
    after the last update, traffic, step times and (on GPU) peak memory."""
    n, dev = ctx.world_size, ctx.device
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(tcfg.seed)
    model = GPT(mcfg).to(dev)
    ref = ref_opt = initial = ref_low = None
    if reference and ctx.is_main:
        ref = copy.deepcopy(model)
        ref_opt = make_optimizer(ref, tcfg)
        initial = [p.detach().clone() for p in ref.parameters()]
        if strategy == "fsdp" and dtype != torch.float32:
            ref_low = copy.deepcopy(model).to(dtype)  # compute copy, as FSDP's mixed precision
    counter = CollectiveCounter()
    ring = None
    autocast_dtype = dtype
    if strategy == "dp":
        model, _, ring = wrap_ddp(model, ctx, "ring", bucket_mb=25.0)
        params_of = model.module
    else:
        from torch.distributed.device_mesh import init_device_mesh

        _, MixedPrecisionPolicy = _fully_shard_api()
        mesh = init_device_mesh(dev.type, (n,))
        mp = None
        if dtype != torch.float32:
            # FSDP casts the gathered weights itself; gradients are reduced in fp32.
            mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
            autocast_dtype = torch.float32
        model = shard_model(model, mesh, mp)
        params_of = model
    opt = make_optimizer(params_of, tcfg)
    global_batch = n * tcfg.batch_per_rank
    step_times, losses = [], []
    worst_grad = worst_param = 0.0
    state = None
    for step in range(tcfg.steps):
        ctx.maybe_fail(step)
        offsets = batch_offsets(len(corpus.train), mcfg.block_size, global_batch, step, tcfg.seed)
        x, y = get_batch(corpus.train, rank_slice(offsets, ctx.rank, n), mcfg.block_size)
        lr = lr_at(step, tcfg)
        dist.barrier()
        sync(dev)
        t0 = time.perf_counter()
        with counter:
            loss = forward_backward(model, x.to(dev), y.to(dev), dev, autocast_dtype)
        sync(dev)
        elapsed = time.perf_counter() - t0
        if reference:
            grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                     for p in params_of.parameters()]  # a collective for FSDP: every rank joins
            if ctx.is_main:
                xg, yg = get_batch(corpus.train, offsets, mcfg.block_size)
                if ref_low is None:
                    forward_backward(ref, xg.to(dev), yg.to(dev), dev, dtype)
                else:
                    low_precision_forward_backward(ref, ref_low, xg.to(dev), yg.to(dev))
                worst_grad = max(worst_grad, relative_l2(grads, [p.grad for p in ref.parameters()]))
            del grads
        sync(dev)
        t0 = time.perf_counter()
        with counter:
            optimizer_update(params_of, opt, lr, tcfg)
        sync(dev)
        step_times.append(elapsed + time.perf_counter() - t0)
        if step == tcfg.steps - 1:
            state = state_bytes(params_of, opt)  # gradients still exist
        opt.zero_grad(set_to_none=True)
        if reference:
            full = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
                    for p in params_of.parameters()]
            if ctx.is_main:
                optimizer_update(ref, ref_opt, lr, tcfg)
                ref_opt.zero_grad(set_to_none=True)
                ref_params = list(ref.parameters())
                worst_param = max(worst_param, l2_distance(full, ref_params) / l2_distance(ref_params, initial))
            del full
        mean_loss = loss.float().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / n)
        ctx.log(f"{strategy:>4} step {step + 1:>3}/{tcfg.steps}  loss {losses[-1]:.3f}")

    times = torch.tensor(step_times, dtype=torch.float64, device=dev)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    # Per-rank state: the largest over ranks (uneven shards make the last rank's smaller).
    state_max = {k: int(_gather_max(v, dev)) for k, v in state.items()}
    peaks = [None] * n
    dist.all_gather_object(peaks, _peak_gib(dev))
    out = {
        "state_bytes": state_max,
        "collective_bytes_per_step": {k: v / tcfg.steps for k, v in counter.bytes.items()},
        "collective_calls_per_step": {k: v / tcfg.steps for k, v in counter.calls.items()},
        "ring_bytes_sent_per_step": (ring.bytes_sent / tcfg.steps) if ring is not None else None,
        "step_seconds": median(times.tolist()),
        "loss": losses,
        # Rank 0 also holds the single-process reference: report the last rank's peak.
        "peak_allocated_gib": peaks[-1],
        "peak_allocated_gib_per_rank": peaks,
        "worst_grad": worst_grad,
        "worst_param": worst_param,
    }
    # Free this phase's model before the next one starts (DDP holds reference cycles), so
    # that the next phase's peak memory is its own.
    del model, params_of, opt, ref, ref_opt, ref_low, initial
    gc.collect()
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.fsdp", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    add_model_args(parser, steps=10)
    parser.add_argument_group("fsdp").add_argument(
        "--no-reference", action="store_true", help="skip the single-process comparison (for large models on GPUs)")
    return parser


def worker(ctx, args) -> dict:
    n, dev = ctx.world_size, ctx.device
    corpus = load_corpus()
    mcfg, tcfg = configs_from_args(args, corpus.vocab_size)
    dtype, dtype_reason = pick_dtype(args.dtype, dev)
    P = param_count(mcfg)
    P_pad = fsdp_padded_numel(param_shapes(mcfg).values(), n)
    ctx.log(f"model: {P:,} parameters ({P_pad:,} with FSDP's padding on {n} rank(s)); "
            f"compute dtype {str(dtype).replace('torch.', '')} ({dtype_reason})")
    phases = {
        "dp": run_phase("dp", ctx, corpus, mcfg, tcfg, dtype, reference=False),
        "fsdp": run_phase("fsdp", ctx, corpus, mcfg, tcfg, dtype, reference=not args.no_reference),
    }
    dp, fs = phases["dp"], phases["fsdp"]

    checks = []
    # Memory: measured per-rank bytes against the reference model, within 2%.
    for strategy, phase in phases.items():
        predicted = memory_breakdown(P, strategy, n, convention=FP32_ADAMW)
        for part in ("weights", "grads", "optimizer"):
            checks.append(check_within(f"{strategy.upper()}: {part} bytes per rank", predicted[part],
                                       phase["state_bytes"][part], MEMORY_TOLERANCE_PERCENT))

    # Traffic. DP: the ring's counted sends against ZeRO stage 0's all-reduce volume.
    common = dict(tp=1, pp=1, num_layers=mcfg.n_layer, seq_len=mcfg.block_size, micro_batch=tcfg.batch_per_rank,
                  num_microbatches=1, d_model=mcfg.d_model)
    predicted_dp = communication_breakdown(P, dp=n, bytes_per_element=4, zero_stage=0, **common)["dp"]["bytes"] \
        if n > 1 else 0
    checks.append(check_exact("DP: bytes each rank sends per step (ring, counted)", predicted_dp,
                              dp["ring_bytes_sent_per_step"]))
    # FSDP: full buffers of the collectives it issued, against the parameter count.
    gather_elem = 2 if dtype == torch.bfloat16 else 4  # FSDP gathers in the compute dtype
    ag = fs["collective_bytes_per_step"].get("all_gather", 0)
    rs = fs["collective_bytes_per_step"].get("reduce_scatter", 0)
    moves = n > 1  # on one rank there is nothing to gather or scatter, and FSDP skips both
    checks.append(check_exact("FSDP: all-gathered bytes per step (2 x parameters)",
                              2 * P_pad * gather_elem if moves else 0, ag))
    checks.append(check_exact("FSDP: reduce-scattered bytes per step (1 x gradients)", P_pad * 4 if moves else 0, rs))
    if n > 1:
        sent = allgather_bytes_per_rank(ag, n) + reduce_scatter_bytes_per_rank(rs, n)
        if gather_elem == 4:
            predicted_fsdp = communication_breakdown(P_pad, dp=n, bytes_per_element=4, zero_stage=3, **common)["dp"]["bytes"]
        else:
            predicted_fsdp = (allgather_bytes_per_rank(2 * P_pad * gather_elem, n)
                              + reduce_scatter_bytes_per_rank(P_pad * 4, n))
        checks.append(check_exact("FSDP: bytes each rank sends per step (ring factors x counted buffers)",
                                  predicted_fsdp, sent))
    if not args.no_reference:
        checks.append(check_at_most(GRAD_CHECK.format("FSDP"), TOLERANCE[dtype]["grad"], fs["worst_grad"]))
        checks.append(check_at_most(PARAM_CHECK.format("FSDP"), TOLERANCE[dtype]["param"], fs["worst_param"]))

    tokens_per_step = n * tcfg.batch_per_rank * mcfg.block_size
    peak = peak_flops_per_s(dev)
    fpt = flops_per_token(matmul_params(mcfg), mcfg.n_layer, mcfg.block_size, mcfg.d_model)
    side_by_side = {}
    for strategy, phase in phases.items():
        tps = tokens_per_step / phase["step_seconds"]
        row = {
            "weights": phase["state_bytes"]["weights"], "grads": phase["state_bytes"]["grads"],
            "optimizer": phase["state_bytes"]["optimizer"],
            "predicted": memory_breakdown(P, strategy, n, convention=FP32_ADAMW),
            "bytes_sent_per_rank_per_step": (phase["ring_bytes_sent_per_step"] if strategy == "dp"
                                             else (allgather_bytes_per_rank(ag, n) + reduce_scatter_bytes_per_rank(rs, n)
                                                   if n > 1 else 0)),
            "tokens_per_s": tps,
            "peak_allocated_gib": phase["peak_allocated_gib"],
        }
        if peak is not None:
            row["mfu"] = model_flops_utilization(tps, fpt, n * peak[0])
        side_by_side[strategy] = row
        ctx.log(f"timing: {strategy} {tps:,.0f} tokens/s"
                + (f", peak allocated {row['peak_allocated_gib']:.2f} GiB" if row["peak_allocated_gib"] else "")
                + (f", MFU {row['mfu']:.1%}" if "mfu" in row else ""))
    return {
        "config": {"model": mcfg.to_dict(), "train": tcfg.to_dict(), "params": P, "params_padded": P_pad,
                   "dtype": str(dtype), "dtype_reason": dtype_reason, "convention": FP32_ADAMW.name,
                   "memory_tolerance_percent": MEMORY_TOLERANCE_PERCENT},
        "checks": checks,
        "side_by_side": side_by_side,
        "phases": phases,
        "metrics": {"flops_per_token": fpt,
                    **({"peak_flops_per_s": peak[0], "peak_source": f"solutions.facts.GPUS[{peak[1]!r}] ({peak[2]})"}
                       if peak else {})},
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv)


if __name__ == "__main__":
    launch.exit_now(main())
