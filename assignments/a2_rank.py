"""Assignment 2 inside a rank: train the model with the student's ``BucketedDDP`` for a few
steps on this rank's own micro-batches, and report the gradients, the parameters and the
order of events (see :mod:`.rank_common`). Assignment 3's ranks use the same model and data."""
from __future__ import annotations

import contextlib

import numpy as np

from .rank_common import call_counter, encode, marker, one_case, student, unpack

#: The model: Linear(16, 32) - tanh - Linear(32, 24) - tanh - Linear(24, 8), P = 1536.
#: Its parameters' sizes differ, so buckets in forward and in reverse order differ.
LAYERS = (16, 32, 24, 8)
STEPS, MICRO, BATCH = 3, 2, 4  # optimizer steps, micro-batches per step, samples per micro-batch
#: Assignment 2's micro-batches per step, one count per seed (Assignment 3 steps after
#: ``MICRO``): a no_sync that works for one count only, or does nothing while the hooks
#: count two backward passes per step, shows at another; at 1 there is no no_sync at all.
MICROS = (3, 2, 1)
#: AdamW's settings. eps is larger than the usual 1e-8 so that a gradient entry near zero,
#: where float32 roundings in another summation order are a large fraction of it, cannot
#: swing its update (lr g / (|g| + eps) is smooth near g = 0 at this eps): the comparison
#: with one process then measures the submission, not the roundings.
LR, WEIGHT_DECAY, EPS = 1e-2, 0.1, 1e-4
#: Bucket size per seed (bytes): 3, 2 and 2 buckets for this model.
BUCKET_BYTES = (512, 1024, 4096)


def bucket_bytes_for(seed: int) -> int:
    return BUCKET_BYTES[seed % len(BUCKET_BYTES)]


def micro_for(seed: int) -> int:
    return MICROS[seed % len(MICROS)]


