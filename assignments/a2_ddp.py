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
(``sandbox.multirank``) and, at world sizes 2 and 4 and three seeds (a bucket size and a
number M of micro-batches per seed, ``MICROS``: a no_sync right for one M only shows at
another), checks:

* **result**: after each step's synchronisation the gradients equal those of one process
  on the whole global batch (relative L2 difference at most ``GRAD_TOL``), and after k
  steps the parameters do (L2 difference at most ``PARAM_TOL`` of the L2 of the update);
* **traffic**: bytes each rank sends per step, seen on the group's loopback between the
  grader's checkpoints (``sandbox.wire``; where no capture is possible, the rank's own count
  of each all-reduce's buffer): ``2(n-1)/n`` of the gradient bytes
  (``solutions.communication.allreduce_bytes_per_rank``), once per step;
* **buckets**: the all-reduced buffers (each call seen on the wire) have the sizes of the
  reverse-order buckets;
* **overlap**: something is sent before the synchronising backward pass ends (wire); the
  hook does not wait (the grader holds the other ranks back before their first bucket's
  all-reduce and lets rank 0 alone go on: a hook that waits cannot reach its next
  gradient); and from the order of events in each rank (the grader's own gradient hooks,
  the calls, the waits): every all-reduce is asynchronous, starts as soon as its bucket is
  full and not before, and is waited for before the optimizer step;
* **no_sync**: nothing sent during a ``no_sync`` micro-batch, something after it.

Each rank gets its own micro-batches only.
"""
from __future__ import annotations

import numpy as np

from solutions.communication import allreduce_bytes_per_rank

from .a2_rank import (BATCH, BUCKET_BYTES, EPS, LAYERS, LR, MICROS, STEPS, WEIGHT_DECAY,  # noqa: F401
                      bucket_bytes_for, build_model, data, flat, micro_for)
from .common import Report, decode, grade_submitted, grade_training, payload, rank_program, seeded
from .common import self_check as run_self_check

NAME = "Assignment 2: DDP by hand"
CLASS = "BucketedDDP"
WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
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


def make_model(seed: int):
    """The model of ``seed``, as every rank builds it (seeded without disturbing, or being
    disturbed by, another grading thread: :func:`~assignments.common.seeded`)."""
    with seeded(seed):
        return build_model()


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


def baseline(n: int, seed: int, salt: int):
    """One process on the whole global batch: per-step gradients, start and end parameters."""
    import torch

    model = make_model(seed)
    start = flat(model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    x, y = data(n, seed, salt, micro_for(seed))
    grads = []
    for step in range(STEPS):
        xs = torch.from_numpy(x[step].reshape(-1, LAYERS[0]))
        ys = torch.from_numpy(y[step].reshape(-1, LAYERS[-1]))
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        grads.append(flat(p.grad for p in model.parameters()))
        opt.step()
        opt.zero_grad()
    return grads, start, flat(model.parameters())


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
    """Failures of the parts read from event order: ``{part: text}`` (absent: passed).

    Events: ``["b", step, micro, synced]`` a micro-batch's backward begins, ``["g", i]``
    parameter i's gradient is ready (the grader's hook, before the student's), ``["a", k]``
    the k-th all-reduce has been started (by any name) and ``["w", k]`` its work waited for,
    ``["all_reduce", bytes, async]`` the collective as dispatched, ``["e"]`` the backward
    pass ended, ``["f"]`` ``finish_gradient_synchronization`` returned."""
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
    waits, pending, step_launches = set(), [], 0
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
            if in_backward:
                out.setdefault("overlap", f"step {step}: the hook waits for its all-reduce (work.wait() during the "
                                          "backward pass): the backward pass stops until the bucket has travelled, "
                                          "so nothing overlaps; keep the work and wait for it in "
                                          "finish_gradient_synchronization")
        elif kind == "f":
            if synced and not step_launches:
                where = ("in the step's only backward pass (one micro-batch per step, no no_sync)" if micro == 0
                         else "after the no_sync micro-batches")
                out.setdefault("no_sync", f"step {step}: no all-reduce {where}: the backward pass outside "
                                          "no_sync must synchronise the accumulated sum")
            step_launches = 0
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
        elif kind == "all_reduce" and len(e) == 3:
            nbytes, asynchronous = e[1], e[2]
            if not synced:
                out.setdefault("no_sync", f"step {step}, micro-batch {micro} (inside no_sync): an all-reduce "
                                          "started; inside no_sync the gradients only accumulate")
                continue
            step_launches += 1
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
        elif kind in ("all_gather", "reduce_scatter", "broadcast", "reduce") and len(e) == 3:
            out.setdefault("buckets", f"step {step}: dist.{kind} called: a bucket is synchronised with one "
                                      "dist.all_reduce")
    return out


def check_traffic(m: dict, n: int, total_bytes: int, micro: int) -> str | None:
    counted = (m.get("bytes") or {}).get("all_reduce", 0) if isinstance(m.get("bytes"), dict) else None
    if not isinstance(counted, int):
        return "no traffic came back"
    sent = float(allreduce_bytes_per_rank(counted, n)) if counted > 0 else 0.0
    predicted = STEPS * float(allreduce_bytes_per_rank(total_bytes, n))
    if abs(sent - predicted) < 0.5:
        return None
    ratio = counted / (STEPS * total_bytes)
    why = ""
    if micro > 1 and abs(ratio - micro) < 1e-9:
        why = ": every micro-batch all-reduces, no_sync does not skip it"
    elif ratio == 0:
        why = ": no dist.all_reduce was seen"
    return (f"rank sent {sent:,.0f} bytes in {STEPS} steps (counted all-reduce buffers: {ratio:.3g} x "
            f"the gradients per step); 2(n-1)/n of the gradients once per step = {predicted:,.0f}{why}")


def _steps(segments) -> dict:
    """The case's traffic per step: ``{step: [(micro, traffic)]}`` (the step's last entry is
    its synchronisation, micro = the micro-batches per step)."""
    out, held = {}, []  # held: the traffic cut at hold checkpoints, part of the micro-batch after them
    for segment in segments:
        point = segment.get("point")
        if segment["checkpoint"] == "hold":
            held.append(segment["traffic"])
        elif segment["checkpoint"] in ("micro", "finish") and isinstance(point, list) and len(point) == 2:
            out.setdefault(point[0], []).append((point[1], [_merged(parts) for parts in
                                                            zip(*held, segment["traffic"])]))
            held = []
    return out


def _merged(parts) -> dict:
    """One rank's traffic over consecutive segments."""
    out = {"calls": {}, "call_bytes": {}}
    for t in parts:
        for name, slots in t["call_bytes"].items():
            merged = out["call_bytes"].setdefault(name, {})
            for slot, nbytes in slots.items():
                merged[slot] = merged.get(slot, 0) + nbytes
    out["calls"] = {name: len(slots) for name, slots in out["call_bytes"].items()}
    return out


