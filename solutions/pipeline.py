"""Pipeline parallelism: the bubble, and small event simulations of the GPipe,
1F1B (PipeDream-Flush), interleaved 1F1B, zero-bubble (ZB-H1, ZB-H2) and
DualPipe schedules.

Two definitions of "bubble fraction" are in use, and they differ:

* share of total time (GPipe, Huang et al. 2019): ``(p-1) / (m + p - 1)``;
* relative to ideal compute time (Narayanan et al. 2021, sec. 2.2):
  ``(p-1) / m``.

Interleaving ``v`` model chunks per GPU divides the bubble time by ``v``
(at ``v`` times the pipeline communication).

The zero-bubble schedules (Qi et al. 2024) split each backward pass in two: ``B``,
the gradient with respect to the stage's input, which the previous stage waits for,
and ``W``, the gradient with respect to the stage's weights, which nobody waits for
and which therefore fills the idle time. DualPipe (DeepSeek-V3 report, sec. 3.2.1)
feeds micro-batches from both ends of the pipeline: each GPU holds stage ``s`` of
one copy of the model and stage ``p - 1 - s`` of a second copy.

DeepSpeed's pipeline engine (:func:`deepspeed_order`) states its schedule as numbered
steps that all stages share rather than as a list per stage; written out per stage, it is 1F1B.

References: huang2019gpipe, narayanan2019pipedream, narayanan2021megatron,
qi2023zerobubble, liu2024deepseekv3, microsoft2020deepspeedpipe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validate import nonnegative_integer, one_of, positive, positive_integer

__all__ = [
    "BUBBLE_DEFINITIONS",
    "bubble_fraction",
    "PipelineEvent",
    "SCHEDULE_KINDS",
    "INTERLEAVED",
    "ZERO_BUBBLE",
    "DUALPIPE",
    "ALL_KINDS",
    "pipeline_schedule",
    "simulate_orders",
    "deepspeed_order",
    "makespan",
    "idle_fraction",
    "inner_idle_fraction",
    "peak_in_flight",
    "dualpipe_bubble",
]

BUBBLE_DEFINITIONS = ("share_of_total", "relative_to_ideal")


def bubble_fraction(p, m, definition="share_of_total", interleave=1):
    """Pipeline bubble for ``p`` stages and ``m`` micro-batches.

    With ``v = interleave`` model chunks per GPU the idle time shrinks to
    ``(p-1)/v`` micro-batch slots:

    * ``"share_of_total"`` (GPipe): idle / total = ``(p-1) / (v m + p - 1)``;
    * ``"relative_to_ideal"`` (Narayanan et al. 2021, eq. in sec. 2.2.1 and
      2.2.2): idle / ideal compute = ``(p-1) / (v m)``.

    Elementwise over integer arrays.
    """
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    one_of("definition", definition, BUBBLE_DEFINITIONS)
    v = positive_integer("interleave", interleave)
    p_ = np.asarray(p, dtype=np.float64)
    m_ = np.asarray(m, dtype=np.float64)
    if definition == "share_of_total":
        out = (p_ - 1) / (v * m_ + p_ - 1)
    else:
        out = (p_ - 1) / (v * m_)
    return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class PipelineEvent:
    """Stage ``stage`` runs phase ``'F'`` (forward), ``'B'`` (backward; in the
    zero-bubble and DualPipe schedules only the gradient of the input) or
    ``'W'`` (the gradient of the weights, split off ``B``) of ``microbatch``
    from ``start`` to ``end``. ``chunk`` is the model chunk of the stage that
    runs it: 0 unless the schedule is interleaved, and under DualPipe the
    direction the micro-batch travels (0 from the first GPU, 1 from the last)."""

    stage: int
    microbatch: int
    phase: str
    start: float
    end: float
    chunk: int = 0


#: The schedules with one contiguous block of layers per stage.
SCHEDULE_KINDS = ("gpipe", "1f1b")
#: Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2): ``v`` chunks per stage.
INTERLEAVED = "interleaved"
#: Zero-bubble schedules (Qi et al. 2024, sec. 3): the backward split into B and W.
ZERO_BUBBLE = ("zb-h1", "zb-h2")
#: DualPipe (DeepSeek-V3 report, sec. 3.2.1): micro-batches from both ends.
DUALPIPE = "dualpipe"
#: Every schedule :func:`pipeline_schedule` simulates.
ALL_KINDS = SCHEDULE_KINDS + (INTERLEAVED,) + ZERO_BUBBLE + (DUALPIPE,)


def _stage_order(kind, p, m, stage, v=1):
    """The order in which ``stage`` runs its passes: ``(phase, microbatch, chunk)``."""
    if kind == "gpipe":
        # All forwards, then all backwards (activations of all m micro-batches stashed).
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if kind == INTERLEAVED:
        return _interleaved_order(p, m, stage, v)
    # 1F1B / PipeDream-Flush (Narayanan et al. 2021, Fig. 4 top): warm up with
    # p-stage-1 forwards, then alternate one forward and one backward, then drain.
    warmup = min(p - stage - 1, m)
    order = [("F", i, 0) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i, 0), ("B", i, 0)]
    order += [("B", i, 0) for i in range(m - warmup, m)]
    return order


def _interleaved_order(p, m, stage, v):
    """Interleaved 1F1B as Megatron-LM runs it (Narayanan et al. 2021, sec. 2.2.2
    and Fig. 4 bottom). Micro-batches go in groups of ``p``: the stage runs
    chunk 0 of a group, then chunk 1, ...; backward passes take the chunks in
    reverse. It warms up with ``2 (p - stage - 1) + (v - 1) p`` forward passes
    (all of them when ``m == p``), then alternates one forward and one
    backward, then drains."""
    total = m * v

    def unit(k, forward):
        group, within = divmod(k, p * v)
        chunk = within // p
        return group * p + within % p, chunk if forward else v - 1 - chunk

    warmup = total if m == p else min(2 * (p - stage - 1) + (v - 1) * p, total)
    order = [("F", *unit(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        order += [("F", *unit(warmup + k, True)), ("B", *unit(k, False))]
    order += [("B", *unit(k, False)) for k in range(total - warmup, total)]
    return order


def _zero_bubble_orders(p, m, t_f, t_b, t_w, limit):
    """Per-stage orders of a zero-bubble schedule, found by list scheduling: whenever a stage
    is free it runs, of the passes it may run then, a ``B`` before an ``F`` before a ``W``;
    an ``F`` only while fewer than ``limit(s)`` micro-batches are in flight on stage ``s``
    (forward done, ``B`` not yet), and the ``W`` passes in the order of their ``B``. With
    ``limit(s) = p - s`` (1F1B's memory) this is ZB-H1, with ``2 (p - s) - 1`` ZB-H2
    (Qi et al. 2024, sec. 3 and Fig. 3). A pass is committed only when no stage can start
    anything earlier, so every pass starts as soon as its stage and inputs allow."""
    free = [0.0] * p
    f_end, b_end = {}, {}
    next_f, next_b = [0] * p, [0] * p
    pending_w = [[] for _ in range(p)]
    orders = [[] for _ in range(p)]
    for _ in range(3 * p * m):
        best = None
        for s in range(p):
            options = []
            i = next_b[s]
            if i < m and (s, i) in f_end and (s == p - 1 or (s + 1, i) in b_end):
                options.append((max(free[s], f_end[(s, i)], b_end.get((s + 1, i), 0.0)), 0, "B", i))
            i = next_f[s]
            if i < m and (s == 0 or (s - 1, i) in f_end) and next_f[s] - next_b[s] < limit(s):
                options.append((max(free[s], f_end.get((s - 1, i), 0.0)), 1, "F", i))
            if pending_w[s]:
                options.append((free[s], 2, "W", pending_w[s][0]))
            if options:
                option = min(options)
                if best is None or option[:2] < best[1][:2]:
                    best = (s, option)
        s, (begin, _, phase, i) = best
        end = begin + {"F": t_f, "B": t_b, "W": t_w}[phase]
        free[s] = end
        if phase == "F":
            f_end[(s, i)] = end
            next_f[s] += 1
        elif phase == "B":
            b_end[(s, i)] = end
            next_b[s] += 1
            pending_w[s].append(i)
        else:
            pending_w[s].pop(0)
        orders[s].append((phase, i, 0))
    return orders


def _dualpipe_orders(p, m):
    """Per-stage orders of DualPipe as DeepSeek's reference implementation runs it
    (github.com/deepseek-ai/DualPipe, ``DualPipe.step``: its eight steps). Micro-batches
    ``0 .. m/2 - 1`` enter at GPU 0 (direction 0), ``m/2 .. m - 1`` at GPU ``p - 1``
    (direction 1). Each GPU calls the direction whose micro-batches reach it first its
    chunk 0. A pair in a list is a forward and a backward pass of the two directions that
    the implementation overlaps (F&B): they start together. A backward is followed by its
    ``W`` at once, unless the step defers ``W`` (zero-bubble style) to fill a later gap."""
    half, half_ranks = m // 2, p // 2
    orders = []
    for rank in range(p):
        h = min(rank, p - 1 - rank)
        second = rank >= half_ranks
        middle = rank in (half_ranks - 1, half_ranks)
        forwards, backwards = [0, 0], [0, 0]
        deferred, out = [], []

        def direction(local):
            return local ^ int(second)

        def take(counter, local, phase):
            d = direction(local)
            i = counter[d]
            counter[d] += 1
            return (phase, d * half + i, d)

        def forward(local):
            out.append(take(forwards, local, "F"))

        def backward(local, zero_bubble=False):
            op = take(backwards, local, "B")
            out.append(op)
            (deferred.append if zero_bubble else out.append)(("W", op[1], op[2]))

        def forward_backward(f_local, b_local):
            op = take(backwards, b_local, "B")
            out.append([take(forwards, f_local, "F"), op])
            out.append(("W", op[1], op[2]))

        def weight():
            out.append(deferred.pop(0))

        for _ in range(2 * (half_ranks - h - 1)):  # step 1: forwards of chunk 0
            forward(0)
        for _ in range(h + 1):  # step 2: chunk 0 and chunk 1 forwards
            forward(0)
            forward(1)
        for _ in range(half_ranks - h - 1):  # step 3: B1 W1 F1, zero bubble
            backward(1, zero_bubble=True)
            weight()
            forward(1)
        for i in range(half - p + h + 1):  # step 4, the main step: F0&B1, F1&B0
            if i == 0 and middle:  # the two middle GPUs do not overlap this pair
                forward(0)
                backward(1)
            else:
                forward_backward(0, 1)
            forward_backward(1, 0)
        for _ in range(half_ranks - h - 1):  # step 5: B1, F1&B0
            backward(1)
            forward_backward(1, 0)
        zero_bubble, step6 = False, h + 1
        for i in range(step6):  # step 6: B1 B0, the second half with W deferred
            if i == step6 // 2 and h % 2 == 1:
                zero_bubble = True
            backward(1, zero_bubble)
            if i == step6 // 2 and h % 2 == 0:
                zero_bubble = True
            backward(0, zero_bubble)
        for _ in range(half_ranks - h - 1):  # step 7: W, B0 with W deferred
            weight()
            backward(0, zero_bubble=True)
        for _ in range(h + 1):  # step 8: the remaining W
            weight()
        assert not deferred, "DualPipe left weight passes unscheduled"
        orders.append(out)
    return orders


def deepspeed_order(p, m, stage):
    """The order in which DeepSpeed's pipeline engine runs ``stage``'s passes
    (``TrainSchedule`` in DeepSpeed's deepspeed/runtime/pipe/schedule.py), the engine
    MT-NLG and BLOOM trained with. DeepSpeed does not list the passes of a stage; it
    counts ``2 (m + p - 1)`` steps that all stages share, and at step ``t`` a stage whose
    index has ``t``'s parity runs the forward of micro-batch ``t//2 - stage//2`` while
    the others run the backward of micro-batch ``t//2 - (p - 1) + stage//2``; a step
    whose micro-batch falls outside ``0 .. m - 1`` has no pass. Returns
    ``(phase, microbatch, 0)`` entries for :func:`simulate_orders`; the rule gives every
    stage exactly 1F1B's order (the tests check it)."""
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    stage = nonnegative_integer("stage", stage)
    if stage >= p:
        raise ValueError(f"stage must be below p={p}, got {stage}")
    order = []
    for t in range(2 * (m + p - 1)):
        forward = t % 2 == stage % 2
        i = t // 2 - stage // 2 if forward else t // 2 - (p - 1) + stage // 2
        if 0 <= i < m:
            order.append(("F" if forward else "B", i, 0))
    return order


def pipeline_schedule(p, m, kind="gpipe", t_fwd=1.0, t_bwd=2.0, interleave=1, t_w=None):
    """Simulate one training step of a ``p``-stage pipeline on ``m``
    micro-batches and return its :class:`PipelineEvent` list, sorted by start.

    Each stage runs its passes in the order the schedule prescribes, each as
    early as its dependencies allow: ``F(s, i)`` after ``F(s-1, i)``;
    ``B(s, i)`` after ``B(s+1, i)`` and after ``F(s, i)``; ``W(s, i)`` after
    ``B(s, i)``. Communication time is ignored. ``kind`` is one of :data:`ALL_KINDS`:
    ``'gpipe'`` (Huang et al. 2019), ``'1f1b'``
    (PipeDream-Flush, Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training"),
    ``'interleaved'`` (Narayanan et al. 2021, "Efficient Large-Scale Language Model
    Training on GPU Clusters", sec. 2.2.2), ``'zb-h1'`` and ``'zb-h2'`` (Qi et al. 2024) or
    ``'dualpipe'`` (DeepSeek-V3 report, sec. 3.2.1).

    Interleaved: each stage holds ``v = interleave`` chunks of layers; chunk
    ``c`` of stage ``s`` is virtual stage ``c p + s`` of a ``v p``-stage
    pipeline, and each of its passes takes ``t_fwd / v`` or ``t_bwd / v``. As
    in Megatron-LM, ``m`` must be a multiple of ``p``. Its idle share is
    :func:`bubble_fraction` with ``interleave=v``: ``(p-1) / (v m + p - 1)``.

    Zero-bubble and DualPipe: the backward pass of ``t_bwd`` is split into ``B`` of
    ``t_bwd - t_w`` and ``W`` of ``t_w`` (default ``t_bwd / 2``), so every schedule does the
    same work. ZB-H1 holds as many micro-batches as 1F1B; ZB-H2 up to ``2p - 1`` on the
    first stage, and idles only before its first pass and after its last (the
    synchronisation before the optimizer step is what leaves a bubble; Qi et al. remove it).
    DualPipe needs an even ``p`` and an even ``m`` of at least ``2p``; each GPU holds two
    stages of ``t_fwd`` and ``t_bwd`` each (two copies of the model's parameters).
    """
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    one_of("kind", kind, ALL_KINDS)
    t_fwd = positive("t_fwd", t_fwd)
    t_bwd = positive("t_bwd", t_bwd)
    if np.ndim(t_fwd) or np.ndim(t_bwd):
        raise ValueError("t_fwd and t_bwd must be scalars")
    v = positive_integer("interleave", interleave)
    if np.ndim(p) or np.ndim(m) or np.ndim(v):
        raise ValueError("p, m and interleave must be scalars")
    if kind != INTERLEAVED and v != 1:
        raise ValueError(f"interleave must be 1 for kind={kind!r} (only 'interleaved' has chunks), got {v}")
    if kind == INTERLEAVED and m % p:
        raise ValueError(f"m must be a multiple of p={p} for the interleaved schedule, got m={m}")
    split = kind in ZERO_BUBBLE or kind == DUALPIPE
    if t_w is not None and not split:
        raise ValueError(f"t_w is for the schedules that split the backward ({', '.join(ZERO_BUBBLE + (DUALPIPE,))}), "
                         f"not kind={kind!r}")
    if split:
        t_w = t_bwd / 2 if t_w is None else positive("t_w", t_w)
        if np.ndim(t_w) or not t_w < t_bwd:
            raise ValueError(f"t_w must be a scalar below t_bwd={t_bwd} (B takes the rest), got {t_w!r}")
    if kind == DUALPIPE and (p % 2 or m % 2 or m < 2 * p):
        raise ValueError(f"DualPipe needs an even p and an even m of at least 2p, got p={p}, m={m}")

    if kind in ZERO_BUBBLE:
        limit = (lambda s: p - s) if kind == "zb-h1" else (lambda s: 2 * (p - s) - 1)
        orders = _zero_bubble_orders(p, m, t_fwd, t_bwd - t_w, t_w, limit)
        return simulate_orders(orders, t_fwd, t_bwd, t_w=t_w)
    if kind == DUALPIPE:
        return simulate_orders(_dualpipe_orders(p, m), t_fwd, t_bwd, t_w=t_w, dual=True)
    orders = [_stage_order(kind, p, m, s, v) for s in range(p)]
    return simulate_orders(orders, t_fwd, t_bwd, v)


def simulate_orders(orders, t_fwd=1.0, t_bwd=2.0, interleave=1, t_w=None, dual=False):
    """Run given per-stage orders as :func:`pipeline_schedule` runs its own: ``orders[s]``
    lists stage ``s``'s passes ``(phase, microbatch[, chunk])``; each pass starts as soon as
    its stage is free and its dependencies are done (``F(s, i)`` after ``F(s-1, i)``;
    ``B(s, i)`` after ``B(s+1, i)`` and ``F(s, i)``; ``W(s, i)`` after ``B(s, i)``).
    Returns the events sorted by start, or
    raises ``ValueError`` naming the first stage that waits for a pass no order runs in time
    (a deadlock). Used to check a hand-written schedule against the bubble formula.

    ``t_w``: orders that split the backward into ``B`` and ``W`` give ``B`` ``t_bwd - t_w``
    and ``W`` ``t_w``. ``dual``: DualPipe's placement, where chunk ``c`` of stage ``s`` is
    position ``s`` (``c = 0``) or ``p - 1 - s`` (``c = 1``) of its own ``p``-stage pipeline,
    each pass taking the whole ``t_fwd`` or ``t_bwd``. An entry that is a list of passes is
    run as one unit (DualPipe's overlapped forward and backward): they start together, when
    all their inputs are there, and run one after the other."""
    p, v = len(orders), interleave
    t_b = t_bwd if t_w is None else t_bwd - t_w
    last = p - 1 if dual else v * p - 1  # the last position on a micro-batch's path

    def one(op):
        return (op[0], op[1], op[2] if len(op) > 2 else 0)

    orders = [[[one(x) for x in op] if isinstance(op, list) else [one(op)] for op in order] for order in orders]
    pos = [0] * p  # next unit index per stage
    free = [0.0] * p  # time each stage becomes free
    done = {}  # (phase, chunk, position, mb) -> end time
    events = []
    remaining = sum(len(o) for o in orders)

    def plan(s, phase, i, c):
        """(key, dependencies, duration) of one pass."""
        k = (s if c == 0 else p - 1 - s) if dual else c * p + s
        lane = c if dual else 0  # interleaved chunks form one path; DualPipe's two do not
        scale = 1 if dual else v
        if phase == "F":
            return ("F", lane, k, i), ([("F", lane, k - 1, i)] if k > 0 else []), t_fwd / scale
        if phase == "B":
            deps = [("F", lane, k, i)] + ([("B", lane, k + 1, i)] if k < last else [])
            return ("B", lane, k, i), deps, t_b / scale
        if phase == "W":
            if t_w is None:
                raise ValueError("a 'W' pass needs t_w (the weight-gradient time)")
            return ("W", lane, k, i), [("B", lane, k, i)], t_w / scale
        raise ValueError(f"phase must be 'F', 'B' or 'W', got {phase!r}")

    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                unit = [(op, *plan(s, *op)) for op in orders[s][pos[s]]]
                if not all(d in done for _, _, deps, _ in unit for d in deps):
                    break
                start = max([free[s]] + [done[d] for _, _, deps, _ in unit for d in deps])
                t = start
                for (phase, i, c), key, _, dur in unit:
                    done[key] = t + dur
                    events.append(PipelineEvent(s, i, phase, t, t + dur, c))
                    t += dur
                free[s] = t
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            s = next(s for s in range(p) if pos[s] < len(orders[s]))
            phase, i, _ = orders[s][pos[s]][0]
            raise ValueError(f"pipeline schedule deadlocked: stage {s} waits to run {phase}({i}), "
                             "whose inputs no stage produces first")
    events.sort(key=lambda e: (e.start, e.stage))
    return events


def makespan(schedule):
    """Time from the first event's start to the last event's end."""
    return max(e.end for e in schedule) - min(e.start for e in schedule)


def idle_fraction(schedule):
    """Share of ``stages x makespan`` that the stages spend idle."""
    stages = {e.stage for e in schedule}
    busy = sum(e.end - e.start for e in schedule)
    return 1.0 - busy / (len(stages) * makespan(schedule))


def inner_idle_fraction(schedule):
    """Idle time *inside* each stage's own span (from its first pass to its last), over
    the sum of those spans: what stays idle when one step's passes may overlap the next
    step's, with no synchronisation between them (ZB-H2's zero bubble is zero here)."""
    idle = span = 0.0
    for s in {e.stage for e in schedule}:
        evs = [e for e in schedule if e.stage == s]
        length = max(e.end for e in evs) - min(e.start for e in evs)
        span += length
        idle += length - sum(e.end - e.start for e in evs)
    return idle / span


def dualpipe_bubble(p, m, t_f=1.0, t_b=1.0, t_w=1.0):
    """DualPipe's bubble as DeepSeek-V3's report prints it (Table 2),
    ``(p/2 - 1)(T_F&B + T_B - 3 T_W)``, relative to the ideal compute time
    ``m (t_f + t_b + t_w)``, reading ``T_F&B`` as one forward and one input-gradient pass
    run together (``t_f + t_b``) and ``T_B`` as a whole backward (``t_b + t_w``), where
    ``t_b`` is the input-gradient pass and ``t_w`` the weight-gradient pass. With the three
    equal, this is the idle time :func:`pipeline_schedule` simulates for ``'dualpipe'``."""
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    t_f, t_b, t_w = positive("t_f", t_f), positive("t_b", t_b), positive("t_w", t_w)
    if p % 2:
        raise ValueError(f"DualPipe needs an even p, got p={p}")
    return (p / 2 - 1) * ((t_f + t_b) + (t_b + t_w) - 3 * t_w) / (m * (t_f + t_b + t_w))


def peak_in_flight(schedule, stage):
    """Largest number of micro-batches whose forward has finished on
    ``stage`` but whose backward has not: how many activation sets the stage
    must stash. GPipe stashes all ``m``; 1F1B at most ``p - stage``. (Under the
    zero-bubble schedules the input-gradient pass ``B`` ends the count; part of the
    activations waits for ``W``.)"""
    stage = nonnegative_integer("stage", stage)
    evs = [e for e in schedule if e.stage == stage]
    if not evs:
        raise ValueError(f"stage must be a stage present in the schedule, got {stage}")
    # Stash on forward end, release on backward end.
    points = sorted([(e.end, 1 if e.phase == "F" else -1) for e in evs if e.phase != "W"],
                    key=lambda x: (x[0], x[1]))
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak
