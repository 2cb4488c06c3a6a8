"""Unit and property tests for solutions.memory."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import memory_per_gpu
from solutions import memory as mem

FAST = settings(max_examples=50, deadline=None)
# Powers of two and the counts real clusters also use: 3 and 6 GPUs, 12 (1.5 nodes), 96 (12 nodes).
gpu_counts = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 96, 128, 256, 1024])
# Any whole parameter count, odd ones included (ZeRO and 3D have no divisibility rule).
params = st.integers(min_value=1, max_value=10**12).map(float)

#: (weights, grads, optimizer) bytes per parameter of each convention, typed from the
#: sources (see solutions.memory's docstrings), so a changed table entry fails here.
CONVENTION_BYTES = {
    "chapter_12": (2, 2, 8),
    "zero_16": (2, 2, 12),
    "fp32_grads_18": (2, 4, 12),
    "fp32_accum_20": (2, 6, 12),
    "adam8bit_10": (2, 2, 6),
    "fp32_adamw_16": (4, 4, 8),
}


def _zero_by_hand(P, stage, d, w=2, g=2, o=12):
    """ZeRO's per-GPU model state written out (Rajbhandari et al. 2020, sec. 5): stage 1
    divides the optimizer by N_d, stage 2 also the gradients, stage 3 also the weights."""
    return {
        0: (w + g + o) * P,
        1: (w + g) * P + o * P / d,
        2: w * P + (g + o) * P / d,
        3: (w + g + o) * P / d,
    }[stage]


@st.composite
def divisible_params(draw):
    """(N, n) with n dividing N: N = k n for any whole k, so N is odd whenever k and n are."""
    n = draw(gpu_counts)
    k = draw(st.integers(min_value=1, max_value=10**9))
    return float(k * n), n


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
@given(Nn=divisible_params(), strategy=st.sampled_from(["tp", "pp", "fsdp"]))
def test_sharded_memory_times_gpus_equals_dp_total(Nn, strategy):
    # Proportional reduction: the shards add back up to one full replica of 12 bytes per parameter.
    N, n = Nn
    assert memory_per_gpu(N, strategy, n) == pytest.approx(12 * N / n, rel=1e-12)
    assert memory_per_gpu(N, strategy, n) * n == pytest.approx(12 * N, rel=1e-12)
    assert memory_per_gpu(N, "dp", n) == pytest.approx(12 * N, rel=1e-12)


@FAST
@given(n=st.sampled_from([3, 6, 12, 96]), k=st.integers(min_value=1, max_value=10**9),
       r=st.integers(min_value=0, max_value=10**6), strategy=st.sampled_from(["tp", "pp", "fsdp"]))
def test_indivisible_parameter_counts_are_rejected(n, k, r, strategy):
    # N = k n + rem with 0 < rem < n: no even split, so the sharded strategies refuse it.
    N = float(k * n + 1 + r % (n - 1))
    with pytest.raises(ValueError, match="divide"):
        memory_per_gpu(N, strategy, n)
    assert memory_per_gpu(N, "dp", n) == 12 * N  # a full replica needs no split


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
    parts = {k: (c.weights, c.grads, c.optimizer) for k, c in mem.BYTE_CONVENTIONS.items()}
    assert parts == CONVENTION_BYTES
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


def test_zero2_shards_gradients_and_optimizer_but_not_weights():
    # Stage 2's sharded component, with fp32 gradients (2 + 4 + 12 bytes per parameter) on
    # 3 GPUs: 2 bytes of weights stay whole, 16 bytes are split three ways.
    # 1,000,001 parameters: 2,000,002 + 16,000,016 / 3 bytes.
    P = 1_000_001
    assert mem.zero_memory_per_gpu(P, 2, 3, "fp32_grads_18") == pytest.approx(2_000_002 + 16_000_016 / 3)
    # Going from stage 1 to stage 2 saves the gradients' (N_d - 1)/N_d: 2 bytes x 2/3 here.
    saved = mem.zero_memory_per_gpu(P, 1, 3) - mem.zero_memory_per_gpu(P, 2, 3)
    assert saved == pytest.approx(2 * P * 2 / 3)


@FAST
@given(P=params, d=gpu_counts, conv=st.sampled_from(sorted(CONVENTION_BYTES)))
def test_zero_stages_monotone(P, d, conv):
    m = [mem.zero_memory_per_gpu(P, s, d, conv) for s in range(4)]
    if d == 1:
        assert m[0] == m[1] == m[2] == m[3]
    else:
        assert m[0] > m[1] > m[2] > m[3]
    w, g, o = CONVENTION_BYTES[conv]
    for stage in range(4):
        assert m[stage] == pytest.approx(_zero_by_hand(P, stage, d, w, g, o), rel=1e-12)
    assert m[3] * d == pytest.approx(m[0])


def test_zero_stage3_with_chapter_convention_equals_fsdp_exercise():
    # 12 bytes x 7e9 parameters / 8 GPUs = 10.5 GB either way.
    assert mem.zero_memory_per_gpu(7e9, 3, 8, "chapter_12") == pytest.approx(10.5e9)
    assert memory_per_gpu(7e9, "fsdp", 8) == pytest.approx(10.5e9)
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
@given(P=params, tp=st.sampled_from([1, 2, 3, 4, 6, 8]), pp=st.sampled_from([1, 2, 3, 4, 12]), dp=gpu_counts,
       stage=st.sampled_from([0, 1, 2, 3]))
def test_3d_shards_over_dp_only(P, tp, pp, dp, stage):
    # TP x PP split the model; ZeRO then shards each S = P/(tp pp) shard over dp only
    # (16 bytes per parameter: 2 weights, 2 gradients, 12 optimizer).
    S = P / (tp * pp)
    by_hand = {0: 16 * S, 1: 4 * S + 12 * S / dp, 2: 2 * S + 14 * S / dp, 3: 16 * S / dp}[stage]
    assert mem.memory_per_gpu_3d(P, tp, pp, dp, zero_stage=stage) == pytest.approx(by_hand, rel=1e-12)


def test_3d_small_layout_by_hand():
    # 1.2e9 parameters on TP2 x PP3 x DP4 (24 GPUs): shards of 2e8 parameters.
    # ZeRO-2: 2 x 2e8 = 0.4 GB of weights + 14 x 2e8 / 4 = 0.7 GB sharded = 1.1 GB.
    assert mem.memory_per_gpu_3d(1.2e9, 2, 3, 4, zero_stage=2) == pytest.approx(1.1e9)
    # No ZeRO: 16 x 2e8 = 3.2 GB, whatever dp is.
    assert mem.memory_per_gpu_3d(1.2e9, 2, 3, 4) == pytest.approx(3.2e9)
    assert mem.memory_per_gpu_3d(1.2e9, 2, 3, 96) == pytest.approx(3.2e9)


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
@pytest.mark.parametrize("strategy, total", [("dp", 84e9), ("tp", 10.5e9), ("pp", 10.5e9), ("fsdp", 10.5e9)])
def test_breakdown_sums_to_exercise(strategy, total):
    # 7e9 parameters x 12 bytes = 84 GB; split 8 ways, 10.5 GB.
    parts = mem.memory_breakdown(7e9, strategy, 8)
    assert set(parts) == {"weights", "grads", "optimizer"}
    assert sum(parts.values()) == pytest.approx(total)
    assert memory_per_gpu(7e9, strategy, 8) == pytest.approx(total)


@pytest.mark.parametrize(
    "stage, weights, grads, optimizer",
    [
        # 7.5e9 parameters on 64 GPUs, 2 + 2 + 12 bytes each (Rajbhandari et al. 2020, Fig. 1):
        # 15 GB of weights, 15 GB of gradients, 90 GB of optimizer state, whole or / 64.
        (1, 15e9, 15e9, 90e9 / 64),
        (2, 15e9, 15e9 / 64, 90e9 / 64),
        (3, 15e9 / 64, 15e9 / 64, 90e9 / 64),
    ],
)
def test_breakdown_zero_matches_zero_memory(stage, weights, grads, optimizer):
    parts = mem.memory_breakdown(7.5e9, f"zero{stage}", 64, convention="zero_16")
    assert parts == pytest.approx({"weights": weights, "grads": grads, "optimizer": optimizer})
    # The paper's totals, 31.4, 16.6 and 1.9 GB, to its one decimal.
    assert round(sum(parts.values()) / 1e9, 1) == {1: 31.4, 2: 16.6, 3: 1.9}[stage]


def test_breakdown_components():
    parts = mem.memory_breakdown(1e9, "zero2", 4, convention="zero_16")
    assert parts == pytest.approx({"weights": 2e9, "grads": 0.5e9, "optimizer": 3e9})
    assert mem.memory_breakdown(1e9, "fsdp", 4) == mem.memory_breakdown(1e9, "zero3", 4)
    with pytest.raises(ValueError, match="strategy"):
        mem.memory_breakdown(1e9, "zero4", 4)
