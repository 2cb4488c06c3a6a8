"""Parallelism axes together: data x tensor parallelism on one grid of ranks.

    python -m labs.grid3d --nproc 4 [--tp 2] [--backend auto|gloo|nccl] --report PATH

The ranks are one ``arange(world)`` reshaped to ``(dp, pp, tp)``
(``solutions.layout.process_grid``, with ``pp = 1`` here): ranks that differ only in their
tensor-parallel index form a TP group, ranks that differ only in their data-parallel index a
DP group, and every group is a ``torch.distributed`` process group of its own. Each TP group
runs Lab 4's hand-written tensor-parallel blocks on its share of the batch; each DP group then
all-reduces the gradients of the shard its members hold. Every collective is a hand-written
ring, so each axis's bytes are counted send by send.

The blocks have no biases and no norm weights, so that every parameter is split across the TP
group: the per-axis breakdown ``solutions.communication.communication_breakdown`` assumes that
each GPU holds ``P / (tp pp)`` parameters. What it checks:

* **grid = one process**: every rank's gradient shard equals the matching slice of one
  process's gradient on the whole batch;
* **TP traffic**: the bytes each rank sends in its TP group, against the breakdown's ``'tp'``
  (``8 b s h (t-1)/t`` per layer per micro-batch);
* **DP traffic**: the bytes each rank sends in its DP group, against the breakdown's ``'dp'``
  (``2 (d-1)/d`` of the shard's gradient bytes).
"""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from solutions.communication import communication_breakdown
from solutions.layout import dp_groups, process_grid, tp_groups

from . import launch
from .collectives import RING_STUB_NOTE, RingStats, ring_all_reduce, ring_is_stub
from .model import Block, GPTConfig
from .training import check_model_fits
from .report import check_at_most, check_exact, check_skipped
from .tensor_parallel import TOLERANCE, TensorParallelBlock, TensorParallelComm, relative_l2

LAB = "grid3d"

__all__ = ["without_biases", "build_groups", "build_parser", "worker", "main"]


def without_biases(block: Block) -> Block:
    """Remove ``block``'s biases and its norms' weights and biases (the norms still
    normalise): every parameter left is a matrix that tensor parallelism splits."""
    for module in (block.attn.qkv, block.attn.proj, block.mlp.fc, block.mlp.proj):
        module.bias = None
    for norm in (block.ln1, block.ln2):
        norm.weight = None
        norm.bias = None
    return block


def build_groups(world: int, tp: int):
    """The grid and, for this rank, its TP and DP process groups and their rank lists. Every
    rank creates every group, in the same order (``new_group`` is collective)."""
    grid = process_grid(world, tp, 1, world // tp)
    rank = dist.get_rank()
    mine = {}
    for axis, groups in (("tp", tp_groups(grid)), ("dp", dp_groups(grid))):
        for ranks in groups:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[axis] = (group, ranks)
    return grid, mine


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.grid3d", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("grid")
    g.add_argument("--tp", type=int, default=None,
                   help="tensor-parallel degree (default: 2 when the world size is even, else 1); dp = nproc / tp")
    g.add_argument("--n-layer", type=int, default=2)
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--d-model", type=int, default=64)
    g.add_argument("--block-size", type=int, default=64)
    g.add_argument("--batch", type=int, default=4, help="sequences per data-parallel replica b")
    g.add_argument("--seed", type=int, default=0)
    return parser


def validate(args, world_size: int) -> tuple[int, GPTConfig]:
    """``(tp, model)`` for these arguments, or a one-line ``ValueError`` before any rank
    starts: the TP degree must divide the world size and the heads."""
    world = world_size
    tp = args.tp if args.tp is not None else (2 if world % 2 == 0 else 1)
    if tp < 1 or world % tp:
        raise ValueError(f"--tp must divide the world size {world} (--nproc), got {tp}")
    cfg = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model)
    if cfg.n_head % tp:
        raise ValueError(f"--n-head {cfg.n_head} must be divisible by the tensor-parallel degree {tp} (--tp)")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    check_model_fits(cfg, args.batch, world_size, args.backend)
    ring_is_stub()  # asked here, before the process group exists: the probe never sends
    return tp, cfg


