"""Tests for what goes beyond 3D parallelism and the classic memory count:
solutions.context (context parallelism), solutions.moe (experts), the CP/EP
layout rules in solutions.layout, solutions.efficiency (FlashAttention, SwiGLU,
FP8, zero-bubble pipelines) and the facts they rely on."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solutions import context, efficiency, facts, layout, memory, moe, pipeline

FAST = settings(max_examples=40, deadline=None)
BIB = Path(__file__).resolve().parents[2] / "book" / "references.bib"


# -- context parallelism ------------------------------------------------------
def test_cp_volume_by_hand():
    # K and V: 2 * b * s * d_kv = 2 * 1 * 8 * 4 = 64 elements; half leave each GPU at cp = 2.
    assert context.context_parallel_bytes_per_layer(1, 8, 4, 2) == pytest.approx(2 * 32 * 2)
    assert context.context_parallel_bytes_per_layer(1, 8, 4, 2, resend_kv_in_backward=True) == pytest.approx(3 * 32 * 2)
    assert context.context_parallel_bytes_per_layer(1, 8, 4, 1) == 0.0


def test_kv_width_follows_grouped_query_attention():
    llama = facts.ARCHITECTURES["Llama 3 405B"]
    assert context.kv_width(llama.d_model, llama.heads, llama.kv_heads) == 1024
    palm = facts.ARCHITECTURES["PaLM"]
    assert context.kv_width(palm.d_model, palm.heads, palm.kv_heads, palm.head_dim) == 256  # one K/V head of 256


@given(st.integers(1, 4), st.sampled_from([2, 4, 8, 16]), st.integers(1, 6))
@FAST
def test_cp_volume_tends_to_twice_kv(b, cp, k):
    s, d = 64 * cp, 8 * k
    vol = context.context_parallel_bytes_per_layer(b, s, d, cp, bytes_per_element=1)
    assert vol < 2 * 2 * b * s * d  # below gathering K and V whole, twice
    assert vol == pytest.approx(4 * b * s * d * (cp - 1) / cp, rel=1e-12)


def test_attention_flops_by_hand():
    assert context.attention_flops_per_layer(1, 4, 2, causal=False) == pytest.approx(384)
    assert context.attention_flops_per_layer(1, 4, 2) == pytest.approx(192)
    assert context.attention_flops_per_layer(1, 4, 2, cp=2) == pytest.approx(96)


def test_cp_overlap_ratio_falls_as_one_over_s():
    h100 = facts.GPUS["H100 SXM"]
    r1 = context.context_parallel_overlap_ratio(32768, 16384, 1024, 16, h100.peak_flops_per_s, 50e9)
    r2 = context.context_parallel_overlap_ratio(65536, 16384, 1024, 16, h100.peak_flops_per_s, 50e9)
    assert r1 / r2 == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize("call, name", [
    (lambda: context.context_parallel_bytes_per_layer(1, 10, 4, 3), "cp"),
    (lambda: context.context_parallel_bytes_per_layer(0, 8, 4, 2), "micro_batch"),
    (lambda: context.kv_width(4096, 32, 5), "kv_heads"),
    (lambda: context.context_parallel_overlap_ratio(8, 8, 8, 2, 1e15, 1e9, mfu=1.5), "mfu"),
])
def test_cp_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- mixture of experts -------------------------------------------------------
def test_moe_parameter_counts_by_hand():
    # 1 layer, h=4, f=2, 2 experts (top-1), 2 heads with 1 K/V head, vocab 3, untied:
    # attention 2*16 + 2*4*2 = 48; experts 2 * 3*4*2 = 48; router 8; norms 8; embeddings 24; final norm 4.
    p = moe.moe_parameter_counts(1, 4, 2, 2, 1, 2, 1, 3)
    assert (p.total, p.active, p.expert, p.dense) == (140, 116, 48, 92)


def test_moe_parameter_counts_match_mixtral():
    m = facts.MOE_ARCHITECTURES["Mixtral 8x7B"]
    p = moe.moe_parameter_counts(m.layers, m.d_model, m.expert_ffn, m.experts, m.top_k, m.heads, m.kv_heads, m.vocab)
    assert p.total == pytest.approx(m.total_params, rel=0.01)   # reported "47B"
    assert p.active == pytest.approx(m.active_params, rel=0.01)  # reported "13B"


def test_ep_volume_by_hand_and_against_tp():
    assert moe.expert_parallel_bytes_per_layer(10, 4, 2, 4) == pytest.approx(4 * 10 * 2 * 4 * 0.75 * 2)
    assert moe.expert_parallel_bytes_per_layer(10, 4, 2, 4, backward=False) == pytest.approx(240)
    assert moe.expert_parallel_bytes_per_layer(10, 4, 2, 1) == 0.0
    # top-2 routing moves as much as Megatron TP at the same degree: 8 b s h (n-1)/n elements.
    from solutions import communication
    tp = communication.tensor_parallel_bytes_per_layer(1, 4096, 1024, 8)
    assert moe.expert_parallel_bytes_per_layer(4096, 1024, 2, 8) == pytest.approx(tp)


def test_capacity_and_dropping():
    assert moe.expert_capacity(100, 8, 2, 1.25) == 32  # ceil(1.25 * 200 / 8 = 31.25)
    assert moe.expert_capacity(64, 8) == 8
    assert moe.dropped_fraction([5, 3, 0], 4) == pytest.approx(1 / 8)
    assert moe.dropped_fraction([2, 2], 2) == 0.0


def test_expert_loads_and_imbalance():
    probs = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.6, 0.3, 0.1]]
    assert moe.expert_loads(probs).tolist() == [2, 1, 0]
    assert moe.expert_loads(probs, top_k=2).tolist() == [3, 3, 0]
    assert moe.load_imbalance([2, 2, 2, 2]) == 1.0
    assert moe.load_imbalance([4, 0, 0, 0]) == 4.0


@given(st.integers(1, 64), st.integers(2, 16), st.integers(0, 2**31 - 1))
@FAST
def test_loads_conserve_assignments(tokens, experts, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, experts + 1))
    loads = moe.expert_loads(rng.random((tokens, experts)), top_k=k)
    assert loads.sum() == tokens * k
    assert moe.load_imbalance(loads) >= 1.0
    cap = int(moe.expert_capacity(tokens, experts, k, 1.0))
    assert 0.0 <= moe.dropped_fraction(loads, cap) < 1.0


def test_switch_balance_loss():
    assert moe.switch_balance_loss([0.25] * 4, [0.25] * 4) == pytest.approx(1.0)
    assert moe.switch_balance_loss([1.0, 0.0], [1.0, 0.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="token_fractions"):
        moe.switch_balance_loss([0.5, 0.6], [0.5, 0.5])


def test_moe_memory_by_hand():
    # zero_16, no ZeRO: 16 bytes for the dense 1e9, and for the 8e9 / EP8 experts on each GPU.
    assert moe.moe_memory_per_gpu(1e9, 8e9, ep=8, dp=8) == pytest.approx(32e9)
    # ZeRO-1 over the 16 replicas of the dense part and the 2 replicas of each expert.
    expected = (4 + 12 / 16) * 1e9 + (4 + 12 / 2) * 1e9
    assert moe.moe_memory_per_gpu(1e9, 8e9, ep=8, dp=16, zero_stage=1) == pytest.approx(expected)
    with pytest.raises(ValueError, match="ep must divide dp"):
        moe.moe_memory_per_gpu(1e9, 8e9, ep=3, dp=8)


@pytest.mark.parametrize("call, name", [
    (lambda: moe.moe_parameter_counts(1, 4, 2, 2, 3, 2, 1, 3), "top_k"),
    (lambda: moe.expert_loads([[0.5, -0.1]]), "router_probs"),
    (lambda: moe.expert_loads([]), "router_probs"),
    (lambda: moe.load_imbalance([0, 0]), "loads"),
    (lambda: moe.expert_capacity(10, 4, capacity_factor=0), "capacity_factor"),
])
def test_moe_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- layout with CP and EP ------------------------------------------------------
def test_mesh_groups_by_hand():
    grid, names = layout.mesh(8, tp=2, cp=2, pp=1, dp=2)
    assert names == ("dp", "pp", "cp", "tp")
    assert layout.groups_along(grid, names, "tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert layout.groups_along(grid, names, "cp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout.groups_along(grid, names, "dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 4]))
@FAST
def test_mesh_axes_partition_the_world(tp, cp, pp, dp):
    world = tp * cp * pp * dp
    grid, names = layout.mesh(world, tp=tp, cp=cp, pp=pp, dp=dp)
    for axis, size in zip(("tp", "cp", "pp", "dp"), (tp, cp, pp, dp)):
        groups = layout.groups_along(grid, names, axis)
        assert sorted(r for g in groups for r in g) == list(range(world))
        assert all(len(g) == size for g in groups)
    # Without CP, the mesh is the chapter's (dp, pp, tp) process grid.
    g3, _ = layout.mesh(tp * pp * dp, order=("tp", "pp", "dp"), tp=tp, pp=pp, dp=dp)
    assert np.array_equal(g3, layout.process_grid(tp * pp * dp, tp, pp, dp))


def test_deepseek_v3_expert_groups_span_eight_nodes():
    lay = facts.MOE_LAYOUTS[0]
    grid, names = layout.mesh(lay.num_gpus, order=("tp", "dp", "pp"), tp=lay.tp, dp=lay.dp, pp=lay.pp)
    groups = layout.expert_groups(grid, names, lay.ep)
    assert len(groups) == lay.num_gpus // lay.ep
    assert {layout.nodes_spanned(g, 8) for g in groups} == {8}


def test_layout_rules():
    llama = facts.ARCHITECTURES["Llama 3 405B"]
    cp16 = next(lay for lay in facts.LAYOUTS if lay.cp > 1)
    rules = layout.layout_rules(cp16.tp, cp16.cp, cp16.pp, cp16.dp, layers=llama.layers, heads=llama.heads,
                                kv_heads=llama.kv_heads, seq_len=facts.LLAMA3_LONG_CONTEXT_TOKENS,
                                microbatches=cp16.pp)
    assert all(ok for _, ok in rules), rules
    tp16 = dict(layout.layout_rules(16, layers=126, heads=128))
    assert not next(ok for rule, ok in tp16.items() if "NVLink" in rule)
    nvl72 = facts.NVLINK_DOMAINS["GB200 NVL72"]["gpus"]
    assert all(ok for _, ok in layout.layout_rules(16, layers=126, heads=128, nvlink_domain=nvl72))
    bad_ep = dict(layout.layout_rules(dp=8, ep=3, layers=4, heads=4, experts=9))
    assert not bad_ep["EP3 divides DP8"]
    with pytest.raises(ValueError, match="experts"):
        layout.layout_rules(dp=8, ep=2, layers=4, heads=4)


def test_layout_bad_input():
    with pytest.raises(ValueError, match="multiply"):
        layout.mesh(8, tp=2, cp=2, pp=1, dp=1)
    with pytest.raises(ValueError, match="axis"):
        layout.groups_along(*layout.mesh(2, tp=2, cp=1, pp=1, dp=1), "ep")
    with pytest.raises(ValueError, match="ep must divide"):
        layout.expert_groups(*layout.mesh(6, tp=1, cp=1, pp=1, dp=6), 4)


# -- activations: FlashAttention, SwiGLU ----------------------------------------
def test_activation_constant_by_hand():
    assert efficiency.activation_constant(4096) == pytest.approx(34)  # Korthikanti et al.
    assert efficiency.activation_constant(4096, dropout=False) == pytest.approx(32)
    # SwiGLU with f = 8h/3, full K/V, no dropout: 4 + 10 + (2 + 6 * 8/3) = 32.
    assert efficiency.activation_constant(3, 8, "swiglu", dropout=False) == pytest.approx(32)
    llama = facts.ARCHITECTURES["Llama 3 8B"]
    # norms 4 + attention (2 + 2 + 1 + 2) + MLP (2 + 6 * 3.5) = 34
    assert efficiency.activation_constant(llama.d_model, llama.ffn_hidden, "swiglu", llama.heads,
                                          llama.kv_heads, dropout=False) == pytest.approx(34)


def test_flash_attention_by_hand():
    # s=4, b=1, h=8, a=2: sbh = 32; standard scores 5*a*s*s*b = 160; flash keeps 4*a*s*b = 32 bytes.
    assert efficiency.activation_bytes_per_layer(4, 1, 8, 2) == pytest.approx(32 * 34 + 160)
    assert efficiency.activation_bytes_per_layer(4, 1, 8, 2, attention="flash") == pytest.approx(32 * 34 + 32)
    assert efficiency.activation_bytes_per_layer(4, 1, 8, 2, cp=2) == pytest.approx((32 * 34 + 160) / 2)


@given(st.sampled_from([512, 2048, 8192]), st.integers(1, 4), st.sampled_from([1024, 4096]),
       st.sampled_from([8, 16, 32]), st.sampled_from([1, 2, 4, 8]), st.booleans())
@FAST
def test_defaults_equal_korthikanti(s, b, h, a, t, sp):
    ours = efficiency.activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=sp)
    theirs = memory.activation_memory_per_layer(s, b, h, a, tp=t, sequence_parallel=sp)
    assert ours == pytest.approx(theirs, rel=1e-12)
    flash = efficiency.activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=sp, attention="flash")
    assert flash < ours


def test_activation_bad_input():
    with pytest.raises(ValueError, match="mlp"):
        efficiency.activation_constant(8, mlp="relu")
    with pytest.raises(ValueError, match="attention"):
        efficiency.activation_bytes_per_layer(4, 1, 8, 2, attention="sparse")
    with pytest.raises(ValueError, match="kv_heads"):
        efficiency.activation_constant(8, heads=4, kv_heads=3)


# -- FP8 and zero-bubble ----------------------------------------------------------
def test_amdahl():
    assert efficiency.amdahl_time_ratio(0.5, 2) == pytest.approx(0.75)
    assert efficiency.amdahl_time_ratio(1.0, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="fraction"):
        efficiency.amdahl_time_ratio(1.5, 2)


def test_fp8_state_bytes():
    conv = efficiency.DEEPSEEK_V3_FP8_STATE
    assert (conv.weights, conv.grads, conv.optimizer, conv.total) == (4, 4, 4, 12)
    assert memory.zero_memory_per_gpu(1e9, 0, 1, conv) == pytest.approx(12e9)


def test_zero_bubble_by_hand():
    assert efficiency.pipeline_bubble(4, 8) == pytest.approx(3 / 8)
    assert efficiency.pipeline_bubble(4, 8, "zb-h1") == pytest.approx(3 / 24)
    assert efficiency.pipeline_bubble(4, 8, "zb-h1", t_b=1, t_w=2) == 0.0
    assert efficiency.pipeline_bubble(4, 8, "zb-h2") == 0.0
    assert [efficiency.peak_stashed_microbatches(4, k) for k in efficiency.ZERO_BUBBLE_SCHEDULES] == [4, 4, 7]
    with pytest.raises(ValueError, match="t_w"):
        efficiency.pipeline_bubble(4, 8, "zb-h1", t_w=3)


@given(st.integers(2, 32), st.integers(1, 64))
@FAST
def test_1f1b_bubble_matches_megatron_and_zb_h1_is_a_third(p, m):
    assert efficiency.pipeline_bubble(p, m) == pytest.approx(pipeline.bubble_fraction(p, m, "relative_to_ideal"))
    assert efficiency.pipeline_bubble(p, m, "zb-h1") == pytest.approx(efficiency.pipeline_bubble(p, m) / 3)


# -- facts ------------------------------------------------------------------------
def test_new_facts():
    h100 = facts.GPUS["H100 SXM"]
    assert h100.peak_flops_per_s == 989.4e12 and h100.fp8_flops_per_s == 1978.9e12
    assert h100.cite == "nvidia2022hopper"
    assert facts.ARCHITECTURES["PaLM"].kv_heads == 1
    assert facts.ARCHITECTURES["Llama 3 8B"].ffn_hidden == 14336
    cp16 = [lay for lay in facts.LAYOUTS if lay.cp == 16]
    assert len(cp16) == 1 and (cp16[0].tp, cp16[0].pp, cp16[0].dp) == (8, 16, 8)
    ds = facts.MOE_LAYOUTS[0]
    assert ds.tp * ds.pp * ds.dp == ds.num_gpus == 2048 and ds.ep == 64
    assert facts.NVLINK_DOMAINS["GB200 NVL72"]["gpus"] == 72


def test_new_cites_are_in_the_bibliography():
    keys = set(re.findall(r"@\w+\{([^,]+),", BIB.read_text(encoding="utf-8")))
    cites = {a.cite for a in facts.MOE_ARCHITECTURES.values()} | {lay.cite for lay in facts.MOE_LAYOUTS}
    cites |= {d["cite"] for d in facts.NVLINK_DOMAINS.values()} | {facts.GPUS["H100 SXM"].cite}
    cites |= {efficiency.DEEPSEEK_V3_FP8_STATE.cite}
    cites |= set(re.findall(r"\b([a-z]+20\d\d[a-z0-9]+)\b", " ".join(
        m.__doc__ for m in (context, moe, efficiency))))
    assert cites <= keys, cites - keys
