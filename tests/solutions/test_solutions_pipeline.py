"""Tests for solutions.pipeline: bubble formulas against an event simulation."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import pipeline as pl

FAST = settings(max_examples=50, deadline=None)
stages = st.integers(1, 8)
micro = st.integers(1, 16)
times = st.sampled_from([0.5, 1.0, 2.0, 3.0])


def test_bubble_formulas_known_values():
    # GPipe share of total time: (p-1)/(m+p-1) (Huang et al. 2019).
    assert pl.bubble_fraction(4, 8) == pytest.approx(3 / 11)
    # Narayanan et al. 2021: relative to ideal compute, (p-1)/m, and /v interleaved.
    assert pl.bubble_fraction(4, 8, "relative_to_ideal") == pytest.approx(3 / 8)
    assert pl.bubble_fraction(4, 8, "relative_to_ideal", interleave=2) == pytest.approx(3 / 16)
    assert pl.bubble_fraction(1, 5) == 0
    # Two stages: one idle slot of m + 1. p=2, m=1: half the time; p=2, m=3: a quarter.
    assert pl.bubble_fraction(2, 1) == pytest.approx(1 / 2)
    assert pl.bubble_fraction(2, 3, "relative_to_ideal") == pytest.approx(1 / 3)
    np.testing.assert_allclose(pl.bubble_fraction(np.array([2, 4]), 4), [1 / 5, 3 / 7])


def test_interleaving_divides_the_idle_time_by_v():
    # v chunks per GPU: the idle time is (p-1)/v slots against m slots of work, so
    # p=4, m=8, v=2: idle 3/2 against 8, a share of (3/2)/(8 + 3/2) = 3/19, relative 3/16.
    assert pl.bubble_fraction(4, 8, "share_of_total", interleave=2) == pytest.approx(3 / 19)
    assert pl.bubble_fraction(4, 8, "relative_to_ideal", interleave=2) == pytest.approx(3 / 16)
    # p=8, m=4, v=4: idle 7/4 against 4: share 7/23, relative 7/16.
    assert pl.bubble_fraction(8, 4, "share_of_total", interleave=4) == pytest.approx(7 / 23)
    assert pl.bubble_fraction(8, 4, "relative_to_ideal", interleave=4) == pytest.approx(7 / 16)
    # One chunk per GPU is the plain pipeline: p=3, m=6 gives 2/8 and 2/6.
    assert pl.bubble_fraction(3, 6, interleave=1) == pytest.approx(1 / 4)
    assert pl.bubble_fraction(3, 6, "relative_to_ideal", interleave=1) == pytest.approx(1 / 3)


@FAST
@given(p=stages, m=micro, v=st.integers(1, 4))
def test_two_definitions_are_consistent(p, m, v):
    # Idle time (p-1)/v micro-batch slots, ideal compute m slots (Narayanan et al. 2021,
    # sec. 2.2.2): share = idle/(idle + ideal), rel = idle/ideal, so share = rel/(1+rel).
    share = pl.bubble_fraction(p, m, "share_of_total", v)
    rel = pl.bubble_fraction(p, m, "relative_to_ideal", v)
    idle = (p - 1) / v
    assert share == pytest.approx(idle / (idle + m), rel=1e-12, abs=0)
    assert rel == pytest.approx(idle / m, rel=1e-12, abs=0)
    assert share == pytest.approx(rel / (1 + rel))


def _check_valid(events, p, m):
    # Every pass exactly once.
    assert Counter((e.stage, e.microbatch, e.phase) for e in events) == Counter(
        (s, i, ph) for s in range(p) for i in range(m) for ph in "FB"
    )
    end = {(e.phase, e.stage, e.microbatch): e.end for e in events}
    for e in events:
        if e.phase == "F" and e.stage > 0:
            assert e.start >= end[("F", e.stage - 1, e.microbatch)]
        if e.phase == "B":
            assert e.start >= end[("F", e.stage, e.microbatch)]
            if e.stage < p - 1:
                assert e.start >= end[("B", e.stage + 1, e.microbatch)]
    # A stage runs one pass at a time.
    for s in range(p):
        evs = sorted((e for e in events if e.stage == s), key=lambda e: e.start)
        for a, b in zip(evs, evs[1:]):
            assert b.start >= a.end


@FAST
@given(p=stages, m=micro, kind=st.sampled_from(pl.SCHEDULE_KINDS), tf=times, tb=times)
def test_schedules_respect_dependencies(p, m, kind, tf, tb):
    _check_valid(pl.pipeline_schedule(p, m, kind, tf, tb), p, m)


@FAST
@given(p=stages, m=micro, tf=times, tb=times)
def test_gpipe_idle_share_equals_formula(p, m, tf, tb):
    # Derivation: forwards end on the last stage at (m+p-1) tf; the backward
    # wave then takes (m+p-1) tb, so the makespan is (m+p-1)(tf+tb) while each
    # stage is busy m(tf+tb): idle share (p-1)/(m+p-1) for any tf, tb.
    sched = pl.pipeline_schedule(p, m, "gpipe", tf, tb)
    assert pl.makespan(sched) == pytest.approx((m + p - 1) * (tf + tb))
    assert pl.idle_fraction(sched) == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    assert pl.idle_fraction(sched) == pytest.approx(pl.bubble_fraction(p, m), abs=1e-12)
    # Idle time per stage relative to its compute: Narayanan's (p-1)/m.
    idle_per_stage = pl.makespan(sched) - m * (tf + tb)
    assert idle_per_stage / (m * (tf + tb)) == pytest.approx(pl.bubble_fraction(p, m, "relative_to_ideal"))


@FAST
@given(p=stages, m=micro, tf=times, tb=times)
def test_1f1b_same_bubble_less_memory(p, m, tf, tb):
    # Narayanan et al. 2021: 1F1B has GPipe's bubble but stashes at most p micro-batches.
    g = pl.pipeline_schedule(p, m, "gpipe", tf, tb)
    o = pl.pipeline_schedule(p, m, "1f1b", tf, tb)
    assert pl.makespan(o) == pytest.approx(pl.makespan(g))
    for s in range(p):
        assert pl.peak_in_flight(g, s) == m
        assert pl.peak_in_flight(o, s) == min(p - s, m)
        assert pl.peak_in_flight(o, s) <= p


@FAST
@given(p=stages, groups=st.integers(1, 3), v=st.integers(1, 4), tf=times, tb=times)
def test_interleaved_schedule_is_valid_and_has_the_interleaved_bubble(p, groups, v, tf, tb):
    # Narayanan et al. 2021, sec. 2.2.2: with v chunks per stage the bubble is
    # (p-1)/v micro-batch slots, an idle share of (p-1)/(v m + p - 1).
    m = p * groups
    events = pl.pipeline_schedule(p, m, pl.INTERLEAVED, tf, tb, interleave=v)
    # Every pass of every chunk exactly once, each taking 1/v of the stage's time.
    assert Counter((e.stage, e.chunk, e.microbatch, e.phase) for e in events) == Counter(
        (s, c, i, ph) for s in range(p) for c in range(v) for i in range(m) for ph in "FB"
    )
    for e in events:
        assert e.end - e.start == pytest.approx((tf if e.phase == "F" else tb) / v)
    # Chunk c of stage s is virtual stage c p + s: forwards climb, backwards descend.
    end = {(e.phase, e.chunk * p + e.stage, e.microbatch): e.end for e in events}
    for e in events:
        vs = e.chunk * p + e.stage
        if e.phase == "F" and vs > 0:
            assert e.start >= end[("F", vs - 1, e.microbatch)] - 1e-12
        if e.phase == "B":
            assert e.start >= end[("F", vs, e.microbatch)] - 1e-12
            if vs < v * p - 1:
                assert e.start >= end[("B", vs + 1, e.microbatch)] - 1e-12
    for s in range(p):
        evs = sorted((e for e in events if e.stage == s), key=lambda e: e.start)
        for a, b in zip(evs, evs[1:]):
            assert b.start >= a.end - 1e-12
    assert pl.idle_fraction(events) == pytest.approx(pl.bubble_fraction(p, m, interleave=v), abs=1e-9)


def test_interleaving_shrinks_the_bubble():
    one = pl.idle_fraction(pl.pipeline_schedule(4, 8, "1f1b"))
    two = pl.idle_fraction(pl.pipeline_schedule(4, 8, pl.INTERLEAVED, interleave=2))
    assert one == pytest.approx(3 / 11)
    assert two == pytest.approx(3 / 19)


def test_small_gpipe_schedule_by_hand():
    ev = pl.pipeline_schedule(2, 2, "gpipe", 1.0, 2.0)
    got = [(e.stage, e.microbatch, e.phase, e.start, e.end) for e in ev]
    assert got == [
        (0, 0, "F", 0.0, 1.0),
        (0, 1, "F", 1.0, 2.0),
        (1, 0, "F", 1.0, 2.0),
        (1, 1, "F", 2.0, 3.0),
        (1, 0, "B", 3.0, 5.0),
        (0, 0, "B", 5.0, 7.0),
        (1, 1, "B", 5.0, 7.0),
        (0, 1, "B", 7.0, 9.0),
    ]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pl.bubble_fraction(0, 4), "p"),
        (lambda: pl.bubble_fraction(4, 0), "m"),
        (lambda: pl.bubble_fraction(4, 2.5), "m"),
        (lambda: pl.bubble_fraction(4, 8, "ratio"), "definition"),
        (lambda: pl.bubble_fraction(4, 8, interleave=0), "interleave"),
        (lambda: pl.pipeline_schedule(4, 8, "zb"), "kind"),
        (lambda: pl.pipeline_schedule(4, 6, "interleaved", interleave=2), "m must be a multiple"),
        (lambda: pl.pipeline_schedule(4, 8, "1f1b", interleave=2), "interleave"),
        (lambda: pl.pipeline_schedule(4, 8, "interleaved", interleave=0), "interleave"),
        (lambda: pl.pipeline_schedule(4, 8, t_fwd=0), "t_fwd"),
        (lambda: pl.pipeline_schedule(4, 8, t_bwd=float("nan")), "t_bwd"),
        (lambda: pl.pipeline_schedule(True, 8), "p"),
        (lambda: pl.peak_in_flight(pl.pipeline_schedule(2, 2), 2), "stage"),
        (lambda: pl.peak_in_flight(pl.pipeline_schedule(2, 2), -1), "stage"),
        (lambda: pl.deepspeed_order(4, 8, 4), "stage must be below p=4"),
        (lambda: pl.deepspeed_order(4, 0, 0), "m"),
    ],
)
def test_pipeline_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_simulate_orders_runs_given_orders_and_names_a_deadlock():
    from solutions.pipeline import _stage_order, simulate_orders

    for kind in ("gpipe", "1f1b"):
        orders = [_stage_order(kind, 3, 5, s) for s in range(3)]
        assert simulate_orders(orders) == pl.pipeline_schedule(3, 5, kind)
    # Stage 0 wants B(0) before its own F(0) (which B(0) needs): it waits forever.
    with pytest.raises(ValueError, match="stage 0 waits to run B\\(0\\)"):
        simulate_orders([[("B", 0), ("F", 0)], [("F", 0), ("B", 0)]])


def test_deepspeed_order_by_hand():
    # p=2, m=3: eight steps. Stage 0 forwards on the even steps (micro-batches 0, 1, 2 at
    # steps 0, 2, 4) and backwards on the odd ones (t//2 - 1: none at step 1, then 0, 1, 2);
    # stage 1 the other way round (forwards 0, 1, 2 at steps 1, 3, 5; backwards at 2, 4, 6).
    assert pl.deepspeed_order(2, 3, 0) == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("F", 2, 0), ("B", 1, 0), ("B", 2, 0)]
    assert pl.deepspeed_order(2, 3, 1) == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0), ("F", 2, 0), ("B", 2, 0)]
    # One stage: forward and backward alternate, micro-batch by micro-batch.
    assert pl.deepspeed_order(1, 2, 0) == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)]


@FAST
@given(p=stages, m=micro, tf=times, tb=times)
def test_deepspeed_schedule_is_1f1b(p, m, tf, tb):
    # DeepSpeed's step rule, written out per stage, is PipeDream-Flush's order: every
    # stage runs the same passes in the same order, so the step takes 1F1B's time.
    one = pl.pipeline_schedule(p, m, "1f1b", tf, tb)
    orders = [pl.deepspeed_order(p, m, s) for s in range(p)]
    for s in range(p):
        assert orders[s] == [(e.phase, e.microbatch, e.chunk) for e in one if e.stage == s]
    assert pl.makespan(pl.simulate_orders(orders, tf, tb)) == pytest.approx(pl.makespan(one), rel=1e-12)
