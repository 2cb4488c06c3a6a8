"""The schedules that split the backward pass (solutions.pipeline: ZB-H1, ZB-H2, DualPipe)
against the rules their papers state: every pass present once and in dependency order, the
bubble formulas of Qi et al. 2024 (Table 2) and of DeepSeek-V3's report (Table 2) with the
three passes of equal length, and the activation memory each schedule is known for."""
from __future__ import annotations

import pytest

from solutions import efficiency, pipeline as pl

SPLIT = pl.ZERO_BUBBLE + (pl.DUALPIPE,)
CASES = [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 32)]


def check_valid(events, p, m, kind):
    """Each (stage, micro-batch) runs F, B and W once; W after B after F on the same stage;
    F follows the previous position's F and B the next position's B on the micro-batch's
    path; a stage runs one pass at a time."""
    by = {(e.stage, e.microbatch, e.phase): e for e in events}
    assert len(by) == len(events) == 3 * p * m
    for s in range(p):
        mine = sorted((e for e in events if e.stage == s), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:])), (kind, s)
    for i in range(m):
        # the stages the micro-batch visits, in order
        if kind == pl.DUALPIPE and i >= m // 2:
            path = list(reversed(range(p)))
        else:
            path = list(range(p))
        for k, s in enumerate(path):
            f, b, w = by[(s, i, "F")], by[(s, i, "B")], by[(s, i, "W")]
            assert f.end <= b.start + 1e-12 and b.end <= w.start + 1e-12
            if k:
                assert by[(path[k - 1], i, "F")].end <= f.start + 1e-12
            if k < p - 1:
                assert by[(path[k + 1], i, "B")].end <= b.start + 1e-12


@pytest.mark.parametrize("kind", SPLIT)
@pytest.mark.parametrize("p, m", CASES)
def test_every_pass_once_and_in_order(kind, p, m):
    check_valid(pl.pipeline_schedule(p, m, kind), p, m, kind)


@pytest.mark.parametrize("p, m", CASES)
def test_zb_h1_bubble_is_the_formula(p, m):
    """Equal F, B, W of one unit each: idle (p-1)(t_f + t_b - t_w) per stage (Qi et al. 2024,
    Table 2), a third of 1F1B's (p-1)(t_f + t_b + t_w), at 1F1B's memory (p - s in flight)."""
    ev = pl.pipeline_schedule(p, m, "zb-h1", 1.0, 2.0, t_w=1.0)
    idle = pl.makespan(ev) - 3 * m
    assert idle == pytest.approx((p - 1) * (1 + 1 - 1))
    assert idle / (3 * m) == pytest.approx(efficiency.pipeline_bubble(p, m, "zb-h1"))
    one = pl.pipeline_schedule(p, m, "1f1b", 1.0, 2.0)
    assert pl.makespan(one) - 3 * m == pytest.approx(3 * idle)
    for s in range(p):
        assert pl.peak_in_flight(ev, s) == pl.peak_in_flight(one, s) == min(p - s, m)


@pytest.mark.parametrize("p, m", CASES)
def test_zb_h2_has_no_idle_inside_a_stage(p, m):
    """ZB-H2 with equal passes: no stage waits between its first pass and its last (Qi et al.
    2024: zero bubble once the optimizer's synchronisation is gone), at 2p - 1 micro-batches
    in flight on the first stage."""
    ev = pl.pipeline_schedule(p, m, "zb-h2", 1.0, 2.0)
    assert pl.inner_idle_fraction(ev) == pytest.approx(0.0, abs=1e-12)
    assert efficiency.pipeline_bubble(p, m, "zb-h2") == 0.0
    assert pl.peak_in_flight(ev, 0) == min(efficiency.peak_stashed_microbatches(p, "zb-h2"), m)


@pytest.mark.parametrize("p, m", [(4, 8), (6, 12), (8, 16), (8, 20), (8, 32)])
def test_dualpipe_bubble_and_memory(p, m):
    """DualPipe with equal passes t: (p/2 - 1) t idle, the printed (PP/2 - 1)(F&B + B - 3W)
    with F&B = F + B and B a whole backward; p + 1 micro-batches' activations on the first
    GPU (DeepSeek-V3 report, Table 2); two chunks (directions) per GPU."""
    ev = pl.pipeline_schedule(p, m, pl.DUALPIPE, 1.0, 2.0)
    assert pl.makespan(ev) - 3 * m == pytest.approx((p / 2 - 1) * 1.0)
    assert pl.dualpipe_bubble(p, m) == pytest.approx((p / 2 - 1) / (3 * m))
    assert pl.peak_in_flight(ev, 0) == p + 1
    assert {e.chunk for e in ev} == {0, 1}
    assert all(e.chunk == (e.microbatch >= m // 2) for e in ev)


def test_split_schedules_beat_1f1b_in_this_order():
    p, m = 8, 16
    span = {k: pl.makespan(pl.pipeline_schedule(p, m, k)) for k in ("1f1b", "zb-h1", "dualpipe")}
    assert span["dualpipe"] < span["zb-h1"] < span["1f1b"]


def test_other_pass_lengths_stay_valid():
    for kind in SPLIT:
        ev = pl.pipeline_schedule(8, 16, kind, 1.0, 2.5, t_w=0.5)
        check_valid(ev, 8, 16, kind)
        assert sum(e.end - e.start for e in ev) == pytest.approx(8 * 16 * 3.5)


@pytest.mark.parametrize("call, match", [
    (lambda: pl.pipeline_schedule(5, 10, "dualpipe"), "even p"),
    (lambda: pl.pipeline_schedule(4, 6, "dualpipe"), "at least 2p"),
    (lambda: pl.pipeline_schedule(4, 8, "zb-h1", t_w=2.0), "t_w"),
    (lambda: pl.pipeline_schedule(4, 8, "1f1b", t_w=1.0), "t_w"),
    (lambda: pl.pipeline_schedule(4, 8, "zb-h3"), "kind"),
    (lambda: pl.simulate_orders([[("W", 0)]]), "t_w"),
    (lambda: pl.dualpipe_bubble(3, 8), "even p"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
