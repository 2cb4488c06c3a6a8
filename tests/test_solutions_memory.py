"""Unit and property tests for solutions.memory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import memory_per_gpu
from solutions import memory as mem

FAST = settings(max_examples=50, deadline=None)
gpu_counts = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 1024])
# Parameter counts that every GPU count above divides: multiples of 1024.
params = st.integers(min_value=1, max_value=10**9).map(lambda k: float(k * 1024))


# -- Exercise 3 -------------------------------------------------------------
def _exercise_memory_per_gpu(model_params, strategy, num_gpus):
    # The exercise's template, copied as the spec.
    BYTES_PER_PARAM_FULL = 12
    N = model_params
    if strategy == "dp":
        return BYTES_PER_PARAM_FULL * N
    return BYTES_PER_PARAM_FULL * N / num_gpus


@pytest.mark.parametrize("strategy", ["dp", "tp", "pp", "fsdp"])
@pytest.mark.parametrize("N, n", [(7e9, 8), (70e9, 64), (175e9, 1), (1e6, 1000)])
def test_memory_per_gpu_matches_exercise(strategy, N, n):
    assert memory_per_gpu(N, strategy, n) == pytest.approx(_exercise_memory_per_gpu(N, strategy, n), rel=1e-15)


def test_memory_per_gpu_chapter_figures():
    # 12 bytes/param: a 70B model needs 840 GB of model state on one GPU
    # (10.5 H100s' worth); FSDP over 64 GPUs leaves 13.125 GB each.
    assert memory_per_gpu(70e9, "dp", 64) == 840e9
    assert memory_per_gpu(70e9, "fsdp", 64) == pytest.approx(13.125e9)


@FAST
@given(N=params, n=gpu_counts, strategy=st.sampled_from(["tp", "pp", "fsdp"]))
def test_sharded_memory_times_gpus_equals_dp_total(N, n, strategy):
    # Proportional reduction: the shards add back up to one full replica.
    assert memory_per_gpu(N, strategy, n) * n == pytest.approx(memory_per_gpu(N, "dp", n), rel=1e-12)


def test_memory_per_gpu_arrays():
    N = np.array([8e9, 16e9, 64e9])
    np.testing.assert_allclose(memory_per_gpu(N, "fsdp", 8), 12 * N / 8)
    np.testing.assert_allclose(memory_per_gpu(N, "dp", 8), 12 * N)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model_params=0, strategy="dp", num_gpus=8), "model_params"),
        (dict(model_params=-7e9, strategy="dp", num_gpus=8), "model_params"),
        (dict(model_params=float("nan"), strategy="dp", num_gpus=8), "model_params"),
        (dict(model_params=float("inf"), strategy="fsdp", num_gpus=8), "model_params"),
        (dict(model_params=True, strategy="dp", num_gpus=8), "model_params"),
        (dict(model_params=7e9, strategy="zero", num_gpus=8), "strategy"),
        (dict(model_params=7e9, strategy="DP", num_gpus=8), "strategy"),
        (dict(model_params=7e9, strategy="dp", num_gpus=0), "num_gpus"),
        (dict(model_params=7e9, strategy="dp", num_gpus=-8), "num_gpus"),
        (dict(model_params=7e9, strategy="dp", num_gpus=2.5), "num_gpus"),
        (dict(model_params=7e9, strategy="tp", num_gpus=True), "num_gpus"),
        (dict(model_params=7e9, strategy="fsdp", num_gpus=float("nan")), "num_gpus"),
        # indivisible: 1e9 parameters cannot be split evenly over 3 GPUs
        (dict(model_params=1e9, strategy="fsdp", num_gpus=3), "divide"),
        (dict(model_params=7, strategy="tp", num_gpus=2), "divide"),
    ],
)
def test_memory_per_gpu_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        memory_per_gpu(**kwargs)


def test_unknown_strategy_message_lists_allowed():
    with pytest.raises(ValueError) as err:
        memory_per_gpu(7e9, "zero3", 8)
    for s in ("dp", "tp", "pp", "fsdp"):
        assert s in str(err.value)


def test_zero_message_is_specific():
    with pytest.raises(ValueError, match="num_gpus must be a positive integer, got 0"):
        memory_per_gpu(7e9, "dp", 0)


def test_dp_does_not_need_divisibility_and_float_gpu_counts_allowed():
    assert memory_per_gpu(1e9, "dp", 3) == 12e9
    assert memory_per_gpu(8e9, "tp", 8.0) == 12e9


# -- conventions ------------------------------------------------------------
def test_byte_conventions():
    totals = {k: c.total for k, c in mem.BYTE_CONVENTIONS.items()}
    assert totals == {"chapter_12": 12, "zero_16": 16, "fp32_grads_18": 18, "fp32_accum_20": 20,
                      "adam8bit_10": 10, "fp32_adamw_16": 16}
    assert mem.CHAPTER_BYTES_PER_PARAM == 12 and mem.ZERO_BYTES_PER_PARAM == 16
    for c in mem.BYTE_CONVENTIONS.values():
        # mixed-precision conventions keep 16-bit working weights; the labs' store fp32
        assert c.weights == (4 if c.name == "fp32_adamw_16" else 2)
        assert c.cite


# -- ZeRO -------------------------------------------------------------------
@pytest.mark.parametrize("stage, gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_example(stage, gb):
    # Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, N_d = 64, K = 12.
    assert round(mem.zero_memory_per_gpu(7.5e9, stage, 64) / 1e9, 1) == gb


def test_zero_stage_formulas():
    # Rajbhandari et al. 2020, sec. 5: 4P + 12P/Nd, 2P + 14P/Nd, 16P/Nd.
    P, d = 1e9, 8
    assert mem.zero_memory_per_gpu(P, 1, d) == pytest.approx(4 * P + 12 * P / d)
    assert mem.zero_memory_per_gpu(P, 2, d) == pytest.approx(2 * P + 14 * P / d)
    assert mem.zero_memory_per_gpu(P, 3, d) == pytest.approx(16 * P / d)


@FAST
@given(P=params, d=gpu_counts, conv=st.sampled_from(sorted(mem.BYTE_CONVENTIONS)))
def test_zero_stages_monotone(P, d, conv):
    m = [mem.zero_memory_per_gpu(P, s, d, conv) for s in range(4)]
    if d == 1:
        assert m[0] == m[1] == m[2] == m[3]
    else:
        assert m[0] > m[1] > m[2] > m[3]
    assert m[0] == pytest.approx(mem.BYTE_CONVENTIONS[conv].total * P)
    assert m[3] * d == pytest.approx(m[0])


def test_zero_stage3_with_chapter_convention_equals_fsdp_exercise():
    assert mem.zero_memory_per_gpu(7e9, 3, 8, "chapter_12") == pytest.approx(memory_per_gpu(7e9, "fsdp", 8))
    custom = mem.ByteConvention("custom", 2, 2, 8, "same as the chapter", "x")
    assert mem.zero_memory_per_gpu(7e9, 0, 8, custom) == 84e9


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model_params=7e9, stage=4, dp_degree=8), "stage"),
        (dict(model_params=7e9, stage=-1, dp_degree=8), "stage"),
        (dict(model_params=7e9, stage=1.5, dp_degree=8), "stage"),
        (dict(model_params=7e9, stage=1, dp_degree=0), "dp_degree"),
        (dict(model_params=7e9, stage=1, dp_degree=8, convention="fp8"), "convention"),
        (dict(model_params=0, stage=1, dp_degree=8), "model_params"),
    ],
)
def test_zero_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mem.zero_memory_per_gpu(**kwargs)


# -- 3D ---------------------------------------------------------------------
@FAST
@given(P=params, tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), dp=gpu_counts,
       stage=st.sampled_from([0, 1, 2, 3]))
def test_3d_shards_over_dp_only(P, tp, pp, dp, stage):
    got = mem.memory_per_gpu_3d(P, tp, pp, dp, zero_stage=stage)
    assert got == pytest.approx(mem.zero_memory_per_gpu(P / (tp * pp), stage, dp))
    if stage == 3:
        assert got == pytest.approx(16 * P / (tp * pp * dp))


def test_3d_llama3_layout():
    # Dubey et al. 2024: 405B on TP8 x PP16 x DP64. With ZeRO-1 (16 B/param):
    # shard = 405e9/128 params; 4 bytes local + 12/64 sharded.
    shard = 405e9 / 128
    want = 4 * shard + 12 * shard / 64
    assert mem.memory_per_gpu_3d(405e9, 8, 16, 64, zero_stage=1) == pytest.approx(want)
    # FSDP over all 8192 GPUs would be the wrong divisor: 16 * 405e9 / 8192.
    assert mem.memory_per_gpu_3d(405e9, 8, 16, 64, zero_stage=3) == pytest.approx(16 * 405e9 / 8192)


# -- activations ------------------------------------------------------------
def test_activation_memory_formulas():
    # Korthikanti et al. 2022, Table 2, with s=2048, b=1, h=12288, a=96 (GPT-3 175B), t=8.
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert mem.activation_memory_per_layer(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert mem.activation_memory_per_layer(s, b, h, a, tp=t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert mem.activation_memory_per_layer(s, b, h, a, tp=t, sequence_parallel=True) == pytest.approx(
        sbh / t * (34 + 5 * a * s / h))
    assert mem.activation_memory_per_layer(s, b, h, a, tp=t, full_recompute=True) == 2 * sbh


def test_selective_recompute_saves_70_percent_for_gpt3():
    # Korthikanti et al. 2022, sec. 5: for GPT-3, 5as/h = 80, so dropping the
    # attention term saves 80/114 ~ 70% of activation memory.
    full = mem.activation_memory_per_layer(2048, 1, 12288, 96)
    sel = mem.activation_memory_per_layer(2048, 1, 12288, 96, selective_recompute=True)
    assert 1 - sel / full == pytest.approx(0.70, abs=0.01)


@FAST
@given(s=st.integers(1, 8192), b=st.integers(1, 16), h=st.sampled_from([512, 1024, 4096, 12288]),
       a=st.sampled_from([8, 16, 32]), t=st.sampled_from([1, 2, 4, 8]))
def test_activation_orderings(s, b, h, a, t):
    base = mem.activation_memory_per_layer(s, b, h, a, tp=t)
    sp = mem.activation_memory_per_layer(s, b, h, a, tp=t, sequence_parallel=True)
    full = mem.activation_memory_per_layer(s, b, h, a, tp=t, full_recompute=True)
    assert sp <= base * (1 + 1e-12)
    assert full <= sp  # 2 sbh <= (34/t) sbh for every t <= 17
    if t == 1:
        assert sp == pytest.approx(base)  # SP is a no-op without TP


def test_activation_bad_input():
    with pytest.raises(ValueError, match="heads"):
        mem.activation_memory_per_layer(2048, 1, 4096, 0)
    with pytest.raises(ValueError, match="sequence_parallel"):
        mem.activation_memory_per_layer(2048, 1, 4096, 32, sequence_parallel="yes")
    with pytest.raises(ValueError, match="recompute"):
        mem.activation_memory_per_layer(2048, 1, 4096, 32, full_recompute=True, selective_recompute=True)


# -- breakdown --------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["dp", "tp", "pp", "fsdp"])
def test_breakdown_sums_to_exercise(strategy):
    parts = mem.memory_breakdown(7e9, strategy, 8)
    assert set(parts) == {"weights", "grads", "optimizer"}
    assert sum(parts.values()) == pytest.approx(memory_per_gpu(7e9, strategy, 8))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_breakdown_zero_matches_zero_memory(stage):
    parts = mem.memory_breakdown(7.5e9, f"zero{stage}", 64, convention="zero_16")
    assert sum(parts.values()) == pytest.approx(mem.zero_memory_per_gpu(7.5e9, stage, 64))


def test_breakdown_components():
    parts = mem.memory_breakdown(1e9, "zero2", 4, convention="zero_16")
    assert parts == pytest.approx({"weights": 2e9, "grads": 0.5e9, "optimizer": 3e9})
    assert mem.memory_breakdown(1e9, "fsdp", 4) == mem.memory_breakdown(1e9, "zero3", 4)
    with pytest.raises(ValueError, match="strategy"):
        mem.memory_breakdown(1e9, "zero4", 4)