def check_hold(held) -> dict:
    """What the grader saw when it held the other ranks back before their first bucket's
    all-reduce and let rank 0 alone go on (see ``assignments.common.CaseBarrier``)."""
    if held == "waited":
        return {"overlap": ("the hook waits for its all-reduce: held back before its peers had started theirs, "
                            "rank 0 did not go on to its next gradient (work.wait() or a blocking all-reduce in "
                            "the backward pass: nothing overlaps); keep the work and wait for it in "
                            "finish_gradient_synchronization")}
    return {}


def check_wire(n: int, seed: int, segments: list, sizes: list) -> dict:
    """What the traffic seen between the ranks shows, step by step: nothing sent inside
    no_sync; the all-reduces of the synchronising micro-batch started before its backward
    pass ended; their buffers the reverse-order buckets; 2(n-1)/n of the gradients per rank
    and step (gloo's ring: its ranks send 2(n-1) times the buffer between them)."""
    out = {}
    cap, micros = bucket_bytes_for(seed), micro_for(seed)
    expected = sorted(sum(sizes[i] for i in b) for b in buckets(sizes, cap))
    total = sum(sizes)
    for step, parts in sorted(_steps(segments).items()):
        calls = {}
        for micro, traffic in parts:
            others = {k for t in traffic for k in t["calls"] if k not in ("all_reduce", "barrier")}
            if others:
                out.setdefault("buckets", f"step {step}: {', '.join(sorted(others))} seen between the ranks: a "
                                          "bucket is synchronised with one dist.all_reduce")
            started = {slot for t in traffic for slot in t["call_bytes"].get("all_reduce", {})}
            if micro < micros - 1 and started:
                out.setdefault("no_sync", f"step {step}, micro-batch {micro} (inside no_sync): "
                                          f"{len(started)} all-reduce(s) seen between the ranks; inside no_sync "
                                          "the gradients only accumulate")
            if micro == micros - 1 and not started:
                out.setdefault("overlap", f"step {step}: nothing was sent between the ranks before the backward "
                                          "pass ended: the first all-reduce starts only after the backward pass "
                                          "has ended, no overlap of communication with the backward pass")
            for t in traffic:
                for slot, nbytes in t["call_bytes"].get("all_reduce", {}).items():
                    calls[slot] = calls.get(slot, 0) + nbytes
        if not calls:
            where = ("in the step's only backward pass (one micro-batch per step, no no_sync)" if micros == 1
                     else "after the no_sync micro-batches")
            out.setdefault("no_sync", f"step {step}: no all-reduce seen {where}: the backward pass outside "
                                      "no_sync must synchronise the accumulated sum")
            out.setdefault("buckets", f"bucket_bytes={cap}, step {step}: no buffer all-reduced (nothing seen between "
                                      f"the ranks); buckets of {expected} bytes expected")
        sent = sum(calls.values())
        if abs(sent - 2 * (n - 1) * total) > 4 * n * max(len(calls), 1):
            out.setdefault("traffic", f"step {step}: the ranks sent {sent / n:,.0f} bytes each on average in "
                                      f"all-reduces (seen between them); 2(n-1)/n of the {total:,} bytes of "
                                      f"gradients is {2 * (n - 1) * total / n:,.0f}")
        got = sorted(round(b / (2 * (n - 1))) for b in calls.values())

        def near(a, b):
            return len(a) == len(b) and all(abs(x - y) <= 4 * n for x, y in zip(a, b))

        if calls and not near(got, expected):
            forward = sorted(sum(sizes[i] for i in b) for b in buckets(sizes, cap, reverse=False))
            if near(got, forward):
                why = ("buckets in forward order: walk model.parameters() in reverse, the order in which the "
                       "backward pass produces the gradients")
            elif len(got) == 1 and near(got, [total]):
                why = "one all-reduce of every gradient: split them into buckets of bucket_bytes"
            else:
                why = f"buckets of {expected} bytes expected"
            out.setdefault("buckets", f"bucket_bytes={cap}, step {step}: buffers of {got} bytes all-reduced (seen "
                                      f"between the ranks); {why}")
    return out


