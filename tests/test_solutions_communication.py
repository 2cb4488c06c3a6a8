"""Unit and property tests for solutions.communication."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import communication as comm
from solutions import communication_time_per_step

FAST = settings(max_examples=50, deadline=None)


# -- ring factors (nccl-tests PERFORMANCE.md) --------------------------------
def test_ring_factors_known_values():
    assert comm.ring_allreduce_factor(1) == 0
    assert comm.ring_allreduce_factor(2) == 1
    assert comm.ring_allreduce_factor(8) == 1.75
    assert comm.allgather_factor(8) == 0.875
    assert comm.reduce_scatter_factor(4) == 0.75
    assert comm.ring_allreduce_steps(8) == 14
    np.testing.assert_allclose(comm.ring_allreduce_factor(np.array([2, 4])), [1.0, 1.5])


@FAST
@given(n=st.integers(1, 10_000))
def test_allreduce_is_reduce_scatter_plus_allgather(n):
    assert comm.ring_allreduce_factor(n) == pytest.approx(comm.reduce_scatter_factor(n) + comm.allgather_factor(n))
    assert comm.ring_allreduce_factor(n) < 2


def test_bytes_per_rank():
    assert comm.allreduce_bytes_per_rank(1e9, 4) == 1.5e9
    assert comm.allgather_bytes_per_rank(1e9, 4) == 0.75e9
    assert comm.reduce_scatter_bytes_per_rank(1e9, 4) == 0.75e9


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, float("nan"), "8"])
def test_ring_factor_bad_n(bad):
    with pytest.raises(ValueError, match="n must be a positive integer"):
        comm.ring_allreduce_factor(bad)


# -- ring simulation ----------------------------------------------------------
@FAST
@given(n=st.integers(1, 9), k=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_ring_simulation_sums_and_counts_bytes(n, k, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(-1000, 1000, size=(n, n, k))  # integers: exact sums
    res = comm.simulate_ring_allreduce(data)
    total = data.sum(axis=0)
    for r in range(n):
        np.testing.assert_array_equal(res.final[r], total)
    # Each rank sends 2(n-1) chunks of k elements = 2(n-1)/n of its buffer.
    assert len(res.steps) == comm.ring_allreduce_steps(n)
    assert res.buffer_bytes == data[0].nbytes
    expected = comm.ring_allreduce_factor(n) * data[0].nbytes
    np.testing.assert_allclose(res.bytes_sent_per_rank, expected)


def test_ring_simulation_does_not_modify_input_and_records_steps():
    data = np.arange(9.0).reshape(3, 3)
    before = data.copy()
    res = comm.simulate_ring_allreduce(data)
    np.testing.assert_array_equal(data, before)
    phases = [s.phase for s in res.steps]
    assert phases == ["reduce-scatter"] * 2 + ["all-gather"] * 2
    # After reduce-scatter rank r owns the full sum of chunk (r+1) % n.
    after_rs = res.steps[1].state
    col_sums = before.sum(axis=0)
    for r in range(3):
        assert after_rs[r, (r + 1) % 3] == col_sums[(r + 1) % 3]
    # In every step, each rank sends a different chunk (no link is idle).
    for s in res.steps:
        assert sorted(s.sends) == [0, 1, 2]


def test_ring_simulation_float_2d():
    data = np.random.default_rng(0).normal(size=(5, 5))
    res = comm.simulate_ring_allreduce(data)
    np.testing.assert_allclose(res.final, np.broadcast_to(data.sum(axis=0), (5, 5)), rtol=1e-12)


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), np.zeros(4), np.array([[1.0, np.nan], [0, 0]]),
                                 np.array([["a", "b"], ["c", "d"]]), np.zeros((2, 2), dtype=bool)])
def test_ring_simulation_bad_input(bad):
    with pytest.raises(ValueError, match="chunks_per_rank"):
        comm.simulate_ring_allreduce(bad)


# -- Exercise 4 -------------------------------------------------------------
def _exercise_template(model_params, dp_rank, tp_rank, num_layers, seq_len, batch_size, d_model, bandwidth_tb_s):
    # The exercise's template, copied as the spec.
    bandwidth_bytes_s = bandwidth_tb_s * 1e12
    dp_volume = 2 * (2 * model_params)
    tp_per_layer = 2 * (2 * batch_size * seq_len * d_model)
    tp_volume = num_layers * tp_per_layer
    return (dp_volume + tp_volume) / bandwidth_bytes_s


@pytest.mark.parametrize(
    "args",
    [
        (7e9, 8, 8, 32, 2048, 4, 4096, 0.9),
        (175e9, 64, 8, 96, 2048, 1, 12288, 0.45),
        (1e6, 1, 1, 1, 1, 1, 1, 1e-6),
    ],
)
def test_communication_time_matches_exercise(args):
    assert communication_time_per_step(*args) == pytest.approx(_exercise_template(*args), rel=1e-14)


def test_communication_time_hand_computed():
    # 1e9 params: 4e9 bytes of DP; 2 layers * 4 * (1*10*10) = 800 bytes of TP; 1 TB/s.
    assert communication_time_per_step(1e9, 2, 2, 2, 10, 1, 10, 1.0) == pytest.approx((4e9 + 800) / 1e12)


@FAST
@given(dp=st.integers(1, 1024), tp=st.integers(1, 64))
def test_communication_time_ignores_degrees(dp, tp):
    # As the exercise states: the degrees do not enter its estimate.
    base = communication_time_per_step(7e9, 1, 1, 32, 2048, 4, 4096, 0.9)
    assert communication_time_per_step(7e9, dp, tp, 32, 2048, 4, 4096, 0.9) == base


@pytest.mark.parametrize(
    "index, bad, match",
    [
        (0, 0, "model_params"),
        (0, float("nan"), "model_params"),
        (1, 0, "dp_rank"),
        (1, True, "dp_rank"),
        (2, 1.5, "tp_rank"),
        (3, -1, "num_layers"),
        (4, 0, "seq_len"),
        (5, float("inf"), "batch_size"),
        (6, 0, "d_model"),
        (7, 0, "bandwidth_tb_s"),
        (7, float("inf"), "bandwidth_tb_s"),
        (7, -0.9, "bandwidth_tb_s"),
    ],
)
def test_communication_time_bad_input(index, bad, match):
    args = [7e9, 8, 8, 32, 2048, 4, 4096, 0.9]
    args[index] = bad
    with pytest.raises(ValueError, match=match):
        communication_time_per_step(*args)


# -- breakdown --------------------------------------------------------------
BASE = dict(model_params=70e9, dp=8, tp=8, pp=4, num_layers=80, seq_len=4096, micro_batch=1,
            num_microbatches=16, d_model=8192)


def test_breakdown_by_hand():
    out = comm.communication_breakdown(**BASE)
    P, d, t, p, L, s, b, m, h = 70e9, 8, 8, 4, 80, 4096, 1, 16, 8192
    dp_bytes = 2 * (P / (t * p)) * 2 * (d - 1) / d
    # Megatron: 8bsh(t-1)/t elements per layer per micro-batch (Narayanan et al. 2021).
    tp_bytes = 2 * (L / p) * m * 8 * b * s * h * (t - 1) / t
    pp_bytes = 2 * 2 * m * b * s * h  # interior stage: activations out + gradients back
    assert out["dp"]["bytes"] == pytest.approx(dp_bytes)
    assert out["tp"]["bytes"] == pytest.approx(tp_bytes)
    assert out["pp"]["bytes"] == pytest.approx(pp_bytes)
    assert out["dp"]["seconds"] == pytest.approx(dp_bytes / comm.DEFAULT_INTER_NODE_BW)
    assert out["tp"]["seconds"] == pytest.approx(tp_bytes / comm.DEFAULT_INTRA_NODE_BW)
    assert out["pp"]["seconds"] == pytest.approx(pp_bytes / comm.DEFAULT_INTER_NODE_BW)
    assert out["total"]["bytes"] == pytest.approx(dp_bytes + tp_bytes + pp_bytes)
    assert out["total"]["seconds"] == pytest.approx(sum(out[k]["seconds"] for k in ("dp", "tp", "pp")))


def test_breakdown_zero3_is_one_and_a_half_dp():
    # Rajbhandari et al. 2020, sec. 7.2.2: ZeRO-3 moves 3P instead of 2P.
    plain = comm.communication_breakdown(**BASE)["dp"]["bytes"]
    for stage in (1, 2):
        assert comm.communication_breakdown(**BASE, zero_stage=stage)["dp"]["bytes"] == pytest.approx(plain)
    assert comm.communication_breakdown(**BASE, zero_stage=3)["dp"]["bytes"] == pytest.approx(1.5 * plain)


def test_breakdown_degenerate_axes_are_free():
    out = comm.communication_breakdown(**{**BASE, "dp": 1, "tp": 1, "pp": 1})
    assert out["dp"]["bytes"] == out["tp"]["bytes"] == out["pp"]["bytes"] == 0
    two = comm.communication_breakdown(**{**BASE, "pp": 2})
    assert two["pp"]["bytes"] == pytest.approx(2 * 16 * 4096 * 8192)  # one send per micro-batch


def test_breakdown_tp_across_nodes_uses_inter_node_bandwidth():
    out = comm.communication_breakdown(**{**BASE, "tp": 16, "pp": 2})
    assert out["tp"]["seconds"] == pytest.approx(out["tp"]["bytes"] / comm.DEFAULT_INTER_NODE_BW)


@FAST
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]), dp=st.integers(1, 512))
def test_dp_volume_shrinks_with_model_sharding(tp, pp, dp):
    out = comm.communication_breakdown(**{**BASE, "tp": tp, "pp": pp, "dp": dp})
    unsharded = 2 * 70e9 * comm.ring_allreduce_factor(dp)
    assert out["dp"]["bytes"] * tp * pp == pytest.approx(unsharded)
    # TP volume per layer per micro-batch matches the helper.
    per_layer = comm.tensor_parallel_bytes_per_layer(1, 4096, 8192, tp)
    assert out["tp"]["bytes"] == pytest.approx(per_layer * 16 * 80 / pp)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"num_layers": 81}, "pp must divide num_layers"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"inter_node_bw": 0}, "inter_node_bw"),
        ({"dp": 0}, "dp"),
        ({"bytes_per_element": float("nan")}, "bytes_per_element"),
        ({"gpus_per_node": True}, "gpus_per_node"),
    ],
)
def test_breakdown_bad_input(change, match):
    with pytest.raises(ValueError, match=match):
        comm.communication_breakdown(**{**BASE, **change})
