"""Assignment 3 inside a rank: train Assignment 2's model with the student's
``ShardedAdamW`` for a few steps on this rank's own data, and report the parameters after
each step and what the optimizer object holds between steps (see :mod:`.rank_common`).
The *memory probes* train a wide layer instead and stop at a checkpoint where the grader
measures, from outside the rank, what the rank holds (see :func:`prepare_probe`)."""
from __future__ import annotations

import types

import numpy as np

from .a2_rank import EPS, LAYERS, LR, STEPS, WEIGHT_DECAY, build_model, flat, own_data
from .rank_common import Stopped, call_counter, encode, marker, one_case, student, unpack

#: AdamW's betas per seed: the class takes them, so the grader hands them on, and not always
#: AdamW's defaults (the self-check's seed, the first, has others). The first step's update
#: does not depend on them; the second and third do, by far more than the results' bound.
BETAS = ((0.8, 0.99), (0.9, 0.999), (0.85, 0.995))


def betas_for(seed: int) -> tuple:
    return BETAS[seed % len(BETAS)]


#: Steps of a memory probe: AdamW's state exists after the first; the second shows that it
#: is kept, not rebuilt.
PROBE_STEPS = 2
#: Every how many of the probe layer's weights one is reported after the steps.
PROBE_STRIDE = 512


def probe_input(stage: int, rank: int):
    """A rank's own batch for the probe of ``stage`` (drawn as the grader draws it)."""
    import torch

    generator = torch.Generator().manual_seed(1000 + 10 * stage + rank)
    return torch.randn(4, 1024, generator=generator)

#: The held tensors a rank reports with their values (those of the model's size: the grader
#: names what they are).
MAX_HELD = 12


def held_tensors(obj, exclude: set, limit: int = 20000) -> list:
    """Every distinct tensor storage and float numpy array reachable from ``obj``: through
    attributes, dicts, lists, tuples and sets, the closures, defaults and globals of the
    functions it holds, and the class attributes of the student's classes (a view counts
    its whole storage); except the storages in ``exclude`` (data pointers). ``[(elements,
    flat float32 values)]``."""
    import torch

    seen_obj, seen_storage, found, todo = set(), set(), [], [obj]
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
                whole = torch.empty(0, dtype=o.dtype).set_(storage) if o.dtype.is_floating_point else o
                found.append(whole.detach().reshape(-1).to(torch.float32).numpy().copy())
            continue
        if isinstance(o, np.ndarray):
            if o.dtype.kind == "f" and o.size:
                found.append(np.asarray(o, dtype=np.float32).reshape(-1).copy())
            continue
        if isinstance(o, (types.ModuleType, types.FrameType)):
            continue
        if isinstance(o, dict):
            todo += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo += list(o)
        elif isinstance(o, types.FunctionType):
            todo += [c.cell_contents for c in (o.__closure__ or ()) if _filled(c)]
            todo += list(o.__defaults__ or ())
            if o.__globals__.get("__name__") == "submission":
                todo.append(o.__globals__)
        elif isinstance(o, types.MethodType):
            todo += [o.__self__, o.__func__]
        elif isinstance(o, type):
            if getattr(o, "__module__", "") == "submission":
                todo += list(vars(o).values())
        elif hasattr(o, "__dict__"):
            todo += list(vars(o).values())
            todo.append(type(o))
    return [(int(a.size), a) for a in found]


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def train(cls, seed: int, stage: int, x, y, mark=lambda label, point: None) -> dict:
    """k AdamW steps of the student's optimizer on this rank's own data (``x``, ``y``: the
    grader sends a rank its own samples only); ``mark`` checkpoints after each step."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(seed)
    model = build_model()
    params = list(model.parameters())
    opt = cls(model.parameters(), lr=LR, betas=betas_for(seed), eps=EPS, weight_decay=WEIGHT_DECAY, stage=stage)
    counter = call_counter()
    history = []
    with counter:
        for step in range(STEPS):
            xs = torch.from_numpy(x[step].reshape(-1, LAYERS[0]).copy())
            ys = torch.from_numpy(y[step].reshape(-1, LAYERS[-1]).copy())
            torch.nn.functional.mse_loss(model(xs), ys).backward()
            opt.step()
            opt.zero_grad()
            for p in params:
                p.grad = None
            history.append(encode(flat(params)))
            mark("step", step)
    dist.barrier()
    exclude = {p.untyped_storage().data_ptr() for p in params}
    held = held_tensors(opt, exclude)
    numel = sum(p.numel() for p in params)
    shown = [a for size, a in held if size in (numel, 2 * numel)][:MAX_HELD]
    return {"params": history, "held": [size for size, _ in held][:1000],
            "values": [encode(a) for a in shown],
            "bytes": {k: int(v) for k, v in counter.bytes.items()},
            "calls": {k: int(v) for k, v in counter.calls.items()}}


def probe_model(numel: int, stage: int = 0):
    """The memory probes' model: one layer of ``numel`` weights (1,024 inputs), drawn from a
    generator of its own seeded with ``stage``."""
    import torch

    # skip_init: no draw from torch's global generator (other grading threads use it)
    layer = torch.nn.utils.skip_init(torch.nn.Linear, 1024, numel // 1024, bias=False)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(stage)
        layer.weight.uniform_(-1 / 32, 1 / 32, generator=generator)
    return layer


def prepare_probe(numel: int) -> None:
    """Before the group's ``start`` memory checkpoint, and before the student's code is
    loaded: make what this rank holds measurable from outside, and run once what a probe
    may run, so that only the optimizer's own state is new at its ``end`` checkpoint. Large
    blocks are given their own pages and returned when freed (glibc's ``mallopt``: a fixed
    mmap threshold, not one that grows with every large free, and the heap trimmed), and the
    first calls of the probe's layer, AdamW and every collective a ZeRO optimizer may use
    leave behind what they keep (small collectives are enough: what gloo keeps does not
    grow with the size; the ranks' traffic stays small where the grader captures it)."""
    import ctypes
    import gc

    import torch
    import torch.distributed as dist

    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    model, x = probe_model(numel), probe_input(0, 0)
    model(x).square().mean().backward()
    torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY).step()
    n = dist.get_world_size()
    flat, shard = torch.zeros(1024 * n), torch.zeros(1024)
    dist.all_reduce(flat)
    dist.reduce_scatter_single(shard, flat)
    dist.all_gather_single(flat, shard)
    dist.reduce_scatter(shard, list(flat.chunk(n)))
    dist.all_gather(list(flat.chunk(n)), shard)
    dist.broadcast(shard, 0)
    dist.reduce(shard, 0)
    dist.barrier()
    del model, x, flat, shard
    gc.collect()
    libc.malloc_trim(0)