def payloads(n: int, seeds: list, salt: int, indices: list) -> list:
    """What each rank gets: the cases to run and its own micro-batches of each, no one else's."""
    header = {"cases": indices, "seeds": seeds, "salt": salt}
    per_case = [data(n, seeds[c], salt, micro_for(seeds[c])) for c in indices]
    return [payload(header, [a for x, y in per_case for a in (x[:, r], y[:, r])]) for r in range(n)]


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`) at each world size; a Report."""
    from sandbox.multirank import Limits

    sizes = param_bytes(make_model(0))

    def check(n, seed, rank, m, ref) -> dict:
        fails = {"result": check_result(m, n, ref), "traffic": check_traffic(m, n, sum(sizes), micro_for(seed))}
        fails.update(check_events(m, sizes, bucket_bytes_for(seed)))
        return {part: text for part, text in fails.items() if text}

    seeds = list(seeds)
    return grade_training(
        NAME, TITLES, POINTS, rank_program("a2_rank:main", student, (CLASS,), quiet), seeds,
        header={}, payloads=lambda n, indices: payloads(n, seeds, salt, indices),
        describe=lambda seed: f"seed {seed}", reference=lambda n, seed: baseline(n, seed, salt), check=check,
        check_wire=lambda n, seed, segments, held, messages: dict(
            check_wire(n, seed, segments, sizes) if segments is not None else {}, **check_hold(held)),
        wire_parts=("result", "traffic", "buckets", "overlap", "no_sync"),
        wire_decides=("traffic", "buckets", "no_sync"), world_sizes=world_sizes,
        limits=limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=60.0), isolate=isolate, settle=settles)


def settles(label, point) -> bool:
    """The checkpoints after each micro-batch's backward pass, whose traffic is cut only once
    the group has gone idle: the all-reduces a bucket's hook starts run in gloo's background
    thread, which on a loaded machine may not have sent a byte yet when the ranks arrive
    there (the overlap would look absent), and a sly class's all-reduces started inside
    no_sync would fall into the next micro-batch."""
    return label == "micro"


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file (fresh inputs unless ``salt`` is given)."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def self_check(cls, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``cls`` (defined in this notebook) and print its report; the ranks
    are forked from this process, so they have the class. Returns the score."""
    return run_self_check(grade, {CLASS: cls}, world_sizes, seeds)
