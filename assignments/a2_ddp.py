"""Assignment 2's grader: data parallelism by hand, with gradient buckets that overlap the
backward pass (Li et al. 2020, the design of PyTorch's DDP).

The student writes a class ``BucketedDDP(model, bucket_bytes)``:

* it groups the parameters into buckets, walking them in *reverse* order of
  ``model.parameters()`` (the order the backward pass produces their gradients) and
  closing a bucket once it holds at least ``bucket_bytes`` bytes of gradients;
* a gradient hook (``Tensor.register_post_accumulate_grad_hook``) counts the gradients a
  bucket has received; when the bucket is full it starts its all-reduce with
  ``dist.all_reduce(..., async_op=True)`` and goes on (the backward pass of the earlier
  layers runs while the bucket travels);
* ``finish_gradient_synchronization()`` waits for every bucket and leaves the mean over the
  ranks in each ``.grad``; the grader calls it before ``optimizer.step()``;
* inside ``with ddp.no_sync():`` no all-reduce starts, and the gradients accumulate locally
  (micro-batches); the first backward pass after it synchronises the sum.

The grader runs k AdamW steps of M micro-batches on each rank of a real gloo group
(``sandbox.multirank``) and, at world sizes 2 and 4 and three seeds (a bucket size per
seed), checks:

* **result**: after each step's synchronisation the gradients equal those of one process
  on the whole global batch (relative L2 difference at most ``GRAD_TOL``), and after k
  steps the parameters do (L2 difference at most ``PARAM_TOL`` of the L2 of the update);
* **traffic**: bytes each rank sends, from the course's collective counter
  (``labs.training.CollectiveCounter``, which records each all-reduce's buffer) through
  ``solutions.communication.allreduce_bytes_per_rank``: ``2(n-1)/n`` of the gradient bytes,
  once per step;
* **buckets**: the all-reduced buffers have the sizes of the reverse-order buckets;
* **overlap**: seen from the order of events in each rank (the grader's own gradient hooks,
  the counter's record of each all-reduce, the waits): every all-reduce is asynchronous,
  starts as soon as its bucket is full and not before, the first starts before the backward
  pass ends, and each is waited for before the optimizer step;
* **no_sync**: no all-reduce during a ``no_sync`` micro-batch.
"""
from __future__ import annotations

import contextlib

import numpy as np

from solutions.communication import allreduce_bytes_per_rank

from .common import Report, decode, encode, grade_case_by_case, grade_submitted, load_function, warm_up
from .common import self_check as run_self_check

NAME = "Assignment 2: DDP by hand"
CLASS = "BucketedDDP"
WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
#: The model: Linear(16, 32) - tanh - Linear(32, 24) - tanh - Linear(24, 8), P = 1536.
#: Its parameters' sizes differ, so buckets in forward and in reverse order differ.
LAYERS = (16, 32, 24, 8)
STEPS, MICRO, BATCH = 3, 2, 4  # optimizer steps, micro-batches per step, samples per micro-batch
#: AdamW's settings. eps is larger than the usual 1e-8 so that a gradient entry near zero,
#: where float32 roundings in another summation order are a large fraction of it, cannot
#: swing its update (lr g / (|g| + eps) is smooth near g = 0 at this eps): the comparison
#: with one process then measures the submission, not the roundings.
LR, WEIGHT_DECAY, EPS = 1e-2, 0.1, 1e-4
#: Bucket size per seed (bytes): 3, 2 and 2 buckets for this model.
BUCKET_BYTES = (512, 1024, 4096)
#: One process and n ranks add the same gradients in another order: about 1e-7 apart in
#: float32; a mistake moves them by far more than these bounds.
GRAD_TOL = 1e-5
PARAM_TOL = 1e-4
POINTS = {"result": 3, "traffic": 2, "buckets": 2, "overlap": 2, "no_sync": 1}
TITLES = {
    "result": "gradients and parameters after k AdamW steps = one process",
    "traffic": "bytes each rank sends = 2(n-1)/n of the gradients, once per step",
    "buckets": "buckets of bucket_bytes in reverse parameter order",
    "overlap": "each bucket's all-reduce starts asynchronously as soon as it is full",
    "no_sync": "no all-reduce inside no_sync",
}


def bucket_bytes_for(seed: int) -> int:
    return BUCKET_BYTES[seed % len(BUCKET_BYTES)]


