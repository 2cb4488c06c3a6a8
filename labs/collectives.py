"""Lab 1: collectives. All-reduce, all-gather and reduce-scatter on real processes; a ring
all-reduce written by hand from point-to-point sends; bytes and bandwidth.

    python -m labs.collectives --nproc 4 [--backend auto|gloo|nccl] --report PATH

What it checks (``checks`` in the report):

* each built-in collective returns exactly what its definition says (integer-valued data
  whose sums stay below 2^24, so float32 sums are exact whatever the number of ranks);
* the hand-written ring all-reduce agrees with ``dist.all_reduce``;
* the bytes each rank sends in the ring equal ``2 (n-1)/n`` times the buffer
  (``solutions.communication.allreduce_bytes_per_rank``; Patarasuk & Yuan 2009), counted
  send by send, and the ring takes ``2 (n-1)`` sequential steps. ``--ring-dtype fp16|bf16``
  runs the ring on a 2-byte buffer.

It also times each collective over a range of sizes and reports algorithm bandwidth
(buffer bytes / time) and bus bandwidth (algorithm bandwidth times the ring factor,
nccl-tests' definition), which is comparable across world sizes.
"""
from __future__ import annotations

import argparse
import functools
import time

import torch
import torch.distributed as dist

from solutions.communication import (allgather_factor, allreduce_bytes_per_rank, reduce_scatter_factor,
                                     ring_allreduce_factor, ring_allreduce_steps)

from . import launch
from .report import check_at_most, check_exact, check_skipped

LAB = "collectives"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "ring_all_reduce")

__all__ = ["ring_all_reduce", "RingStats", "all_gather_single", "reduce_scatter_single",
           "build_parser", "worker", "main"]

# torch 2.13 renamed the single-tensor collectives (and deprecated the old names); Colab and
# Kaggle may ship an older torch that only has the old ones.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class RingStats:
    """What one rank's ring all-reduces did: ``bytes_sent``, ``steps``, ``padding`` (elements)."""

    def __init__(self):
        self.bytes_sent = 0
        self.steps = 0
        self.padding = 0
        self.calls = 0