def probe(cls, stage: int, numel: int, ctx, index: int) -> dict:
    """Train the wide layer ``PROBE_STEPS`` steps with the student's optimizer on this rank's
    own batch, then wait at the ``end`` memory checkpoint (the optimizer alive, the gradients
    freed) while the grader measures; report every ``PROBE_STRIDE``-th weight after the first
    step (the grader checks it was AdamW's, on the rank's shard at least: an optimizer that
    holds little because it does not do the work earns nothing here); then let it all go."""
    import gc


    import torch.distributed as dist

    model, x = probe_model(numel, stage), probe_input(stage, dist.get_rank())
    opt = cls(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY, stage=stage)
    for step in range(PROBE_STEPS):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        for p in model.parameters():
            p.grad = None
        if step == 0:
            sample = model.weight.detach().reshape(-1)[::PROBE_STRIDE].numpy().copy()
        if ctx.checkpoint("probe", case=index, point=step) == "stop":  # the grader cuts the traffic here
            raise Stopped("probe")
    gc.collect()
    answer = ctx.checkpoint("memory", case=index, point="end", measure="memory")
    del opt, model, x
    gc.collect()
    if answer == "stop":
        raise Stopped("memory")
    return {"probe": stage, "sample": encode(sample)}


def main(ctx) -> None:
    header, arrays = unpack(ctx.payload)
    numel = int(header.get("probe") or 0)
    if numel:
        prepare_probe(numel)
        if ctx.checkpoint("memory", point="start", measure="memory") == "stop":
            return
    cls = student(ctx, "ShardedAdamW")
    if cls is None:
        return
    for k, index in enumerate(header["cases"]):
        def work(k=k, index=index):
            stage, seed = header["runs"][index]
            if stage == "memory":  # (a world size the grader probes at; elsewhere nothing to do)
                return probe(cls, seed, numel, ctx, index) if numel else {"probe": None}
            return train(cls, seed, stage, *own_data(arrays, k), marker(ctx, index))

        if not one_case(ctx, index, work):
            return


def warm() -> None:
    """What a rank uses, run once before it may lose the right to read files: AdamW's step,
    the state walk and, in a rank, each collective's first call."""
    import torch
    import torch.distributed as dist

    shard = torch.zeros(8, requires_grad=True)
    opt = torch.optim.AdamW([shard], lr=LR, weight_decay=WEIGHT_DECAY)
    with call_counter():
        shard.grad = torch.ones(8)
        opt.step()
    held_tensors(opt, set())
    if dist.is_initialized():
        n = dist.get_world_size()
        with call_counter():
            dist.reduce_scatter_single(torch.zeros(1), torch.zeros(n))
            dist.all_gather_single(torch.zeros(n), torch.zeros(1))
            dist.all_reduce(torch.zeros(1))
        dist.barrier()
