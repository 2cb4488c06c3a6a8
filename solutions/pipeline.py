"""Pipeline parallelism: the bubble, and small event simulations of the GPipe
and 1F1B (PipeDream-Flush) schedules.

Two definitions of "bubble fraction" are in use, and they differ:

* share of total time (GPipe, Huang et al. 2019): ``(p-1) / (m + p - 1)``;
* relative to ideal compute time (Narayanan et al. 2021, sec. 2.2):
  ``(p-1) / m``.

Interleaving ``v`` model chunks per GPU divides the bubble time by ``v``
(at ``v`` times the pipeline communication).

References: huang2019gpipe, narayanan2019pipedream, narayanan2021megatron.
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
    "pipeline_schedule",
    "simulate_orders",
    "makespan",
    "idle_fraction",
    "peak_in_flight",
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
    """Stage ``stage`` runs phase ``'F'`` (forward) or ``'B'`` (backward) of
    ``microbatch`` from ``start`` to ``end``. ``chunk`` is the model chunk of
    the stage that runs it (always 0 unless the schedule is interleaved)."""

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


def pipeline_schedule(p, m, kind="gpipe", t_fwd=1.0, t_bwd=2.0, interleave=1):
    """Simulate one training step of a ``p``-stage pipeline on ``m``
    micro-batches and return its :class:`PipelineEvent` list, sorted by start.

    Each stage runs its passes in the order the schedule prescribes, each as
    early as its dependencies allow: ``F(s, i)`` after ``F(s-1, i)``;
    ``B(s, i)`` after ``B(s+1, i)`` and after ``F(s, i)``. Communication time
    is ignored. ``kind`` is ``'gpipe'`` (Huang et al. 2019), ``'1f1b'``
    (PipeDream-Flush, Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training")
    or ``'interleaved'`` (Narayanan et al. 2021, "Efficient Large-Scale Language Model
    Training on GPU Clusters", sec. 2.2.2).

    Interleaved: each stage holds ``v = interleave`` chunks of layers; chunk
    ``c`` of stage ``s`` is virtual stage ``c p + s`` of a ``v p``-stage
    pipeline, and each of its passes takes ``t_fwd / v`` or ``t_bwd / v``. As
    in Megatron-LM, ``m`` must be a multiple of ``p``. Its idle share is
    :func:`bubble_fraction` with ``interleave=v``: ``(p-1) / (v m + p - 1)``.
    """
    p = positive_integer("p", p)
    m = positive_integer("m", m)
    one_of("kind", kind, SCHEDULE_KINDS + (INTERLEAVED,))
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

    orders = [_stage_order(kind, p, m, s, v) for s in range(p)]
    return simulate_orders(orders, t_fwd, t_bwd, v)


def simulate_orders(orders, t_fwd=1.0, t_bwd=2.0, interleave=1):
    """Run given per-stage orders as :func:`pipeline_schedule` runs its own: ``orders[s]``
    lists stage ``s``'s passes ``(phase, microbatch[, chunk])``; each pass starts as soon as
    its stage is free and its dependencies are done (``F(s, i)`` after ``F(s-1, i)``;
    ``B(s, i)`` after ``B(s+1, i)`` and ``F(s, i)``). Returns the events sorted by start, or
    raises ``ValueError`` naming the first stage that waits for a pass no order runs in time
    (a deadlock). Used to check a hand-written schedule against the bubble formula."""
    p, v = len(orders), interleave
    last = v * p - 1  # the last virtual stage
    orders = [[(op[0], op[1], op[2] if len(op) > 2 else 0) for op in order] for order in orders]
    pos = [0] * p  # next op index per stage
    free = [0.0] * p  # time each stage becomes free
    done = {}  # (phase, virtual stage, mb) -> end time
    events = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                phase, i, c = orders[s][pos[s]]
                vs = c * p + s
                if phase == "F":
                    deps = [("F", vs - 1, i)] if vs > 0 else []
                    dur = t_fwd / v
                else:
                    deps = [("F", vs, i)] + ([("B", vs + 1, i)] if vs < last else [])
                    dur = t_bwd / v
                if not all(d in done for d in deps):
                    break
                start = max([free[s]] + [done[d] for d in deps])
                end = start + dur
                done[(phase, vs, i)] = end
                free[s] = end
                events.append(PipelineEvent(s, i, phase, start, end, c))
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            s = next(s for s in range(p) if pos[s] < len(orders[s]))
            phase, i, _ = orders[s][pos[s]]
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


def peak_in_flight(schedule, stage):
    """Largest number of micro-batches whose forward has finished on
    ``stage`` but whose backward has not: how many activation sets the stage
    must stash. GPipe stashes all ``m``; 1F1B at most ``p - stage``."""
    stage = nonnegative_integer("stage", stage)
    evs = [e for e in schedule if e.stage == stage]
    if not evs:
        raise ValueError(f"stage must be a stage present in the schedule, got {stage}")
    # Stash on forward end, release on backward end.
    points = sorted([(e.end, 1 if e.phase == "F" else -1) for e in evs], key=lambda x: (x[0], x[1]))
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak
