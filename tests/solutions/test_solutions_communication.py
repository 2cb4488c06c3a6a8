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
    assert comm.ring_allreduce_factor(n) == pytest.approx(2 * (n - 1) / n, rel=1e-15)
    assert comm.allgather_factor(n) == comm.reduce_scatter_factor(n) == pytest.approx((n - 1) / n, rel=1e-15)
    assert comm.ring_allreduce_factor(n) == pytest.approx(comm.reduce_scatter_factor(n) + comm.allgather_factor(n))
    assert comm.ring_allreduce_factor(n) < 2
    assert comm.ring_allreduce_steps(n) == 2 * n - 2


def test_bytes_per_rank():
    assert comm.allreduce_bytes_per_rank(1e9, 4) == 1.5e9
    assert comm.allreduce_bytes_per_rank(1.2e9, 3) == pytest.approx(1.6e9)  # 2 x 2/3 of the buffer
    assert comm.allgather_bytes_per_rank(1.2e9, 6) == pytest.approx(1e9)  # 5/6 of the buffer
    assert comm.allgather_bytes_per_rank(1e9, 4) == 0.75e9
    assert comm.reduce_scatter_bytes_per_rank(1e9, 4) == 0.75e9


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, float("nan"), "8"])
def test_ring_factor_bad_n(bad):
    with pytest.raises(ValueError, match="n must be a positive integer"):
        comm.ring_allreduce_factor(bad)


# -- ring simulation ----------------------------------------------------------
# Element sizes of 1, 2, 4 and 8 bytes, so byte counts cannot assume 4 bytes per element.
RING_DTYPES = {np.int8: 1, np.int16: 2, np.float16: 2, np.int32: 4, np.float32: 4, np.int64: 8, np.float64: 8}


@FAST
@given(n=st.integers(1, 9), k=st.integers(1, 4), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from(sorted(RING_DTYPES, key=lambda t: t.__name__)))
def test_ring_simulation_sums_and_counts_bytes(n, k, seed, dtype):
    rng = np.random.default_rng(seed)
    # Small integers: every partial sum (at most 9 x 12 = 108 in size) is exact in every dtype.
    data = rng.integers(-12, 13, size=(n, n, k)).astype(dtype)
    res = comm.simulate_ring_allreduce(data)
    total = data.astype(np.int64).sum(axis=0)
    for r in range(n):
        np.testing.assert_array_equal(res.final[r].astype(np.int64), total)
    # Each rank sends 2(n-1) chunks of k elements: 2(n-1)/n of its n k-element buffer.
    size = RING_DTYPES[dtype]
    assert len(res.steps) == 2 * (n - 1)
    assert res.buffer_bytes == n * k * size
    np.testing.assert_array_equal(res.bytes_sent_per_rank, [2 * (n - 1) * k * size] * n)


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


# -- Exercise 4(b): per axis ------------------------------------------------
from solutions import communication_time_per_step_by_axis  # noqa: E402


def test_by_axis_worked_out_by_hand():
    # 8e9 parameters on TP2 x PP2 x DP4, 8 layers, one 1,000-token sequence of width 1,000 per
    # micro-batch, 3 micro-batches, 200 GB/s inside a server, 20 GB/s between servers.
    # DP: 2e9 parameters' bf16 gradients (4e9 bytes), ring factor 1.5: 6e9 bytes on 20 GB/s.
    # TP: 4 layers x 3 micro-batches x 4 all-reduces x factor 1 x 2e6 bytes = 9.6e7 on 200 GB/s.
    # PP: two stages, one send per micro-batch: 3 x 2e6 = 6e6 bytes on 20 GB/s.
    dp, tp, pp = communication_time_per_step_by_axis(8e9, 4, 2, 2, 8, 1000, 1, 3, 1000, 200, 20)
    assert (dp, tp, pp) == pytest.approx((6e9 / 20e9, 9.6e7 / 200e9, 6e6 / 20e9), rel=1e-14)
    assert communication_time_per_step_by_axis(8e9, 1, 1, 1, 8, 1000, 1, 3, 1000, 200, 20) == (0.0, 0.0, 0.0)


@FAST
@given(dp=st.integers(1, 512), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 3, 4, 8, 16]),
       per_stage=st.integers(1, 12), m=st.integers(1, 64), b=st.integers(1, 8))
def test_by_axis_is_the_breakdown_with_tp_inside_a_server(dp, tp, pp, per_stage, m, b):
    """One source of truth: part (b) of Exercise 4 is communication_breakdown, in GB/s."""
    L = pp * per_stage
    mine = communication_time_per_step_by_axis(70e9, dp, tp, pp, L, 4096, b, m, 8192, 450, 50)
    theirs = comm.communication_breakdown(70e9, dp, tp, pp, L, 4096, b, m, 8192,
                                          intra_node_bw=450e9, inter_node_bw=50e9)
    assert mine == pytest.approx(tuple(theirs[axis]["seconds"] for axis in ("dp", "tp", "pp")), rel=1e-12)


def test_by_axis_against_part_a():
    """Part (a)'s factor 2 and forward-only all-reduces, against part (b) at one bandwidth."""
    a = communication_time_per_step(7e9, 16, 4, 32, 4096, 2, 4096, 0.45)
    b = sum(communication_time_per_step_by_axis(7e9, 16, 4, 1, 32, 4096, 2, 1, 4096, 450, 450))
    # DP: (a) 4P bytes, (b) 2 x 15/16 x 2P / 4 bytes; TP: (a) 2 all-reduces x factor 1, (b) 4 x 1.5.
    by_hand = (2 * 15 / 16 * 2 * 7e9 / 4 + 32 * 4 * 1.5 * 2 * 2 * 4096 * 4096) / 450e9
    assert b == pytest.approx(by_hand, rel=1e-12) and a != pytest.approx(b, rel=0.05)


@pytest.mark.parametrize("index, bad, match", [
    (0, 0, "model_params"), (1, 0, "dp_degree"), (2, 1.5, "tp_degree"), (3, True, "pp_degree"),
    (4, 30, "pp_degree must divide num_layers"), (7, 0, "num_microbatches"), (9, 0, "intra_node_gb_s"),
    (10, float("inf"), "inter_node_gb_s"),
])
def test_by_axis_bad_input(index, bad, match):
    args = [7e9, 16, 4, 4, 32, 4096, 2, 8, 4096, 450, 50]
    args[index] = bad
    with pytest.raises(ValueError, match=match):
        communication_time_per_step_by_axis(*args)


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
    # By hand: shards of 70e9 / 32 parameters, 2 bytes each, 3 x 7/8 of them sent.
    assert comm.communication_breakdown(**BASE, zero_stage=3)["dp"]["bytes"] == pytest.approx(
        70e9 / 32 * 2 * 3 * 7 / 8)


def test_breakdown_degenerate_axes_are_free():
    out = comm.communication_breakdown(**{**BASE, "dp": 1, "tp": 1, "pp": 1})
    assert out["dp"]["bytes"] == out["tp"]["bytes"] == out["pp"]["bytes"] == 0
    two = comm.communication_breakdown(**{**BASE, "pp": 2})
    assert two["pp"]["bytes"] == pytest.approx(2 * 16 * 4096 * 8192)  # one send per micro-batch


def test_two_stage_pipeline_sends_one_way_per_microbatch():
    # Two stages: stage 0 sends activations, stage 1 sends gradients back; each stage sends
    # only one of them. 3 micro-batches of 2 x 64 x 32 = 4096 elements, 4 bytes each.
    small = dict(model_params=1e6, dp=1, tp=1, num_layers=4, seq_len=64, micro_batch=2,
                 num_microbatches=3, d_model=32, bytes_per_element=4, inter_node_bw=1e9)
    two = comm.communication_breakdown(**small, pp=2)
    assert two["pp"]["bytes"] == 3 * 4096 * 4 == 49_152
    assert two["pp"]["seconds"] == pytest.approx(49_152 / 1e9)
    # An interior stage (four stages) sends both: twice as much.
    assert comm.communication_breakdown(**small, pp=4)["pp"]["bytes"] == 98_304


def test_breakdown_tp_across_nodes_uses_inter_node_bandwidth():
    out = comm.communication_breakdown(**{**BASE, "tp": 16, "pp": 2})
    assert out["tp"]["seconds"] == pytest.approx(out["tp"]["bytes"] / comm.DEFAULT_INTER_NODE_BW)


