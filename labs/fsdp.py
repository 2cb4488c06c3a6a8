"""Lab 3: fully sharded data parallelism (FSDP2's ``fully_shard``) next to DDP.

    python -m labs.fsdp --nproc 4 [--backend auto|gloo|nccl] --report PATH

The same GPT is trained twice on the same batches: once with DDP (every rank holds
everything), once with FSDP (every rank holds ``1/n`` of the parameters, gradients and
optimizer state, and all-gathers a layer's parameters just before using them; Zhao et al.
2023, ZeRO stage 3 of Rajbhandari et al. 2020). What it checks:

* **Memory.** The bytes each rank holds for weights, gradients and AdamW state, counted
  from the tensors' storages, against ``solutions.memory.memory_breakdown`` for the
  ``'dp'`` and ``'fsdp'`` strategies, within 2%. The lab keeps fp32 weights, gradients and
  AdamW state (bf16 or fp16 runs compute under autocast), so the convention is 4 + 4 + 8
  bytes per parameter.
* **Traffic.** Every all-gather and reduce-scatter FSDP issues is intercepted and its
  buffer counted (DDP's buckets are counted by its communication hook): per step, two all-gathers of the parameters (forward, and again in the
  backward because they were freed after the forward) and one reduce-scatter of the
  gradients. With the ring factors that is ``3 (n-1)/n`` of the parameter bytes per rank,
  1.5 times DDP's ``2 (n-1)/n`` (``solutions.communication.communication_breakdown``,
  ZeRO stage 3 vs 0).
* **FSDP = one process**, gradients and parameters, as in Lab 2.

Both phases use the same backend's built-in collectives (DDP's all-reduce overlaps the
backward pass, as FSDP's gathers do) and the same precision scheme (autocast, with a
gradient scaler for fp16), so that they differ only in the strategy. FSDP's own
``MixedPrecisionPolicy``, which would gather bf16 weights and halve the all-gathers, is not
used for that reason.

The first ``--check-steps`` steps are checked: collectives are counted (a dispatch mode that
slows every op down) and the single-process reference runs. The other steps are timed and
do only the training step; on a GPU the peak allocated memory is measured over them
(``PEAK_INCLUDES`` says what it covers), with throughput and, on a GPU of
``solutions.hardware``, MFU against the peak of the dtype it ran in.
"""
from __future__ import annotations

import argparse
import copy
import gc
import math
import time

import torch
import torch.distributed as dist

from solutions._format import plural
from solutions.communication import (allgather_bytes_per_rank, allreduce_bytes_per_rank, communication_breakdown,
                                     reduce_scatter_bytes_per_rank)
from solutions.compute import flops_per_token
from solutions.memory import BYTE_CONVENTIONS, memory_breakdown

from . import launch
from .data import batch_offsets, get_batch, load_corpus, rank_slice
from .ddp import GRAD_CHECK, PARAM_CHECK, TOLERANCE, l2_distance, relative_l2, wrap_ddp
from .model import GPT, matmul_params, param_count, param_shapes
from .report import check_at_most, check_exact, check_within
from .training import (CollectiveCounter, add_model_args, validate_model_args, peak_gib, reset_peak, configs_from_args, dtype_name, format_mfu, format_rate,
                       forward_backward, lr_at, make_optimizer, make_scaler, median, mfu_metrics, optimizer_update,
                       pick_dtype, split_steps, state_bytes, steps_words, sync, train_step)

LAB = "fsdp"
MEMORY_TOLERANCE_PERCENT = 2.0

# The labs keep fp32 weights, gradients and AdamW moments (bf16 runs cast a copy of the
# weights for compute only): the reference's "fp32_adamw_16" convention.
FP32_ADAMW = BYTE_CONVENTIONS["fp32_adamw_16"]

#: What the reported peak memory is (GPU only).
PEAK_INCLUDES = ("torch.cuda.max_memory_allocated over the timed steps, the largest over ranks: the "
                 "strategy's weights, gradients and optimizer state, activations, FSDP's gathered layers or "
                 "DDP's buckets, and workspace; not the single-process reference, nor anything gathered "
                 "for the checks (those run in the checked steps, before the counter is reset)")

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