def worker(ctx, args) -> dict:
    world, dev = ctx.world_size, ctx.device
    tp, cfg = validate(args, world)
    dp = world // tp
    b, s, h, L = args.batch, cfg.block_size, cfg.d_model, cfg.n_layer
    grid, mine = build_groups(world, tp)
    tp_group, tp_ranks = mine["tp"]
    dp_group, dp_ranks = mine["dp"]
    d_index = dp_ranks.index(ctx.rank)
    ctx.log(f"grid (dp, pp, tp) = {tuple(grid.shape)}: TP groups {tp_groups(grid)}, DP groups {dp_groups(grid)}")

    torch.manual_seed(args.seed)
    ref_blocks = [without_biases(Block(cfg)).to(dev) for _ in range(L)]
    P = sum(q.numel() for blk in ref_blocks for q in blk.parameters())
    x = torch.randn(dp * b, s, h, device=dev)  # the global batch: replica d takes rows d*b .. d*b+b-1
    probe = torch.randn(dp * b, s, h, device=dev)
    xr = x.clone().requires_grad_(True)
    out = xr
    for blk in ref_blocks:
        out = blk(out)
    ((out * probe).sum() / dp).backward()  # the mean over replicas of each replica's loss

    stub = ring_is_stub()
    if stub:
        ctx.log(RING_STUB_NOTE)
    comm = TensorParallelComm(tp_group, "builtin" if stub else "ring")
    blocks = [TensorParallelBlock(blk, cfg.n_head, comm).to(dev) for blk in ref_blocks]
    rows = slice(d_index * b, (d_index + 1) * b)
    # The input needs its gradient, as the embeddings' output does in a whole model; without
    # it autograd would skip the first block's f in the backward pass (one all-reduce fewer).
    y = x[rows].clone().requires_grad_(True)
    for blk in blocks:
        y = blk(y)
    (y * probe[rows]).sum().backward()

    # Data parallelism over the shards: average each shard's gradient across its DP group.
    ctx.maybe_fail(0)
    grads = [q.grad for blk in blocks for q in blk.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dp_ring = RingStats()
    if stub:
        dist.all_reduce(flat, group=dp_group)
    else:
        ring_all_reduce(flat, dp_ring, dp_group)
    flat /= dp
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()

    worst = 0.0
    for blk, ref in zip(blocks, ref_blocks):
        ref_params = dict(ref.named_parameters())
        for local, src in blk.sources.items():
            worst = max(worst, relative_l2(getattr(blk, local).grad, blk.slicers[src](ref_params[src].grad)))
    sent = [None] * world
    dist.all_gather_object(sent, {"tp": comm.ring.bytes_sent, "dp": dp_ring.bytes_sent, "padding": dp_ring.padding})
    breakdown = communication_breakdown(P, dp=dp, tp=tp, pp=1, num_layers=L, seq_len=s, micro_batch=b,
                                        num_microbatches=1, d_model=h, bytes_per_element=4)
    worst_all = torch.tensor([worst], dtype=torch.float64, device=dev)
    dist.all_reduce(worst_all, op=dist.ReduceOp.MAX)

    checks = [check_at_most("grid vs one process: gradient shards, worst relative L2", TOLERANCE, float(worst_all))]
    for axis in ("tp", "dp") if not stub else ():
        values = [r[axis] for r in sent]
        c = check_exact(f"{axis.upper()} group: bytes each rank sends per step (ring, counted)",
                        breakdown[axis]["bytes"], max(values))
        c["ok"] = c["ok"] and len(set(values)) == 1
        checks.append(c)
    if stub:
        checks += [check_skipped(f"{axis.upper()} group: bytes each rank sends per step (ring, counted)",
                                 "ring_all_reduce is not written yet", breakdown[axis]["bytes"])
                   for axis in ("tp", "dp")]
    else:
        c = checks[-1]
        c["ok"] = c["ok"] and all(r["padding"] == 0 for r in sent)  # no padding hides in the DP count
    return {
        "config": {"model": cfg.to_dict(), "tp": tp, "pp": 1, "dp": dp, "micro_batch": b, "params": P,
                   "dtype": "torch.float32", "bytes_per_element": 4},
        "grid": grid.tolist(),
        "groups": {"tp": tp_groups(grid), "dp": dp_groups(grid)},
        "checks": checks,
        "bytes_sent_per_rank": sent,
        "breakdown": breakdown,
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