def ring_all_reduce(tensor: torch.Tensor, stats: RingStats | None = None, group=None,
                    op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` over all ranks in place, with a ring of point-to-point sends, and
    return it: ``op="sum"``, or ``op="mean"`` (the sum divided by the number of ranks).

    The buffer is split into ``n`` chunks (padded with zeros to a multiple of ``n``). Rank
    ``r`` sends to ``r+1`` and receives from ``r-1`` (mod ``n``):

    * reduce-scatter, steps ``s = 0..n-2``: send chunk ``(r-s) mod n``, receive chunk
      ``(r-s-1) mod n`` and add it to our copy. Rank ``r`` then holds the full sum of chunk
      ``(r+1) mod n``;
    * all-gather, steps ``s = 0..n-2``: send chunk ``(r+1-s) mod n`` (complete), receive
      chunk ``(r-s) mod n`` and overwrite our copy.

    Each rank sends ``2 (n-1)`` chunks of ``size/n``: ``2 (n-1)/n`` of the buffer, whatever
    ``n`` is (Patarasuk & Yuan 2009). The same schedule as
    ``solutions.communication.simulate_ring_allreduce``, here on real processes.

    This is also Assignment 1's reference answer (``assignments/a1_ring.py`` grades it): the
    student release ships this function with its body between the markers replaced by a
    ``raise NotImplementedError``, which the student's own ring replaces.
    """
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous")
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    stats = stats if stats is not None else RingStats()
    stats.calls += 1
    ### BEGIN SOLUTION
    n = dist.get_world_size(group)
    r = dist.get_rank(group)
    flat = tensor.view(-1)
    pad = (-flat.numel()) % n
    work = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
    stats.padding += pad
    chunks = work.chunk(n)
    right = dist.get_global_rank(group, (r + 1) % n) if group is not None else (r + 1) % n
    left = dist.get_global_rank(group, (r - 1) % n) if group is not None else (r - 1) % n
    incoming = torch.empty_like(chunks[0])

    def exchange(send: torch.Tensor, recv: torch.Tensor) -> None:
        # Send and receive in one batch: both ranks of a pair post their operations
        # together, so neither waits for the other (NCCL requires this form).
        ops = [dist.P2POp(dist.isend, send, right, group), dist.P2POp(dist.irecv, recv, left, group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        stats.bytes_sent += send.numel() * send.element_size()
        stats.steps += 1

    for s in range(n - 1):  # reduce-scatter
        exchange(chunks[(r - s) % n], incoming)
        chunks[(r - s - 1) % n].add_(incoming)
    for s in range(n - 1):  # all-gather
        exchange(chunks[(r + 1 - s) % n], chunks[(r - s) % n])
    if pad:
        flat.copy_(work[: flat.numel()])
    if op == "mean":
        tensor.div_(n)
    ### END SOLUTION
    return tensor


RING_STUB_NOTE = "Assignment 1's ring_all_reduce is not written yet: using the built-in all-reduce"


@functools.lru_cache(maxsize=None)
def ring_is_stub() -> bool:
    """True while ``ring_all_reduce`` is still the student release's stub.

    The stub raises ``NotImplementedError`` before it communicates, the same on every rank.
    Asked before the process group exists (a lab's ``validate``, in the launcher and in each
    rank before it joins), a written ring fails on the missing group instead, so the probe
    never sends; the answer is cached for the process."""
    try:
        ring_all_reduce(torch.zeros(1))
    except NotImplementedError:
        return True
    except Exception:  # a written ring that reached torch.distributed
        return False
    return False


def resolve_ring_mode(args, attr: str, flag: str) -> str:
    """The all-reduce a lab uses, set on ``args.<attr>``: a mode given explicitly stays; the
    default (``None``) is the hand-written ring, or ``'builtin'`` while the ring is the stub
    (``args.ring_stub`` then says so, for the note and the skipped checks). An explicit
    ``ring`` with the stub is a one-line ``ValueError``."""
    mode = getattr(args, attr)
    if mode is None:
        args.ring_stub = ring_is_stub()
        mode = "builtin" if args.ring_stub else "ring"
    elif mode == "ring" and ring_is_stub():
        raise ValueError(f"{flag} ring: Assignment 1's ring_all_reduce is not written yet "
                         f"(it raises NotImplementedError); write it, or use {flag} builtin")
    setattr(args, attr, mode)
    return mode


def _max_over_ranks(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _gather_ints(value: int, device) -> list[int]:
    t = torch.tensor([int(value)], dtype=torch.int64, device=device)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [int(x.item()) for x in out]


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Integers up to 2^24 are exact in float32 (24-bit significand); sums above it round.
FP32_EXACT_INTEGERS = 2**24


def exact_data_period(elements: int, n: int) -> int:
    """Rank ``r`` holds ``(r+1) (i mod m)`` for ``i < elements``: the largest period ``m`` for
    which every sum over ``n`` ranks, at most ``(m-1) n (n+1)/2``, stays below 2^24, so that
    float32 sums are exact in any order."""
    weight = n * (n + 1) // 2
    m = min(elements, FP32_EXACT_INTEGERS // weight)
    if m < 2:
        raise ValueError(f"nproc={n} is too many ranks for exact float32 sums of integer data")
    return m


def correctness_checks(ctx, elements: int) -> list[dict]:
    """Built-in collectives against their definitions, on integer-valued fp32 data whose sums
    stay exact (:func:`exact_data_period`)."""
    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    base = torch.arange(elements, dtype=torch.float32, device=dev) % exact_data_period(elements, n)
    x = base * (r + 1)  # rank r holds (r+1) * [0, 1, 2, ...]
    total = base * (n * (n + 1) // 2)

    ar = x.clone()
    dist.all_reduce(ar)
    err_ar = (ar - total).abs().max().item()

    ag = torch.empty(n * elements, dtype=torch.float32, device=dev)
    all_gather_single(ag, x)
    expected_ag = torch.cat([base * (k + 1) for k in range(n)])
    err_ag = (ag - expected_ag).abs().max().item()

    rs = torch.empty(elements // n, dtype=torch.float32, device=dev)
    reduce_scatter_single(rs, x)
    err_rs = (rs - total.chunk(n)[r]).abs().max().item()

    return [
        check_exact("all_reduce: largest error vs the elementwise sum", 0, _max_over_ranks(err_ar, dev), unit=""),
        check_exact("all_gather: largest error vs the concatenation", 0, _max_over_ranks(err_ag, dev), unit=""),
        check_exact("reduce_scatter: largest error vs this rank's chunk of the sum", 0,
                    _max_over_ranks(err_rs, dev), unit=""),
    ]


RING_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


RING_CHECKS = ("ring all-reduce vs dist.all_reduce: largest difference",
               "ring all-reduce: bytes each rank sends", "ring all-reduce: sequential steps")


def ring_checks(ctx, elements: int, dtype: torch.dtype = torch.float32) -> list[dict]:
    """The hand-written ring against ``dist.all_reduce`` on a ``dtype`` buffer, and its bytes
    and steps counted send by send against ``2 (n-1)/n`` of the buffer's bytes."""
    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    gen = torch.Generator().manual_seed(1000 + r)
    x = torch.randn(elements, generator=gen).to(device=dev, dtype=dtype)
    stats = RingStats()
    mine = ring_all_reduce(x.clone(), stats)
    ref = x.clone()
    dist.all_reduce(ref)
    diff = _max_over_ranks((mine - ref).abs().max().item(), dev)
    # Both sum the same n numbers per element in different orders: they may differ by a
    # few roundings (of this dtype) of the largest partial sum.
    bound = 4 * n * torch.finfo(dtype).eps * _max_over_ranks(ref.abs().max().item(), dev)
    padded = elements + stats.padding
    sent = _gather_ints(stats.bytes_sent, dev)
    steps = _gather_ints(stats.steps, dev)
    predicted = allreduce_bytes_per_rank(padded * x.element_size(), n) if n > 1 else 0
    c_bytes = check_exact("ring all-reduce: bytes each rank sends", predicted, max(sent))
    c_bytes["ok"] = c_bytes["ok"] and min(sent) == max(sent)
    c_steps = check_exact("ring all-reduce: sequential steps", ring_allreduce_steps(n) if n > 1 else 0,
                          max(steps), unit="steps")
    c_steps["ok"] = c_steps["ok"] and min(steps) == max(steps)
    return [
        check_at_most("ring all-reduce vs dist.all_reduce: largest difference", bound, diff),
        c_bytes,
        c_steps,
    ]


def _factor(op: str, n: int) -> float:
    if n == 1:
        return 0.0
    if op in ("all_reduce", "ring_all_reduce"):
        return ring_allreduce_factor(n)
    return allgather_factor(n) if op == "all_gather" else reduce_scatter_factor(n)


def sweep(ctx, sizes: list[int], iters: int, ring: bool = True) -> list[dict]:
    """Time each collective at each buffer size; algbw = size / time, busbw = algbw x factor
    (nccl-tests PERFORMANCE.md). ``size`` is the full buffer: all-reduce's buffer,
    all-gather's output, reduce-scatter's input."""
    n, dev = ctx.world_size, ctx.device
    rows = []
    for size in sizes:
        numel = size // 4
        buf = torch.zeros(numel, dtype=torch.float32, device=dev)  # zeros: repeated sums stay finite
        shard = torch.zeros(numel // n, dtype=torch.float32, device=dev)
        run = {
            "all_reduce": lambda: dist.all_reduce(buf),
            "all_gather": lambda: all_gather_single(buf, shard),
            "reduce_scatter": lambda: reduce_scatter_single(shard, buf),
            "ring_all_reduce": lambda: ring_all_reduce(buf),
        }
        for op in OPS if ring else OPS[:-1]:
            run[op]()  # warm-up (first use of a size allocates and connects)
            dist.barrier()
            _sync(dev)
            t0 = time.perf_counter()
            for _ in range(iters):
                run[op]()
            _sync(dev)
            seconds = _max_over_ranks((time.perf_counter() - t0) / iters, dev)
            algbw = size / seconds
            rows.append({"op": op, "bytes": size, "seconds": seconds, "algbw": algbw,
                         "busbw": algbw * _factor(op, n)})
            ctx.log(f"timing: {op:<16} {size:>11,} bytes  busbw {algbw * _factor(op, n) / 1e9:.3f} GB/s")
    return rows


def _sizes(ctx, max_bytes: int) -> list[int]:
    quantum = 4 * ctx.world_size  # whole fp32 elements, divisible into n shards
    sizes, size = [], 1 << 12
    while size <= max_bytes:
        sizes.append(size // quantum * quantum)
        size *= 4
    return sizes


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.collectives", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("collectives")
    g.add_argument("--check-elements", type=int, default=4096,
                   help="elements per rank for the correctness checks (rounded to a multiple of nproc)")
    g.add_argument("--ring-elements", type=int, default=1 << 16,
                   help="elements of the buffer the hand-written ring reduces (any size; padded to a multiple of nproc)")
    g.add_argument("--ring-dtype", choices=tuple(RING_DTYPES), default="fp32",
                   help="element type of the ring's buffer (bytes are counted per element of this size)")
    g.add_argument("--max-bytes", type=int, default=None,
                   help="largest buffer in the bandwidth sweep (default 4 MiB on CPU, 256 MiB on GPU; 0 skips the sweep)")
    g.add_argument("--iters", type=int, default=None, help="timed repetitions per size (default 5 on CPU, 20 on GPU)")
    return parser


def validate(args, world_size: int) -> None:
    """Arguments checked before any rank starts."""
    if args.check_elements < 1 or args.ring_elements < 1:
        raise ValueError("--check-elements and --ring-elements must be >= 1")
    if args.max_bytes is not None and args.max_bytes < 0:
        raise ValueError(f"--max-bytes must be >= 0 (0 skips the sweep), got {args.max_bytes}")
    if args.iters is not None and args.iters < 1:
        raise ValueError(f"--iters must be >= 1, got {args.iters}")
    # Each rank holds a buffer, a shard and the collective's scratch copy: about 3 buffers.
    largest = max(args.max_bytes or 0, args.ring_elements * 4, args.check_elements * 4 * world_size)
    launch.check_fits_in_memory(3 * largest, world_size, "--max-bytes/--ring-elements/--check-elements",
                                getattr(args, "backend", "auto"))
    ring_is_stub()  # asked here, before the process group exists: the probe never sends


def worker(ctx, args) -> dict:
    n = ctx.world_size
    validate(args, n)
    check_elements = max(n, args.check_elements // n * n)
    on_gpu = ctx.device.type == "cuda"
    max_bytes = args.max_bytes if args.max_bytes is not None else (1 << 28 if on_gpu else 1 << 22)
    iters = args.iters if args.iters is not None else (20 if on_gpu else 5)
    ctx.log(f"rank 0 of {n}: checking collectives on {ctx.device.type}")
    ctx.maybe_fail(0)
    checks = correctness_checks(ctx, check_elements)
    ctx.maybe_fail(1)
    ring = not ring_is_stub()
    if ring:
        checks += ring_checks(ctx, args.ring_elements, RING_DTYPES[args.ring_dtype])
    else:  # the student release, before Assignment 1 is written
        ctx.log("ring all-reduce: not written yet (it is Assignment 1): its checks and timing are skipped")
        checks += [check_skipped(name, "ring_all_reduce is not written yet") for name in RING_CHECKS]
    ctx.maybe_fail(2)
    rows = sweep(ctx, _sizes(ctx, max_bytes), iters, ring) if max_bytes > 0 else []
    return {
        "config": {"check_elements": check_elements, "ring_elements": args.ring_elements,
                   "max_bytes": max_bytes, "iters": iters, "dtype": "fp32", "ring_dtype": args.ring_dtype},
        "checks": checks,
        "sweep": rows,
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
