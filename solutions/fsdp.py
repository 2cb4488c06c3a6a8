"""One FSDP (ZeRO-3) training step on one GPU, as a timeline of two streams.

FSDP splits the model into units (one per transformer block, say) and keeps only a shard of
each unit's parameters on every GPU (Zhao et al. 2023; Rajbhandari et al. 2020, stage 3).
A step runs, for every micro-batch:

* **forward**: all-gather unit ``u``'s parameters, run its forward pass, free the gathered
  parameters (``reshard_after_forward``, FSDP2's default), next unit;
* **backward**, units in reverse: all-gather the parameters again (if they were freed), run
  the backward pass, then reduce-scatter the unit's gradients so that each GPU keeps the
  summed gradient of its shard, and free the gathered parameters and full gradients.

Collectives run on their own stream, one at a time in the order they are issued, so they can
overlap with computation. **Prefetching** issues the all-gather a compute pass will need
when the pass before it *starts* (FSDP's forward and backward prefetch); without it, when
that pass *ends*, so the compute stream waits for every gather. A reduce-scatter is issued
when its unit's backward ends. Every GPU does the same, so one GPU's timeline is the step's.

The timeline's events carry the stream (``'comm'`` or ``'compute'``), what runs
(``'gather'``, ``'forward'``, ``'backward'``, ``'reduce-scatter'``), the unit, the
micro-batch, start and end. :func:`held_units` counts the units whose full parameters a GPU
holds at a moment (the memory above the shards).

References: zhao2023fsdp, pytorch2024fsdp2, rajbhandari2020zero.
"""
from __future__ import annotations

from dataclasses import dataclass

from ._validate import positive, positive_integer

__all__ = ["FsdpEvent", "KINDS", "fsdp_timeline", "makespan", "exposed_communication", "held_units",
           "peak_held_units"]

#: What an event runs, and on which stream.
KINDS = {"gather": "comm", "reduce-scatter": "comm", "forward": "compute", "backward": "compute"}


@dataclass(frozen=True)
class FsdpEvent:
    """``kind`` of ``unit`` for ``microbatch`` runs on ``stream`` from ``start`` to ``end``;
    a gather is for the forward (``phase='F'``) or the backward (``'B'``) pass."""

    stream: str
    kind: str
    unit: int
    microbatch: int
    start: float
    end: float
    phase: str = ""


def _flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def fsdp_timeline(units, microbatches=1, t_forward=1.0, t_backward=2.0, t_gather=0.5, t_reduce=None,
                  prefetch=True, reshard_after_forward=True):
    """The events of one optimizer step of ``microbatches`` micro-batches through ``units``
    FSDP units, sorted by start: per unit and micro-batch a forward of ``t_forward`` and a
    backward of ``t_backward`` seconds on the compute stream; on the communication stream an
    all-gather of ``t_gather`` before each pass that needs the full parameters (the backward
    needs none when ``reshard_after_forward`` is False: the forward's gather is kept) and a
    reduce-scatter of ``t_reduce`` (default ``t_gather``: the same bytes) after each backward.

    A gather is issued when the compute pass before the one that needs it starts
    (``prefetch``) or ends (no prefetch); the first at time 0. Each collective starts when it
    is issued and the stream is free; each compute pass when the compute stream is free and
    its gather has ended."""
    n = positive_integer("units", units)
    m = positive_integer("microbatches", microbatches)
    t_f = positive("t_forward", t_forward)
    t_b = positive("t_backward", t_backward)
    t_g = positive("t_gather", t_gather)
    t_r = t_g if t_reduce is None else positive("t_reduce", t_reduce)
    _flag("prefetch", prefetch)
    _flag("reshard_after_forward", reshard_after_forward)

    # The compute passes in program order: (kind, unit, micro-batch, needs a gather).
    passes = []
    for j in range(m):
        passes += [("forward", u, j, True) for u in range(n)]
        passes += [("backward", u, j, reshard_after_forward) for u in reversed(range(n))]

    events = []
    comm_free = compute_free = 0.0
    reduces = []  # reduce-scatters issued and not yet run: (unit, micro-batch, issue time)

    def run_comm(kind, unit, mb, at, phase=""):
        """Run a collective on the communication stream: when issued and the stream is free."""
        nonlocal comm_free
        start = max(comm_free, at)
        comm_free = start + (t_g if kind == "gather" else t_r)
        events.append(FsdpEvent("comm", kind, unit, mb, start, comm_free, phase))
        return comm_free

    def flush(until):
        """Run, in order of issue, the reduce-scatters issued no later than ``until``."""
        while reduces and reduces[0][2] <= until:
            run_comm("reduce-scatter", *reduces.pop(0))

    previous = None  # the last compute event
    for kind, unit, mb, needs in passes:
        ready = 0.0
        if needs:
            # Issued when the pass before starts (prefetch) or ends; a reduce-scatter issued
            # at the same moment goes first (its unit's post-backward hook runs first).
            at = 0.0 if previous is None else (previous.start if prefetch else previous.end)
            flush(at)
            ready = run_comm("gather", unit, mb, at, "F" if kind == "forward" else "B")
        start = max(compute_free, ready)
        compute_free = start + (t_f if kind == "forward" else t_b)
        previous = FsdpEvent("compute", kind, unit, mb, start, compute_free)
        events.append(previous)
        if kind == "backward":
            reduces.append((unit, mb, compute_free))
    flush(float("inf"))
    events.sort(key=lambda e: (e.start, e.stream != "comm"))
    return events


def makespan(events):
    """Seconds from the step's first event to its last."""
    return max(e.end for e in events) - min(e.start for e in events)


def exposed_communication(events):
    """Seconds of the step in which the compute stream is idle: the communication that
    did not hide behind computation."""
    busy = sum(e.end - e.start for e in events if e.stream == "compute")
    return makespan(events) - busy


def held_units(events, t):
    """Units whose full parameters a GPU holds at time ``t``: from the start of a gather
    until the end of the compute pass that uses them (the forward frees them when they
    are resharded; otherwise the backward of the same micro-batch does)."""
    gathers = [e for e in events if e.kind == "gather"]
    computes = {(e.kind, e.unit, e.microbatch): e for e in events if e.stream == "compute"}
    held = 0
    for g in gathers:
        if g.phase == "F":
            kept = ("backward", g.unit, g.microbatch) if not _resharded(events) else ("forward", g.unit, g.microbatch)
        else:
            kept = ("backward", g.unit, g.microbatch)
        if g.start <= t < computes[kept].end:
            held += 1
    return held


def _resharded(events):
    """Whether the backward passes gather again (the forward resharded its parameters)."""
    return any(e.kind == "gather" and e.phase == "B" for e in events)


def peak_held_units(events):
    """The most units held whole at once over the step (checked at every event's start)."""
    return max(held_units(events, e.start) for e in events)