def test_tp_over_nvlink_while_it_fits_in_a_node():
    # 4 GPUs per node: TP4 fits (intra-node 100 B/s here), TP8 spills over (inter-node 1 B/s).
    small = dict(model_params=1e6, dp=1, pp=1, num_layers=1, seq_len=1, micro_batch=1, num_microbatches=1,
                 d_model=100, bytes_per_element=1, intra_node_bw=100.0, inter_node_bw=1.0, gpus_per_node=4)
    # TP4: 4 all-reduces x 100 elements x 2 x 3/4 = 600 bytes in 6 s; TP8: 700 bytes in 700 s.
    four = comm.communication_breakdown(**small, tp=4)["tp"]
    eight = comm.communication_breakdown(**small, tp=8)["tp"]
    assert (four["bytes"], four["seconds"]) == (pytest.approx(600), pytest.approx(6))
    assert (eight["bytes"], eight["seconds"]) == (pytest.approx(700), pytest.approx(700))
    # The defaults: H100 NVLink, 450 GB/s each way; one 400 Gb/s NIC per GPU, 50 GB/s.
    assert (comm.DEFAULT_INTRA_NODE_BW, comm.DEFAULT_INTER_NODE_BW) == (450e9, 50e9)


@FAST
@given(tp=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), pp=st.sampled_from([1, 2, 4, 5, 8, 10, 16]),
       dp=st.sampled_from([1, 2, 3, 6, 8, 12, 96, 512]), stage=st.sampled_from([0, 1, 2, 3]))
def test_dp_volume_shrinks_with_model_sharding(tp, pp, dp, stage):
    # Every axis written out for BASE's 70e9 parameters, 80 layers, 16 micro-batches of
    # 1 x 4096 x 8192 activations, 2 bytes per element.
    out = comm.communication_breakdown(**{**BASE, "tp": tp, "pp": pp, "dp": dp, "zero_stage": stage})
    moves = 3 if stage == 3 else 2  # ZeRO-3 all-gathers the weights once more
    dp_bytes = 2 * 70e9 / (tp * pp) * moves * (dp - 1) / dp
    # 4 all-reduces per layer and micro-batch, over the 80/pp layers this GPU holds.
    tp_bytes = (80 / pp) * 16 * 4 * (4096 * 8192) * 2 * (tp - 1) / tp * 2
    # Point-to-point: none alone, one direction per boundary with two stages, both inside.
    pp_bytes = {1: 0, 2: 1}.get(pp, 2) * 16 * 4096 * 8192 * 2
    assert out["dp"]["bytes"] == pytest.approx(dp_bytes, rel=1e-12, abs=0)
    assert out["tp"]["bytes"] == pytest.approx(tp_bytes, rel=1e-12, abs=0)
    assert out["pp"]["bytes"] == pytest.approx(pp_bytes, rel=1e-12, abs=0)
    # TP rides NVLink (450e9 B/s) while it fits in an 8-GPU node, the NICs (50e9 B/s) beyond.
    tp_bw = 450e9 if tp <= 8 else 50e9
    assert out["tp"]["seconds"] == pytest.approx(tp_bytes / tp_bw, rel=1e-12, abs=0)
    assert out["dp"]["seconds"] == pytest.approx(dp_bytes / 50e9, rel=1e-12, abs=0)
    assert out["pp"]["seconds"] == pytest.approx(pp_bytes / 50e9, rel=1e-12, abs=0)


def test_tensor_parallel_four_allreduces_by_hand():
    # Megatron: 2 all-reduces forward and 2 backward of b s h elements per layer. With
    # b s h = 2 x 5 x 10 = 100 elements on 4 GPUs: 4 x 100 x 2 x 3/4 = 600 elements.
    assert comm.tensor_parallel_bytes_per_layer(2, 5, 10, 4, bytes_per_element=1) == pytest.approx(600)
    assert comm.tensor_parallel_bytes_per_layer(2, 5, 10, 4) == pytest.approx(1200)  # bf16 by default
    assert comm.tensor_parallel_bytes_per_layer(1, 10, 10, 3, bytes_per_element=4) == pytest.approx(
        4 * 100 * 2 * 2 / 3 * 4)
    assert comm.tensor_parallel_bytes_per_layer(4, 8, 16, 1) == 0  # no tensor parallelism, no traffic


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