def make_model(seed: int):
    import torch

    torch.manual_seed(seed)
    layers = []
    for a, b in zip(LAYERS[:-1], LAYERS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def param_bytes(model) -> list:
    return [p.numel() * p.element_size() for p in model.parameters()]


def buckets(sizes: list, cap: int, reverse: bool = True) -> list:
    """Parameter indices of each bucket: walk the parameters (in reverse order unless
    ``reverse`` is False), close a bucket once it holds at least ``cap`` bytes."""
    order = range(len(sizes) - 1, -1, -1) if reverse else range(len(sizes))
    out, current, size = [], [], 0
    for i in order:
        current.append(i)
        size += sizes[i]
        if size >= cap:
            out.append(current)
            current, size = [], 0
    return out + ([current] if current else [])


def data(n: int, seed: int, salt: int):
    """Inputs and targets, shape ``(STEPS, n, MICRO, BATCH, features)``."""
    rng = np.random.default_rng([seed, n, salt])
    x = rng.standard_normal((STEPS, n, MICRO, BATCH, LAYERS[0])).astype(np.float32)
    y = rng.standard_normal((STEPS, n, MICRO, BATCH, LAYERS[-1])).astype(np.float32)
    return x, y


def flat(tensors) -> np.ndarray:
    return np.concatenate([t.detach().reshape(-1).numpy() for t in tensors]).astype(np.float32)


def baseline(n: int, seed: int, salt: int):
    """One process on the whole global batch: per-step gradients, start and end parameters."""
    import torch

    model = make_model(seed)
    start = flat(model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    x, y = data(n, seed, salt)
    grads = []
    for step in range(STEPS):
        xs = torch.from_numpy(x[step].reshape(-1, LAYERS[0]))
        ys = torch.from_numpy(y[step].reshape(-1, LAYERS[-1]))
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        grads.append(flat(p.grad for p in model.parameters()))
        opt.step()
        opt.zero_grad()
    return grads, start, flat(model.parameters())


# ----------------------------------------------------------------------------- inside a rank

def event_counter(events: list):
    """The course's counter (``labs.training.CollectiveCounter``), also writing each
    all-reduce into ``events`` as ``["ar", bytes, async_op]`` at the moment it starts."""
    import torch
    from labs.training import CollectiveCounter, _nbytes

    allreduce = torch.ops.c10d.allreduce_

    class EventCounter(CollectiveCounter):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._overloadpacket is allreduce:
                asynchronous = (args[4] if len(args) > 4 else (kwargs or {}).get("async_op", True))
                events.append(["ar", _nbytes(args[0]), bool(asynchronous)])
            return super().__torch_dispatch__(func, types, args, kwargs)

    return EventCounter()


_REAL = {}


def watch_waits(events: list) -> None:
    """Wrap ``dist.all_reduce`` so that waiting on the work it returns writes ``["w", k]``
    (k: the k-th all-reduce started) into ``events``."""
    import torch.distributed as dist

    real = _REAL.setdefault("all_reduce", dist.all_reduce)
    started = [0]

    class Watched:
        def __init__(self, work, k):
            self._work, self._k = work, k

        def wait(self, *args, **kwargs):
            out = self._work.wait(*args, **kwargs)
            events.append(["w", self._k])
            return out

        def __getattr__(self, name):
            return getattr(self._work, name)

    def all_reduce(*args, **kwargs):
        k = started[0]
        started[0] += 1
        events.append(["a", k])
        work = real(*args, **kwargs)
        return Watched(work, k) if work is not None else None

    dist.all_reduce = all_reduce


def train(cls, rank: int, n: int, seed: int, salt: int) -> dict:
    """k steps of M micro-batches with the student's ``cls``; what the grader checks."""
    import torch
    import torch.distributed as dist

    model = make_model(seed)
    events = []
    watch_waits(events)
    for i, p in enumerate(model.parameters()):  # before the student's: these run first
        p.register_post_accumulate_grad_hook(lambda _p, i=i: events.append(["g", i]))
    ddp = cls(model, bucket_bytes_for(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    x, y = data(n, seed, salt)
    counter = event_counter(events)
    grads = []
    with counter:
        for step in range(STEPS):
            for micro in range(MICRO):
                synced = micro == MICRO - 1
                events.append(["b", step, micro, synced])
                with (contextlib.nullcontext() if synced else ddp.no_sync()):
                    out = model(torch.from_numpy(x[step, rank, micro]))
                    loss = torch.nn.functional.mse_loss(out, torch.from_numpy(y[step, rank, micro])) / MICRO
                    loss.backward()
                events.append(["e"])
            ddp.finish_gradient_synchronization()
            events.append(["f"])
            grads.append(encode(flat(p.grad if p.grad is not None else torch.zeros_like(p)
                                     for p in model.parameters())))
            opt.step()
            opt.zero_grad()
    dist.barrier()
    return {"grads": grads, "params": encode(flat(model.parameters())), "events": events,
            "allreduce_bytes": int(counter.bytes.get("all_reduce", 0)),
            "calls": {k: int(v) for k, v in counter.calls.items()}}


# ----------------------------------------------------------------------------- the grader's side

def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_result(m: dict, n: int, ref) -> str | None:
    """Gradients per step and parameters after k steps against one process."""
    ref_grads, start, end = ref
    size = start.size
    for step, (text, g_ref) in enumerate(zip(m.get("grads") or [], ref_grads)):
        g = decode(text, size) if isinstance(text, str) else None
        if g is None:
            return f"step {step}: the gradients came back malformed"
        err = _rel(g, g_ref)
        if err <= GRAD_TOL:
            continue
        if _rel(g, n * g_ref) <= GRAD_TOL:
            return (f"step {step}: the gradients are {n} times one process's (the sum over the ranks): "
                    f"divide by the world size ({n}) to get the mean")
        if _rel(g, g_ref / n) <= GRAD_TOL:
            return f"step {step}: the gradients are divided by the world size twice"
        return (f"step {step}: the gradients differ from one process's by {err:.2g} (relative L2; "
                f"at most {GRAD_TOL:g} allowed)")
    if len(m.get("grads") or []) != STEPS:
        return "not every step reported its gradients"
    w = decode(m.get("params", ""), size)
    if w is None:
        return "the parameters came back malformed"
    moved = max(np.linalg.norm(end - start), 1e-30)
    err = float(np.linalg.norm(w - end) / moved)
    if err > PARAM_TOL:
        return (f"after {STEPS} AdamW steps the parameters differ from one process's by {err:.2g} of "
                f"the update (at most {PARAM_TOL:g} allowed)")
    return None


def check_events(m: dict, sizes: list, cap: int) -> dict:
    """Failures of the parts read from event order: ``{part: text}`` (absent: passed)."""
    expected = buckets(sizes, cap)
    exp_bytes = [sum(sizes[i] for i in b) for b in expected]
    fwd_bytes = [sum(sizes[i] for i in b) for b in buckets(sizes, cap, reverse=False)]
    events = m.get("events")
    if not isinstance(events, list):
        return {p: "no events came back" for p in ("buckets", "overlap", "no_sync")}
    out = {}
    synced = in_backward = False
    step = micro = 0
    ready, launched, launched_bytes = [], set(), []
    waits, pending = set(), []
    for e in events:
        if not isinstance(e, list) or not e:
            continue
        kind = e[0]
        if kind == "b" and len(e) == 4:
            _, step, micro, synced = e
            in_backward, ready, launched, launched_bytes = True, [], set(), []
        elif kind == "g" and len(e) == 2:
            ready.append(e[1])
        elif kind == "e":
            in_backward = False
            if synced and not launched_bytes:
                out.setdefault("overlap", f"step {step}: the first all-reduce starts only after the backward "
                                          "pass has ended: no overlap of communication with the backward pass")
        elif kind == "a" and len(e) == 2:
            if synced:
                pending.append(e[1])
        elif kind == "w" and len(e) == 2:
            waits.add(e[1])
        elif kind == "f":
            if synced:
                unwaited = [k for k in pending if k not in waits]
                if unwaited:
                    out.setdefault("overlap", f"step {step}: {len(unwaited)} all-reduce(s) not waited for "
                                              "before the optimizer step: wait for every bucket in "
                                              "finish_gradient_synchronization")
                if sorted(launched_bytes) != sorted(exp_bytes) and "buckets" not in out:
                    if sorted(launched_bytes) == sorted(fwd_bytes):
                        why = ("buckets in forward order: walk model.parameters() in reverse, the order "
                               "in which the backward pass produces the gradients")
                    elif len(launched_bytes) == 1 and launched_bytes[0] == sum(sizes):
                        why = "one all-reduce of every gradient: split them into buckets of bucket_bytes"
                    elif not launched_bytes:
                        why = "no all-reduce in the synchronising micro-batch"
                    else:
                        why = f"buckets of {sorted(exp_bytes)} bytes expected"
                    out["buckets"] = (f"bucket_bytes={cap}, step {step}: all-reduced buffers of "
                                      f"{sorted(launched_bytes)} bytes; {why}")
            pending = []
        elif kind == "ar" and len(e) == 3:
            nbytes, asynchronous = e[1], e[2]
            if not synced:
                out.setdefault("no_sync", f"step {step}, micro-batch {micro} (inside no_sync): an all-reduce "
                                          "started; inside no_sync the gradients only accumulate")
                continue
            launched_bytes.append(nbytes)
            if not asynchronous:
                out.setdefault("overlap", "dist.all_reduce without async_op=True: the backward pass waits "
                                          "for each bucket instead of going on")
            if not in_backward:
                out.setdefault("overlap", f"step {step}: a bucket's all-reduce started after the backward "
                                          "pass ended: start it from the gradient hook as soon as the "
                                          "bucket is full")
                continue
            match = [b for b, nb in enumerate(exp_bytes) if nb == nbytes and b not in launched]
            full = [b for b in match if all(i in ready for i in expected[b])]
            if full:
                b = full[0]
                launched.add(b)
                last = max(ready.index(i) for i in expected[b])
                if last != len(ready) - 1:
                    out.setdefault("overlap", f"step {step}: bucket {b} started {len(ready) - 1 - last} "
                                              "gradient(s) after it was full: start it from the hook of "
                                              "its last gradient")
            elif match:
                b = match[0]
                launched.add(b)
                have = sum(i in ready for i in expected[b])
                out.setdefault("overlap", f"step {step}: bucket {b} was all-reduced before it was full, when "
                                          f"{have} of its {len(expected[b])} gradients were ready: start it "
                                          "when its last gradient arrives")
    return out


def check_traffic(m: dict, n: int, total_bytes: int) -> str | None:
    counted = m.get("allreduce_bytes")
    if not isinstance(counted, int):
        return "no traffic came back"
    sent = float(allreduce_bytes_per_rank(counted, n)) if counted > 0 else 0.0
    predicted = STEPS * float(allreduce_bytes_per_rank(total_bytes, n))
    if abs(sent - predicted) < 0.5:
        return None
    ratio = counted / (STEPS * total_bytes)
    why = ""
    if abs(ratio - MICRO) < 1e-9:
        why = ": every micro-batch all-reduces, no_sync does not skip it"
    elif ratio == 0:
        why = ": no dist.all_reduce was seen"
    return (f"rank sent {sent:,.0f} bytes in {STEPS} steps (counted all-reduce buffers: {ratio:.3g} x "
            f"the gradients per step); 2(n-1)/n of the gradients once per step = {predicted:,.0f}{why}")


def grade(get_class, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``get_class()`` (called inside each rank) at each world size; a Report."""
    from sandbox.multirank import Limits

    sizes = param_bytes(make_model(0))

    def check(n, seed, rank, m, ref) -> dict:
        fails = {"result": check_result(m, n, ref), "traffic": check_traffic(m, n, sum(sizes))}
        fails.update(check_events(m, sizes, bucket_bytes_for(seed)))
        return {part: text for part, text in fails.items() if text}

    return grade_case_by_case(
        NAME, TITLES, POINTS, get_class, train, list(seeds), describe=lambda seed: f"seed {seed}",
        reference=lambda n, seed: baseline(n, seed, salt), check=check,
        earns_after={"no_sync": (("result",), "earns its point once the gradients are right")},  # doing nothing must not pass it
        world_sizes=world_sizes, salt=salt, quiet=quiet, limits=limits or Limits(wall_s=60.0, stall_s=5.0),
        isolate=isolate, warm=warm)


def warm() -> None:
    """Run once, before the ranks are forked (and in each rank before it drops its
    privileges), everything a rank uses, so no import happens later."""
    import torch

    warm_up()
    model = make_model(0)
    model[0].weight.register_post_accumulate_grad_hook(lambda p: None)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    with event_counter([]):
        torch.nn.functional.mse_loss(model(torch.zeros(2, LAYERS[0])), torch.zeros(2, LAYERS[-1])).backward()
        opt.step()
        opt.zero_grad()


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file (fresh inputs unless ``salt`` is given)."""
    return grade_submitted(path, NAME, TITLES, POINTS, lambda sources: load_function(sources, CLASS), grade, **kwargs)


def self_check(cls, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``cls`` (defined in this notebook) and print its report; the ranks
    are forked from this process, so they have the class. Returns the score."""
    return run_self_check(grade, lambda: cls, world_sizes, seeds)