def build_model():
    """The model, its parameters drawn from torch's global generator (seed it first)."""
    import torch

    layers = []
    for a, b in zip(LAYERS[:-1], LAYERS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def data(n: int, seed: int, salt: int, micro: int = MICRO):
    """Inputs and targets, shape ``(STEPS, n, micro, BATCH, features)``."""
    rng = np.random.default_rng([seed, n, salt])
    x = rng.standard_normal((STEPS, n, micro, BATCH, LAYERS[0])).astype(np.float32)
    y = rng.standard_normal((STEPS, n, micro, BATCH, LAYERS[-1])).astype(np.float32)
    return x, y


def flat(tensors) -> np.ndarray:
    return np.concatenate([t.detach().reshape(-1).numpy() for t in tensors]).astype(np.float32)


#: Where the all-reduces started and waited for are written: the current run's events.
EVENTS = [[]]
#: Each all-reduce the current case has started: ``id(work) -> (work, k)`` (k: the k-th; the
#: work is kept, so its id is not reused by another, until the next case begins).
WORKS = {}


def launched(name: str, work) -> None:
    """The counter's ``started`` (:func:`~.rank_common.call_counter`): an all-reduce has
    been issued, whatever c10d function started it (``dist.all_reduce`` under any of its
    names, the process group's method, the operator itself); write ``["a", k]`` into the
    current events and remember its work. (torch's functional all-reduce returns no work and
    writes nothing here: where it is waited for, in its hook or after the step, shows at the
    hold checkpoint, as every all-reduce's does.)"""
    if name == "all_reduce" and work is not None and id(work) not in WORKS:
        k = len(WORKS)
        WORKS[id(work)] = (work, k)
        EVENTS[0].append(["a", k])


def watch_waits() -> None:
    """Make waiting on an all-reduce's work write ``["w", k]`` into the current events
    (:data:`EVENTS`; k as :func:`launched` numbered it): ``Work.wait`` itself, on the class,
    so the work counts whatever function returned it, and its future too:
    ``work.get_future().wait()``, a future chained on it with ``then``, and
    ``torch.futures.wait_all`` or ``collect_all`` of such futures (DDP's communication hooks
    wait this way). Done before the student's code is loaded."""
    import torch
    import torch.futures

    Work = torch._C._distributed_c10d.Work

    def waited(ks) -> None:
        EVENTS[0].extend(["w", k] for k in ks)

    def number(work):
        entry = WORKS.get(id(work))
        return entry[1] if entry is not None and entry[0] is work else None

    class WatchedFuture:
        def __init__(self, future, ks):
            self._future, self._ks = future, tuple(ks)

        def wait(self, *args, **kwargs):
            out = self._future.wait(*args, **kwargs)
            waited(self._ks)
            return out

        def then(self, *args, **kwargs):
            return WatchedFuture(self._future.then(*args, **kwargs), self._ks)

        def __getattr__(self, name):
            return getattr(self._future, name)

    def unwrap(futures):
        futures = list(futures)
        ks = [k for f in futures if isinstance(f, WatchedFuture) for k in f._ks]
        return [f._future if isinstance(f, WatchedFuture) else f for f in futures], ks

    real_wait_all, real_collect_all = torch.futures.wait_all, torch.futures.collect_all
    real_wait, real_get_future = Work.wait, Work.get_future

    def wait_all(futures):
        plain, ks = unwrap(futures)
        out = real_wait_all(plain)
        waited(ks)
        return out

    def collect_all(futures):
        plain, ks = unwrap(futures)
        return WatchedFuture(real_collect_all(plain), ks)

    def wait(self, *args, **kwargs):
        out = real_wait(self, *args, **kwargs)
        k = number(self)
        if k is not None:
            waited([k])
        return out

    def get_future(self):
        future = real_get_future(self)
        k = number(self)
        return future if k is None else WatchedFuture(future, [k])

    Work.wait, Work.get_future = wait, get_future
    torch.futures.wait_all, torch.futures.collect_all = wait_all, collect_all


def refuse_built_in_ddp() -> None:
    """torch's DistributedDataParallel does what the assignment asks the class to do (buckets,
    hooks, asynchronous all-reduces, no_sync): in a rank it, and the C++ ``Reducer`` it and
    ``replicate`` are built on, refuse to be built, in one line. Done before the student's
    code is loaded."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def refuse(self, *args, **kwargs):
        raise RuntimeError("torch's DistributedDataParallel (or its Reducer) is what BucketedDDP is to be: "
                           "write the buckets, the gradient hooks and their all-reduces yourself")

    DistributedDataParallel.__init__ = refuse
    dist.Reducer.__init__ = refuse


def own_data(arrays: list, k: int):
    """This rank's inputs and targets of its ``k``-th case, ``(STEPS, micro-batches, BATCH,
    features)`` each: the grader sends a rank its own micro-batches only."""
    x = arrays[2 * k].reshape(STEPS, -1, BATCH, LAYERS[0])
    y = arrays[2 * k + 1].reshape(STEPS, -1, BATCH, LAYERS[-1])
    return x, y


def hold_points(model, cap: int, events: list) -> dict:
    """Where the grader holds the ranks in the synchronising micro-batch (a rank that goes on
    while a peer is held back before its first bucket's all-reduce does not wait in the
    hook): ``A``, the parameter of the first bucket's last gradient, and ``B``, that of the
    gradient after it (None: B is the backward pass's end), in the order the first
    micro-batch produced them (``events``)."""
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    order = [e[1] for e in events if e and e[0] == "g"][:len(sizes)]
    first, total = [], 0
    for i in range(len(sizes) - 1, -1, -1):  # the first bucket: reverse order, closed at cap
        first.append(i)
        total += sizes[i]
        if total >= cap:
            break
    if sorted(order) != list(range(len(sizes))):
        return {}
    last = max(order.index(i) for i in first)
    return {"A": order[last], "B": order[last + 1] if last + 1 < len(order) else None, "next": "A"}


def train(cls, seed: int, x, y, mark=lambda label, point: None) -> dict:
    """k steps of M micro-batches of this rank's own data (``x``, ``y``) with the student's
    ``cls``; what the grader checks. ``mark(label, point)`` is a checkpoint, where the grader
    cuts the traffic it sees: after each micro-batch's backward pass and after each step's
    synchronisation."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(seed)
    model = build_model()
    micros = x.shape[1]  # micro-batches per step (micro_for(seed))
    events = EVENTS[0] = []
    WORKS.clear()  # the k of ["a", k] counts this case's all-reduces; earlier cases' works are let go
    hold = {}  # the synchronising micro-batch of step 0: where the grader holds the ranks

    def arrived(i):
        events.append(["g", i])
        if hold.get("next") == "A" and i == hold["A"]:
            hold["next"] = "B"
            mark("hold", "A")
        elif hold.get("next") == "B" and i == hold.get("B"):
            hold["next"] = None
            mark("hold", "B")

    for i, p in enumerate(model.parameters()):  # before the student's: these run first
        p.register_post_accumulate_grad_hook(lambda _p, i=i: arrived(i))
    ddp = cls(model, bucket_bytes_for(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    counter = call_counter(events, launched)  # each collective, in order with the hooks' events
    grads = []
    with counter:
        for step in range(STEPS):
            for micro in range(micros):
                synced = micro == micros - 1
                if step == 0 and synced:
                    hold.update(hold_points(model, bucket_bytes_for(seed), events))
                events.append(["b", step, micro, synced])
                with (contextlib.nullcontext() if synced else ddp.no_sync()):
                    out = model(torch.from_numpy(x[step, micro].copy()))
                    loss = torch.nn.functional.mse_loss(out, torch.from_numpy(y[step, micro].copy())) / micros
                    loss.backward()
                events.append(["e"])
                if hold.get("next") == "B":  # the first bucket's gradient was the last: B is here
                    hold["next"] = None
                    mark("hold", "B")
                mark("micro", [step, micro])
            ddp.finish_gradient_synchronization()
            events.append(["f"])
            mark("finish", [step, micros])
            grads.append(encode(flat(p.grad if p.grad is not None else torch.zeros_like(p)
                                     for p in model.parameters())))
            opt.step()
            opt.zero_grad()
    dist.barrier()
    return {"grads": grads, "params": encode(flat(model.parameters())), "events": events[:20_000],
            "calls": {k: int(v) for k, v in counter.calls.items()},
            "bytes": {k: int(v) for k, v in counter.bytes.items()}}


def main(ctx) -> None:
    header, arrays = unpack(ctx.payload)
    watch_waits()
    refuse_built_in_ddp()
    cls = student(ctx, "BucketedDDP")
    if cls is None:
        return
    for k, index in enumerate(header["cases"]):
        def work(k=k, index=index):
            return train(cls, header["seeds"][index], *own_data(arrays, k), marker(ctx, index))

        if not one_case(ctx, index, work):
            return


def warm() -> None:
    """Everything a rank uses, run once before it may lose the right to read files."""
    import torch

    model = build_model()
    model[0].weight.register_post_accumulate_grad_hook(lambda p: None)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    with call_counter():
        torch.nn.functional.mse_loss(model(torch.zeros(2, LAYERS[0])), torch.zeros(2, LAYERS[-1])).backward()
        opt.step()
        opt.zero_grad()
