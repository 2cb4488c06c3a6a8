"""The rules of thumb (solutions.rules) and the roofline (solutions.roofline), each against a
calculation by hand from its derivation, and against the course's other formulas where the
rule is a threshold of one of them (at the threshold, communication time equals compute time).
Floats are compared to a relative tolerance of REL (the two sides differ only by rounding)."""
from __future__ import annotations

import math

import pytest

from solutions import communication, context, facts, moe, roofline, rules, steptime

REL = 1e-12
H100 = facts.GPUS["H100 SXM"]
PEAK = H100.peak_flops_per_s  # 989.4 TFLOP/s dense bf16
NVLINK = 450e9  # H100 SXM, each way
NIC = 50e9  # one 400 Gb/s port
MFU = 0.4


# --- roofline ------------------------------------------------------------------------------

def test_ridge_point_of_an_h100():
    assert roofline.HBM_BYTES_PER_S["H100 SXM"] == 3.35e12  # datasheet, SXM5
    assert roofline.ridge_point(PEAK, 3.35e12) == pytest.approx(989.4 / 3.35, rel=REL)  # about 295


def test_matmul_intensity_by_hand():
    # 4,096 tokens through an 8,192 x 8,192 weight in bf16:
    # 2 * 4096 * 8192 * 8192 FLOPs over 2 * (4096*8192 + 8192*8192 + 4096*8192) bytes.
    flops = 2 * 4096 * 8192 * 8192
    moved = 2 * (4096 * 8192 + 8192 * 8192 + 4096 * 8192)
    assert roofline.matmul_intensity(4096, 8192, 8192) == pytest.approx(flops / moved, rel=REL)
    # One token (decoding): about one FLOP per byte, far below the ridge.
    assert roofline.matmul_intensity(1, 8192, 8192) == pytest.approx(1.0, rel=1e-3)
    # Many tokens against a wide weight: the intensity tends to the token count (16-bit).
    assert roofline.matmul_intensity(64, 1e9, 1e9) == pytest.approx(64, rel=1e-6)


def test_attainable_flops_is_the_roof():
    w = 3.35e12
    ridge = PEAK / w
    assert roofline.attainable_flops(ridge / 2, PEAK, w) == pytest.approx(PEAK / 2, rel=REL)
    assert roofline.attainable_flops(ridge * 10, PEAK, w) == PEAK


def test_mfu_shares_multiply_to_the_predicted_mfu():
    run = next(r for r in facts.PUBLISHED_RUNS if r.name == "Llama 3 405B, 16,384 GPUs")
    st, lay = steptime.predict_run(run)
    shape = steptime.run_shape(run)
    shares = roofline.mfu_shares(shape, lay, st)
    assert list(shares) == list(roofline.MFU_SHARES)
    assert math.prod(shares.values()) == pytest.approx(st.mfu, rel=1e-9)
    assert all(0 < v <= 1 + 1e-12 for v in shares.values())
    assert shares["eta"] == pytest.approx(st.efficiency, rel=REL)  # the products' efficiency the model reports
    assert shares["busy"] == pytest.approx(st.breakdown_s["compute"] / st.step_s, rel=REL)


# --- data parallelism and ZeRO (D1, D2) ---------------------------------------------------------

def test_dp_threshold_by_hand():
    F = MFU * PEAK
    # 6 P T / F = 2 (n-1)/n * 2 P / W  =>  T = 2 (n-1)/n * 2 F / (6 W)
    n = 64
    want = 2 * (n - 1) / n * 2 * F / (6 * NIC)
    assert rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, n) == pytest.approx(want, rel=REL)
    assert rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC) == pytest.approx(2 * F / (3 * NIC), rel=REL)
    for stage in (1, 2):  # ZeRO-1 and ZeRO-2 move what plain data parallelism moves
        assert rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, n, stage) == rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, n)
    # ZeRO-3: three collectives per micro-batch instead of two per step
    assert rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, n, 3) == pytest.approx(1.5 * want, rel=REL)


def test_dp_threshold_balances_the_ring_all_reduce():
    """At the threshold, the computation equals the time of the ring all-reduce of the bf16
    gradients (solutions.communication), whatever the model size."""
    n = 1024
    T = rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, n)
    for P in (1e9, 7e9, 405e9):
        compute_s = 6 * P * T / (MFU * PEAK)
        comm_s = communication.allreduce_bytes_per_rank(2 * P, n) / NIC
        assert compute_s == pytest.approx(comm_s, rel=1e-9)
    assert rules.dp_comm_ratio(2 * T, PEAK, MFU, NIC, n) == pytest.approx(0.5, rel=REL)


# --- tensor parallelism (T1) ---------------------------------------------------------------------

def test_tp_ratio_by_hand_and_against_the_megatron_bytes():
    h, t, b, s = 8192, 8, 1, 4096
    F = MFU * PEAK
    compute_s = 72 * b * s * h * h / t / F  # 12 h^2 parameters per layer, 6 FLOPs each per token
    comm_s = communication.tensor_parallel_bytes_per_layer(b, s, h, t) / NVLINK
    assert rules.tp_comm_ratio(t, h, PEAK, MFU, NVLINK) == pytest.approx(comm_s / compute_s, rel=1e-9)
    assert rules.tp_comm_ratio(t, h, PEAK, MFU, NVLINK) == pytest.approx(2 * 7 * F / (9 * h * NVLINK), rel=REL)


