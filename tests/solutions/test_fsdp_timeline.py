"""The FSDP step timeline (solutions.fsdp) against timelines worked out by hand, the counts of
collectives that FSDP's rules give (two all-gathers and one reduce-scatter per unit and
micro-batch when the weights are freed after the forward pass), and the rule of thumb that
the communication hides only while an all-gather is no longer than a forward pass."""
from __future__ import annotations

import pytest

from solutions import communication, fsdp

U = 4


def test_without_prefetch_every_gather_waits_in_line():
    """No prefetch: forward U x (g + f); backward: the gather of the next unit waits for the
    previous unit's reduce-scatter, so each backward unit costs r + g + b after the first."""
    g, f, b = 0.5, 1.0, 2.0
    ev = fsdp.fsdp_timeline(U, 1, f, b, g, prefetch=False)
    forward = U * (g + f)
    backward = (g + b) + (U - 1) * (g + g + b)  # g of the first unit, then r + g + b each
    assert fsdp.makespan(ev) == pytest.approx(forward + backward + g)  # and the last reduce-scatter
    assert fsdp.peak_held_units(ev) == 1


def test_prefetch_hides_everything_but_the_first_gather_and_the_last_reduce():
    """With prefetching and an all-gather shorter than a forward pass, the only exposed
    communication is the first gather and the last reduce-scatter."""
    g, f, b = 0.5, 1.0, 2.0
    for m in (1, 2, 4):
        ev = fsdp.fsdp_timeline(U, m, f, b, g)
        assert fsdp.exposed_communication(ev) == pytest.approx(2 * g)
        assert fsdp.makespan(ev) == pytest.approx(m * U * (f + b) + 2 * g)
        assert fsdp.peak_held_units(ev) == 2  # the unit computing and the one prefetched


def test_communication_bound_when_a_gather_outlasts_a_forward():
    """Per unit and micro-batch FSDP moves three times a unit's weights (two gathers, one
    reduce-scatter) against three forward passes of compute (forward + a backward of two):
    a gather longer than a forward pass cannot hide, whatever the prefetching."""
    f, b = 1.0, 2.0
    for g in (1.5, 2.0):
        ev = fsdp.fsdp_timeline(U, 2, f, b, g)
        assert fsdp.makespan(ev) >= 2 * U * 3 * g - 1e-9  # the communication stream is the bottleneck
        assert fsdp.exposed_communication(ev) > 2 * g
    # Up to the threshold (g <= f) what shows is the two ends and, at most, one gather at each
    # hand-over from one micro-batch to the next; past it the exposure grows with every unit.
    for m in (1, 2, 4):
        for g in (0.5, 0.75, 1.0):
            assert fsdp.exposed_communication(fsdp.fsdp_timeline(U, m, f, b, g)) <= 2 * g + (m - 1) * g + 1e-9
        assert fsdp.exposed_communication(fsdp.fsdp_timeline(U, m, f, b, 1.5)) > 2 * 1.5 + (m - 1) * 1.5


@pytest.mark.parametrize("m", (1, 2, 4))
@pytest.mark.parametrize("reshard", (True, False))
def test_collective_counts_match_the_traffic_formula(m, reshard):
    """Bytes per GPU per step: (gathers + reduce-scatters) x (n-1)/n x a unit's bytes; with
    resharding that is 3 (n-1)/n of the model per micro-batch, as ZeRO-3 counts it."""
    ev = fsdp.fsdp_timeline(U, m, reshard_after_forward=reshard)
    gathers = sum(e.kind == "gather" for e in ev)
    reduces = sum(e.kind == "reduce-scatter" for e in ev)
    assert gathers == m * U * (2 if reshard else 1)
    assert reduces == m * U
    n, unit_bytes = 8, 1e9
    sent = gathers * communication.allgather_bytes_per_rank(unit_bytes, n) \
        + reduces * communication.reduce_scatter_bytes_per_rank(unit_bytes, n)
    per_mb = (3 if reshard else 2) * (n - 1) / n * U * unit_bytes
    assert sent == pytest.approx(m * per_mb)


def test_keeping_the_weights_holds_every_unit():
    ev = fsdp.fsdp_timeline(U, 1, reshard_after_forward=False)
    assert fsdp.peak_held_units(ev) == U
    assert not any(e.kind == "gather" and e.phase == "B" for e in ev)


def test_streams_run_one_thing_at_a_time_and_compute_waits_for_its_gather():
    ev = fsdp.fsdp_timeline(U, 2, 1.0, 2.0, 0.75)
    for stream in ("comm", "compute"):
        mine = sorted((e for e in ev if e.stream == stream), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:]))
    gathers = {(e.unit, e.microbatch, e.phase): e for e in ev if e.kind == "gather"}
    for e in ev:
        if e.stream == "compute":
            g = gathers[(e.unit, e.microbatch, "F" if e.kind == "forward" else "B")]
            assert g.end <= e.start + 1e-12
        if e.kind == "reduce-scatter":
            bwd = next(x for x in ev if x.kind == "backward" and (x.unit, x.microbatch) == (e.unit, e.microbatch))
            assert bwd.end <= e.start + 1e-12


@pytest.mark.parametrize("call, name", [
    (lambda: fsdp.fsdp_timeline(0), "units"),
    (lambda: fsdp.fsdp_timeline(4, 1.5), "microbatches"),
    (lambda: fsdp.fsdp_timeline(4, t_gather=-1), "t_gather"),
    (lambda: fsdp.fsdp_timeline(4, prefetch="yes"), "prefetch"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()