def _gather_max(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _full(tensors) -> list:
    """The full tensors behind (possibly sharded) ``tensors``: an all-gather for DTensors, in
    which every rank takes part."""
    return [t.full_tensor() if hasattr(t, "full_tensor") else t.detach() for t in tensors]


def run_phase(strategy: str, ctx, corpus, mcfg, tcfg, dtype, reference: bool, checked: int,
              reference_delay: float = 0.0) -> dict:
    """Train ``tcfg.steps`` steps with ``strategy`` ('dp' or 'fsdp').

    Steps ``1..checked`` are checked, untimed: collectives counted (a dispatch mode that
    slows every op), and with ``reference`` the single-process run on rank 0 and the full
    gradients and weights gathered for it. Then the reference and everything gathered for it
    is freed, the peak-memory counter is reset, and the remaining steps are timed: each one
    is the training step and nothing else. State bytes are measured after the last step."""
    n, dev = ctx.world_size, ctx.device
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # the previous phase's blocks: this phase's peak is its own
    torch.manual_seed(tcfg.seed)
    model = GPT(mcfg).to(dev)
    ref = ref_opt = ref_scaler = initial = None
    if reference and ctx.is_main:
        ref = copy.deepcopy(model)
        ref_opt = make_optimizer(ref, tcfg)
        ref_scaler = make_scaler(dev, dtype)
        initial = [p.detach().clone() for p in ref.parameters()]
    counter = CollectiveCounter()
    grads_seen = None
    if strategy == "dp":
        # The built-in all-reduce, as FSDP uses the built-in collectives: the same backend and
        # the same overlap with the backward pass for both. The hook counts the buckets.
        model, grads_seen, _ = wrap_ddp(model, ctx, "builtin", bucket_mb=25.0)
        params_of = model.module
    else:
        from torch.distributed.device_mesh import init_device_mesh

        model = shard_model(model, init_device_mesh(dev.type, (n,)))
        params_of = model
    opt = make_optimizer(params_of, tcfg)
    scaler = make_scaler(dev, dtype)
    global_batch = n * tcfg.batch_per_rank
    step_times, losses = [], []
    worst_grad = worst_param = 0.0
    state = None
    bucket_bytes = 0
    baseline = None
    for step in range(tcfg.steps):
        ctx.maybe_fail(step)
        offsets = batch_offsets(len(corpus.train), mcfg.block_size, global_batch, step, tcfg.seed)
        x, y = get_batch(corpus.train, rank_slice(offsets, ctx.rank, n), mcfg.block_size)
        x, y = x.to(dev), y.to(dev)
        lr = lr_at(step, tcfg)
        if step < checked:
            with counter:
                loss = forward_backward(model, x, y, dev, dtype, scaler)
            if reference:
                grads = _full(p.grad for p in params_of.parameters())  # every rank joins the gather
                if ctx.is_main:
                    xg, yg = get_batch(corpus.train, offsets, mcfg.block_size)
                    forward_backward(ref, xg.to(dev), yg.to(dev), dev, dtype, ref_scaler)
                    worst_grad = max(worst_grad, relative_l2(grads, [p.grad for p in ref.parameters()]))
                    time.sleep(reference_delay)
                del grads
            with counter:
                optimizer_update(params_of, opt, lr, tcfg, scaler)
            if reference:
                full = _full(params_of.parameters())
                if ctx.is_main:
                    optimizer_update(ref, ref_opt, lr, tcfg, ref_scaler)
                    ref_opt.zero_grad(set_to_none=True)
                    ref_params = list(ref.parameters())
                    worst_param = max(worst_param, l2_distance(full, ref_params) / l2_distance(ref_params, initial))
                del full
            if step == checked - 1:
                bucket_bytes = grads_seen.bytes if grads_seen is not None else 0
                # The timed steps start clean: no reference, nothing gathered for it.
                ref = ref_opt = ref_scaler = initial = None
                gc.collect()
                # No empty_cache() here: it would hand the allocator's cached blocks back, and the
                # first timed step would pay for allocating everything again.
                baseline = reset_peak(dev)
        else:
            dist.barrier()
            sync(dev)
            t0 = time.perf_counter()
            loss = train_step(model, opt, x, y, lr, tcfg, dev, dtype, scaler)
            sync(dev)
            step_times.append(time.perf_counter() - t0)
        if step == tcfg.steps - 1:
            state = state_bytes(params_of, opt)  # gradients still exist
        opt.zero_grad(set_to_none=True)
        mean_loss = loss.float().clone()
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / n)
        ctx.log(f"{strategy:>4} step {step + 1:>3}/{tcfg.steps}  loss {losses[-1]:.3f}"
                + ("  (timed)" if step >= checked else "  (checked)"))

    times = []
    if step_times:
        t = torch.tensor(step_times, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
    # Per-rank state: the largest over ranks (uneven shards make the last rank's smaller).
    state_max = {k: int(_gather_max(v, dev)) for k, v in state.items()}
    peaks, baselines = [None] * n, [None] * n
    dist.all_gather_object(peaks, peak_gib(dev) if step_times else None)
    dist.all_gather_object(baselines, baseline if step_times else None)
    out = {
        "state_bytes": state_max,
        "collective_bytes_per_step": {k: v / checked for k, v in counter.bytes.items()},
        "collective_calls_per_step": {k: v / checked for k, v in counter.calls.items()},
        "bucket_bytes_per_step": bucket_bytes / checked if strategy == "dp" else None,
        "step_seconds": median(times) if times else None,
        "step_seconds_all": times,
        "checked_steps": checked,
        "timed_steps": len(times),
        "loss": losses,
        "peak_allocated_gib": max(peaks) if peaks[0] is not None else None,
        "peak_allocated_gib_per_rank": peaks,
        # Allocated when the counter was reset (the model, optimizer state, cuBLAS workspace...),
        # and how far above it the timed steps went: activations and what FSDP gathers.
        "baseline_allocated_gib": max(baselines) if baselines[0] is not None else None,
        "peak_above_baseline_gib": (max(p - b for p, b in zip(peaks, baselines))
                                    if peaks[0] is not None and baselines[0] is not None else None),
        "peak_includes": PEAK_INCLUDES,
        "worst_grad": worst_grad,
        "worst_param": worst_param,
    }
    # Free this phase's model before the next one starts (DDP holds reference cycles), so
    # that the next phase's peak memory is its own.
    del model, params_of, opt
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
    checked = split_steps(tcfg.steps, args.check_steps)
    dtype, dtype_reason = pick_dtype(args.dtype, dev)
    P = param_count(mcfg)
    P_pad = fsdp_padded_numel(param_shapes(mcfg).values(), n)
    ctx.log(f"model: {P:,} parameters ({P_pad:,} with FSDP's padding on {plural(n, 'rank')}); "
            f"compute dtype {dtype_name(dtype)} ({dtype_reason}); "
            f"{steps_words(checked, tcfg.steps)}")
    phases = {
        "dp": run_phase("dp", ctx, corpus, mcfg, tcfg, dtype, reference=False, checked=checked),
        "fsdp": run_phase("fsdp", ctx, corpus, mcfg, tcfg, dtype, reference=not args.no_reference, checked=checked,
                          reference_delay=args.reference_delay),
    }
    dp, fs = phases["dp"], phases["fsdp"]

    checks = []
    # Memory: measured per-rank bytes against the reference model, within 2%.
    for strategy, phase in phases.items():
        predicted = memory_breakdown(P, strategy, n, convention=FP32_ADAMW)
        for part in ("weights", "grads", "optimizer"):
            checks.append(check_within(f"{strategy.upper()}: {part} bytes per rank", predicted[part],
                                       phase["state_bytes"][part], MEMORY_TOLERANCE_PERCENT))

    # Traffic: every buffer counted (DDP's buckets, FSDP's collectives), times the ring
    # factors, against ZeRO stage 0 and stage 3 (solutions.communication). Parameters and
    # gradients are fp32 in both phases (autocast casts copies for compute), so 4 bytes each.
    common = dict(tp=1, pp=1, num_layers=mcfg.n_layer, seq_len=mcfg.block_size, micro_batch=tcfg.batch_per_rank,
                  num_microbatches=1, d_model=mcfg.d_model)
    predicted_dp = communication_breakdown(P, dp=n, bytes_per_element=4, zero_stage=0, **common)["dp"]["bytes"] \
        if n > 1 else 0
    dp_sent = allreduce_bytes_per_rank(dp["bucket_bytes_per_step"], n) if n > 1 else 0
    checks.append(check_exact("DP: bytes each rank sends per step (ring factor x counted buckets)",
                              predicted_dp, dp_sent))
    ag = fs["collective_bytes_per_step"].get("all_gather", 0)
    rs = fs["collective_bytes_per_step"].get("reduce_scatter", 0)
    fsdp_sent = allgather_bytes_per_rank(ag, n) + reduce_scatter_bytes_per_rank(rs, n) if n > 1 else 0
    if n > 1:
        # On one rank there is nothing to gather or scatter; whether FSDP2 still issues the
        # (empty-handed) collectives depends on the torch release, so only the bytes sent,
        # zero either way, are checked there.
        checks.append(check_exact("FSDP: all-gathered bytes per step (2 x parameters)", 2 * P_pad * 4, ag))
        checks.append(check_exact("FSDP: reduce-scattered bytes per step (1 x gradients)", P_pad * 4, rs))
    predicted_fsdp = communication_breakdown(P_pad, dp=n, bytes_per_element=4, zero_stage=3, **common)["dp"]["bytes"] \
        if n > 1 else 0
    checks.append(check_exact("FSDP: bytes each rank sends per step (ring factors x counted buffers)",
                              predicted_fsdp, fsdp_sent))
    if not args.no_reference:
        checks.append(check_at_most(GRAD_CHECK.format("FSDP"), TOLERANCE[dtype]["grad"], fs["worst_grad"]))
        checks.append(check_at_most(PARAM_CHECK.format("FSDP"), TOLERANCE[dtype]["param"], fs["worst_param"]))

    tokens_per_step = n * tcfg.batch_per_rank * mcfg.block_size
    fpt = flops_per_token(matmul_params(mcfg), mcfg.n_layer, mcfg.block_size, mcfg.d_model)
    side_by_side = {}
    for strategy, phase in phases.items():
        row = {
            "weights": phase["state_bytes"]["weights"], "grads": phase["state_bytes"]["grads"],
            "optimizer": phase["state_bytes"]["optimizer"],
            "predicted": memory_breakdown(P, strategy, n, convention=FP32_ADAMW),
            "bytes_sent_per_rank_per_step": dp_sent if strategy == "dp" else fsdp_sent,
            "peak_allocated_gib": phase["peak_allocated_gib"],
            "baseline_allocated_gib": phase["baseline_allocated_gib"],
            "peak_above_baseline_gib": phase["peak_above_baseline_gib"],
        }
        if phase["step_seconds"]:
            row["tokens_per_s"] = tokens_per_step / phase["step_seconds"]
            row.update(mfu_metrics(row["tokens_per_s"], fpt, n, dev, dtype))
            ctx.log(f"timing: {strategy} {format_rate(row['tokens_per_s'])} tokens/s"
                    + (f", peak allocated {row['peak_allocated_gib']:.3g} GiB ({row['peak_above_baseline_gib']:.3g} "
                       f"above the {row['baseline_allocated_gib']:.3g} GiB allocated before the timed steps)"
                       if row["peak_allocated_gib"] else "")
                    + f", {format_mfu(row)}")
        side_by_side[strategy] = row
    return {
        "config": {"model": mcfg.to_dict(), "train": tcfg.to_dict(), "params": P, "params_padded": P_pad,
                   "dtype": str(dtype), "dtype_reason": dtype_reason, "convention": FP32_ADAMW.name,
                   "memory_tolerance_percent": MEMORY_TOLERANCE_PERCENT, "checked_steps": checked,
                   "peak_includes": PEAK_INCLUDES},
        "checks": checks,
        "side_by_side": side_by_side,
        "phases": phases,
        "metrics": {"flops_per_token": fpt, "tokens_per_step": tokens_per_step},
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate_model_args)


if __name__ == "__main__":
    launch.exit_now(main())
