"""Assignment 3's grader: a sharded AdamW, ZeRO stages 1 and 2 (Rajbhandari et al. 2020).

The student writes ``ShardedAdamW(params, lr, betas, eps, weight_decay, stage)``. The
parameters, flattened in order into one vector of P elements (P a multiple of the world
size n), are cut into n equal shards; rank r owns elements ``[r P/n, (r+1) P/n)``. Each
``step()``, after every rank's own backward pass:

* stage 2 reduce-scatters the flat gradient (``dist.reduce_scatter_single``): rank r
  receives only the sum of its shard's gradients; stage 1 all-reduces the whole flat
  gradient and keeps its shard's slice;
* the sum is divided by n (the mean over ranks), AdamW steps the shard, with state
  (``exp_avg``, ``exp_avg_sq``) for the shard only;
* the updated shards are all-gathered (``dist.all_gather_single``) into every rank's
  parameters.

Graded at world sizes 2 and 4 and three seeds, on real gloo ranks (``sandbox.multirank``):

* **result**, for each stage: the parameters after each of k steps equal one process's
  AdamW on the whole global batch (L2 difference at most ``PARAM_TOL`` of the L2 of the
  update); a wrong result is looked at after the first step, where a shard stepped by the
  wrong rank or never gathered shows plainly;
* **state**: the elements of every tensor the optimizer object holds between steps (the
  model's parameters and gradients excepted) are at most ``STATE_SHARDS`` shard sizes (the
  two moments and a float32 copy of the shard): a full AdamW state is 2P, 2n shards;
* **traffic**, for each stage: bytes each rank sends, from the course's collective counter
  through ``solutions.communication``: stage 2 a reduce-scatter and an all-gather of the
  P-element buffer per step, ``2 (n-1)/n`` of it; stage 1 an all-reduce and an all-gather,
  ``3 (n-1)/n``.
"""
from __future__ import annotations

import types

import numpy as np

from solutions.communication import (allgather_bytes_per_rank, allreduce_bytes_per_rank,
                                     reduce_scatter_bytes_per_rank)

from .a2_ddp import EPS, LAYERS, LR, SEEDS, STEPS, WEIGHT_DECAY, WORLD_SIZES, data, flat, make_model
from .common import Report, decode, encode, grade_case_by_case, grade_submitted, load_function, warm_up
from .common import self_check as run_self_check

NAME = "Assignment 3: ZeRO-1 and ZeRO-2, a sharded AdamW"
CLASS = "ShardedAdamW"
STAGES = (2, 1)
PARAM_TOL = 1e-4
#: Shard-sized tensors the optimizer may hold: exp_avg, exp_avg_sq and a copy of the shard.
STATE_SHARDS = 3
POINTS = {"result2": 3, "result1": 2, "state": 2, "traffic2": 2, "traffic1": 1}
TITLES = {
    "result2": "stage 2: parameters after k steps = one process's AdamW",
    "result1": "stage 1: parameters after k steps = one process's AdamW",
    "state": "optimizer state per rank = 1/n of AdamW's",
    "traffic2": "stage 2 bytes sent: reduce-scatter + all-gather = 2(n-1)/n of the parameters",
    "traffic1": "stage 1 bytes sent: all-reduce + all-gather = 3(n-1)/n of the parameters",
}
#: The counter's name for each collective, and the formula of the bytes a rank sends.
FORMULAS = {"all_reduce": allreduce_bytes_per_rank, "reduce_scatter": reduce_scatter_bytes_per_rank,
            "all_gather": allgather_bytes_per_rank}
EXPECTED_CALLS = {2: ("reduce_scatter", "all_gather"), 1: ("all_reduce", "all_gather")}


def baseline(n: int, seed: int, salt: int) -> list:
    """One process's AdamW on the whole global batch: the flat parameters before and after
    each step (``STEPS + 1`` vectors)."""
    import torch

    model = make_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    x, y = data(n, seed, salt)
    out = [flat(model.parameters())]
    for step in range(STEPS):
        xs = torch.from_numpy(x[step].reshape(-1, LAYERS[0]))
        ys = torch.from_numpy(y[step].reshape(-1, LAYERS[-1]))
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
        opt.zero_grad()
        out.append(flat(model.parameters()))
    return out


# ----------------------------------------------------------------------------- inside a rank

def held_elements(obj, exclude: set, limit: int = 20000) -> int:
    """Elements of every distinct tensor storage reachable from ``obj`` through attributes,
    dicts, lists, tuples and sets (a view counts its whole storage), except the storages in
    ``exclude`` (data pointers)."""
    import torch

    seen_obj, seen_storage, total, todo = set(), set(), 0, [obj]
    while todo and len(seen_obj) < limit:
        o = todo.pop()
        if id(o) in seen_obj:
            continue
        seen_obj.add(id(o))
        if isinstance(o, torch.Tensor):
            storage = o.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in exclude and ptr not in seen_storage:
                seen_storage.add(ptr)
                total += storage.nbytes() // max(o.element_size(), 1)
            continue
        if isinstance(o, dict):
            todo += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo += list(o)
        elif (hasattr(o, "__dict__") and not callable(o)
              and not isinstance(o, (type, types.ModuleType, types.FrameType))):
            todo += list(vars(o).values())
    return total


def train(cls, rank: int, n: int, seed: int, salt: int, stage: int) -> dict:
    import torch
    import torch.distributed as dist

    from .common import traffic_counter

    model = make_model(seed)
    params = list(model.parameters())
    opt = cls(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY, stage=stage)
    x, y = data(n, seed, salt)
    counter = traffic_counter()
    history = []
    with counter:
        for step in range(STEPS):
            xs = torch.from_numpy(x[step, rank].reshape(-1, LAYERS[0]))
            ys = torch.from_numpy(y[step, rank].reshape(-1, LAYERS[-1]))
            torch.nn.functional.mse_loss(model(xs), ys).backward()
            opt.step()
            opt.zero_grad()
            for p in params:
                p.grad = None
            history.append(encode(flat(params)))
    dist.barrier()
    exclude = {p.untyped_storage().data_ptr() for p in params}
    return {"params": history, "state": held_elements(opt, exclude),
            "bytes": {k: int(v) for k, v in counter.bytes.items()},
            "calls": {k: int(v) for k, v in counter.calls.items()}}


# ----------------------------------------------------------------------------- the grader's side

def _update_error(w, before, after) -> float:
    return float(np.linalg.norm(w - after) / max(np.linalg.norm(after - before), 1e-30))


def check_result(m: dict, rank: int, n: int, ref: list) -> str | None:
    history = m.get("params")
    size = ref[0].size
    if not isinstance(history, list) or len(history) != STEPS:
        return "not every step reported the parameters"
    for step, text in enumerate(history):
        w = decode(text, size) if isinstance(text, str) else None
        if w is None:
            return f"step {step}: the parameters came back malformed"
        err = _update_error(w, ref[step], ref[step + 1])
        if err <= PARAM_TOL:
            continue
        if step == 0:
            why = _diagnose_first_step(w, rank, n, ref)
            if why:
                return why
        return (f"after step {step + 1} the parameters differ from one process's by {err:.2g} of the "
                f"update (at most {PARAM_TOL:g} allowed)")
    return None


def _diagnose_first_step(w, rank, n, ref) -> str | None:
    """Name the mistake from the parameters after the first step, shard by shard."""
    before, after = ref[0], ref[1]
    shards = np.split(np.arange(w.size), n)
    own_stale = []
    for j, idx in enumerate(shards):
        if _update_error(w[idx], before[idx], after[idx]) <= PARAM_TOL:
            continue
        if np.allclose(w[idx], before[idx], rtol=0, atol=1e-7):
            own_stale.append(j)
            continue
        # a shard at position j (gathered from rank j) holding the elements of another shard
        dist_to = [np.linalg.norm(w[idx] - after[other]) for other in shards]
        m = int(np.argmin(dist_to))
        if m != j and dist_to[m] < 0.5 * np.linalg.norm(w[idx] - after[idx]):
            return (f"rank {j}'s shard holds the elements of shard {m}: rank r owns elements "
                    f"r·P/n to (r+1)·P/n (here {idx[0]} to {idx[-1] + 1} for rank {j})")
    if own_stale and rank not in own_stale and len(own_stale) == n - 1:
        return (f"on rank {rank} the parameters outside its own shard did not change: all-gather the "
                "updated shards into every rank's parameters")
    if own_stale:
        return (f"shards {own_stale} did not change on rank {rank}: every shard must be stepped by "
                "its rank and gathered")
    return None