def test_tp_max_degree_is_where_the_ratio_reaches_the_share():
    for h in (4096, 8192, 16384):
        for link in (NVLINK, NIC):
            for share in (1.0, 0.1):
                t = rules.tp_max_degree(h, PEAK, MFU, link, share=share)
                assert t == pytest.approx(1 + share * 9 * h * link / (2 * MFU * PEAK), rel=REL)
                # the ratio is linear in t - 1: at the largest degree it equals the share
                assert (t - 1) * 2 * MFU * PEAK / (9 * h * link) == pytest.approx(share, rel=1e-9)
    # Over a 400 Gb/s port an 8,192-wide model is compute-bound only up to about five GPUs.
    assert 5 < rules.tp_max_degree(8192, PEAK, MFU, NIC) < 7


# --- context parallelism (C1) --------------------------------------------------------------------

def test_cp_threshold_is_where_the_overlap_ratio_is_one():
    arch = facts.ARCHITECTURES["Llama 3 405B"]
    kv = context.kv_width(arch.d_model, arch.heads, arch.kv_heads)
    for c in (2, 8, 16):
        share = rules.cp_min_tokens_per_gpu(arch.d_model, kv, c, PEAK, MFU, NIC)
        assert share == pytest.approx(2 * 2 * (c - 1) / c * kv / arch.d_model * MFU * PEAK / (3 * NIC), rel=REL)
        # the overlap ratio falls as 1/s: at s = k * c * share it is 1/k
        s = 16 * c * math.ceil(share)
        ratio = context.context_parallel_overlap_ratio(s, arch.d_model, kv, c, PEAK, NIC, MFU)
        assert ratio == pytest.approx(share / (s / c), rel=1e-9)


# --- expert parallelism (E1) ---------------------------------------------------------------------

def test_ep_threshold_balances_the_all_to_alls():
    """At the threshold width, the all-to-all bytes of solutions.moe take as long as the
    experts' SwiGLU matrices (three of h x f per expert, k experts per token)."""
    h, k, tokens = 7168, 8, 4096
    for ep, dispatch in ((8, None), (64, None), (64, 1)):
        f = rules.ep_min_expert_width(ep, PEAK, MFU, NIC, dispatch_bytes_per_element=dispatch)
        comm_s = moe.expert_parallel_bytes_per_layer(tokens, h, k, ep, dispatch_bytes_per_element=dispatch) / NIC
        compute_s = tokens * k * 3 * 2 * h * f * 3 / (MFU * PEAK)  # 3 matrices, 2 FLOPs, fwd + 2x bwd
        assert compute_s == pytest.approx(comm_s, rel=1e-9)
    assert rules.ep_min_expert_width(64, PEAK, MFU, NIC) == pytest.approx(4 / 9 * 63 / 64 * MFU * PEAK / NIC, rel=REL)


# --- attention against the MLP (A1) --------------------------------------------------------------

def test_attention_overtakes_the_mlp_at_eight_h():
    h = 8192
    assert rules.attention_mlp_crossover(h) == 8 * h
    s = 8 * h
    attention = context.attention_flops_per_layer(1, s, h)  # causal, training
    mlp = 3 * 2 * 2 * h * 4 * h * s  # two h x 4h matrices, 2 FLOPs per multiply-add, fwd + 2x bwd
    assert attention == pytest.approx(mlp, rel=REL)
    assert rules.attention_mlp_crossover(h, causal=False) == 4 * h


def test_attention_crossover_of_a_swiglu_model():
    arch = facts.ARCHITECTURES["Llama 3 8B"]  # SwiGLU, f = 14,336, h = 4,096
    s = rules.attention_mlp_crossover(arch.d_model, arch.ffn_hidden, "swiglu")
    assert s == pytest.approx(3 * arch.ffn_hidden, rel=REL)
    attention = 6 * s * arch.d_model  # per token, causal
    mlp = 18 * arch.d_model * arch.ffn_hidden
    assert attention == pytest.approx(mlp, rel=REL)


@pytest.mark.parametrize("call, name", [
    (lambda: rules.dp_min_tokens_per_gpu(PEAK, 1.5, NIC), "mfu"),
    (lambda: rules.dp_min_tokens_per_gpu(PEAK, MFU, 0), "link_bytes_per_s"),
    (lambda: rules.dp_min_tokens_per_gpu(PEAK, MFU, NIC, zero_stage=4), "zero_stage"),
    (lambda: rules.tp_comm_ratio(0, 8192, PEAK, MFU, NVLINK), "tp"),
    (lambda: rules.cp_min_tokens_per_gpu(8192, 1024, 1.5, PEAK, MFU, NIC), "cp"),
    (lambda: rules.ep_min_expert_width(8, PEAK, MFU, float("nan")), "link_bytes_per_s"),
    (lambda: rules.attention_mlp_crossover(8192, mlp="relu"), "mlp"),
    (lambda: roofline.matmul_intensity(-1, 8, 8), "tokens"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