def check_traffic(m: dict, n: int, stage: int, numel: int) -> str | None:
    counted = m.get("bytes")
    if not isinstance(counted, dict):
        return "no traffic came back"
    total = 4 * numel
    sent = sum(float(FORMULAS[k](v, n)) for k, v in counted.items() if k in FORMULAS and isinstance(v, int) and v > 0)
    predicted = STEPS * sum(float(FORMULAS[k](total, n)) for k in EXPECTED_CALLS[stage])
    if abs(sent - predicted) < 0.5:
        return None
    per_step = {k: v / (STEPS * total) for k, v in counted.items() if isinstance(v, int) and v > 0}
    seen = ", ".join(f"{k} {r:.3g} x" for k, r in sorted(per_step.items())) or "no collective"
    want = " + ".join(EXPECTED_CALLS[stage])
    why = ""
    if not counted.get("all_gather"):
        why = ": no all-gather (dist.all_gather_single), so the updated shards never reach the other ranks"
    elif stage == 2 and counted.get("all_reduce"):
        why = ": stage 2 reduce-scatters the gradients (dist.reduce_scatter_single) instead of all-reducing them"
    elif stage == 1 and counted.get("reduce_scatter"):
        why = ": stage 1 all-reduces the whole gradient and keeps its shard"
    return (f"stage {stage}: sent {sent:,.0f} bytes in {STEPS} steps (per step: {seen} the parameters); "
            f"{want} of the parameters per step = {predicted:,.0f}{why}")


def check_state(m: dict, n: int, numel: int) -> str | None:
    """The optimizer's state on one rank: at most ``STATE_SHARDS`` shards of P/n elements."""
    shard = numel // n
    held = m.get("state")
    if not isinstance(held, int):
        return "no state size came back"
    if held > STATE_SHARDS * shard + 64:
        return (f"the optimizer holds {held:,} elements = {held / shard:.3g} shards of P/n = {shard:,} (a full "
                f"AdamW state is 2P = {2 * n} shards): keep exp_avg and exp_avg_sq for your shard only (at most "
                f"{STATE_SHARDS} shard-sized tensors)")
    return None


def grade(get_class, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``get_class()`` (called inside each rank) at each world size, both stages."""
    from sandbox.multirank import Limits

    numel = sum(p.numel() for p in make_model(0).parameters())

    def check(n, case, rank, m, ref) -> dict:
        stage = case[0]
        fails = {f"result{stage}": check_result(m, rank, n, ref), f"traffic{stage}": check_traffic(m, n, stage, numel),
                 "state": check_state(m, n, numel)}
        return {part: text for part, text in fails.items() if text}

    return grade_case_by_case(
        NAME, TITLES, POINTS, get_class, lambda cls, rank, n, case, salt: train(cls, rank, n, case[1], salt, case[0]),
        [(stage, seed) for stage in STAGES for seed in seeds],
        describe=lambda case: f"stage {case[0]}, seed {case[1]}",
        reference=lambda n, case: baseline(n, case[1], salt), check=check,
        earns_after={"state": (("result1", "result2"), "earns its points once the parameters are right")},
        world_sizes=world_sizes, salt=salt, quiet=quiet, limits=limits or Limits(wall_s=60.0, stall_s=5.0),
        isolate=isolate, warm=warm)


def warm() -> None:
    """Run, before the ranks are forked (and in each rank before it drops its privileges),
    what a rank uses, so no import happens later."""
    import torch

    from .common import traffic_counter

    warm_up()
    shard = torch.zeros(8, requires_grad=True)
    opt = torch.optim.AdamW([shard], lr=LR, weight_decay=WEIGHT_DECAY)
    with traffic_counter():
        shard.grad = torch.ones(8)
        opt.step()
    held_elements(opt, set())
    import torch.distributed as dist

    if dist.is_initialized():  # in a rank: each collective's first call, while it may still read files
        n = dist.get_world_size()
        with traffic_counter():
            dist.reduce_scatter_single(torch.zeros(1), torch.zeros(n))
            dist.all_gather_single(torch.zeros(n), torch.zeros(1))
            dist.all_reduce(torch.zeros(1))
        dist.barrier()


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file (fresh inputs unless ``salt`` is given)."""
    return grade_submitted(path, NAME, TITLES, POINTS, lambda sources: load_function(sources, CLASS), grade, **kwargs)


def self_check(cls, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``cls`` (defined in this notebook) and print its report; the ranks
    are forked from this process, so they have the class. Returns the score."""
    return run_self_check(grade, lambda: cls, world_sizes, seeds)
