"""gpt-oss's clamped GLU and biased experts as Megatron-Core's grouped experts run them, by
hand: the bytes of the passes outside the fused kernels (layer_time.eager_expert_bytes), what
they add to one MoE layer forward and backward (and again when the activation is recomputed),
the clamped input the fused gating keeps, and nothing of it for other designs or for the fused
grouped MLP."""
from __future__ import annotations

from dataclasses import replace

import pytest

from solutions import facts, hardware, layer_time, moe_step, precision
from solutions import steptime as S

OSS = S.shape_of(facts.MOE_ARCHITECTURES["gpt-oss-120b"], seq_len=4096)
PLAIN = replace(OSS, moe=replace(OSS.moe, expert_bias=False, clamped_glu=False))
LAY = S.Layout(tp=1, pp=1, dp=64, zero=1, micro_batch=2, recompute="none", ep=64)
GB200 = hardware.find_gpu("GB200")
BF16 = precision.recipe("bf16")
EW = layer_time.COMPONENTS.index("elementwise")


def _added(lay, moe_layer=True):
    """What the clamped GLU and the biases add to one layer (forward and backward columns)."""
    return (layer_time.layer_terms(OSS, lay, GB200, BF16, moe_layer=moe_layer).a
            - layer_time.layer_terms(PLAIN, lay, GB200, BF16, moe_layer=moe_layer).a)


def test_the_passes_bytes_by_hand():
    f, h = 2880, 2880
    both = moe_step.MoEConfig(128, 4, f, expert_bias=True, clamped_glu=True)
    # clamps (read and write f each: 8 f) and the concatenation (read and write 2 f: 8 f);
    # the bias: bias x weight written (2 h), added (4 h read, 2 h written), concatenated (4 h)
    assert layer_time.eager_expert_bytes(both, f, h) == (16 * f + 12 * h, 20 * f + 12 * h, 16 * f)
    assert layer_time.eager_expert_bytes(replace(both, clamped_glu=False), f, h) == (12 * h, 12 * h, 0.0)
    assert layer_time.eager_expert_bytes(replace(both, expert_bias=False), f, h) == (16 * f, 20 * f, 16 * f)
    assert layer_time.eager_expert_bytes(moe_step.MoEConfig(128, 4, f), f, h) == (0.0, 0.0, 0.0)


def test_only_gpt_oss_among_the_named_designs_has_them():
    flagged = [n for n, a in facts.MOE_ARCHITECTURES.items() if a.expert_bias or a.clamped_glu]
    assert flagged == ["gpt-oss-120b"]
    assert OSS.moe.expert_bias and OSS.moe.clamped_glu


def test_what_one_moe_layer_pays_forward_and_backward():
    m, h, f, hbm = OSS.moe, OSS.hidden, OSS.moe.expert_ffn, GB200.hbm_bytes_per_s
    copies = LAY.micro_batch * OSS.seq_len * m.top_k * m.imbalance  # TP1: every token of the micro-batch
    fwd, bwd = (16 * f + 12 * h) * copies / hbm, (20 * f + 12 * h) * copies / hbm
    added = _added(LAY)
    assert added[EW] == pytest.approx([fwd, bwd], rel=1e-12)
    assert abs(added).sum() == pytest.approx(fwd + bwd, rel=1e-12)  # elementwise bytes and nothing else
    # the activation recomputed (the recipes' moe_act, or selective): the clamps and concatenation again
    again = 16 * f * copies / hbm
    for rec in ("layernorm,moe_act", "selective"):
        assert _added(replace(LAY, recompute=rec))[EW] == pytest.approx([fwd, bwd + again], rel=1e-12)
    # every layer recomputed: the whole forward again, the bias's passes too
    assert _added(replace(LAY, recompute="full"))[EW] == pytest.approx([fwd, bwd + fwd], rel=1e-12)
    # a dense layer has no experts; the fused grouped MLP clamps and adds its biases in its epilogues
    assert abs(_added(LAY, moe_layer=False)).sum() == 0.0
    assert abs(_added(replace(LAY, expert_kernels="fused"))).sum() == 0.0


def test_the_clamped_input_is_kept_unless_the_activation_is_recomputed():
    m, f = OSS.moe, OSS.moe.expert_ffn
    tokens = LAY.micro_batch * OSS.seq_len
    kept = 2.0 * 2.0 * m.top_k * f * m.imbalance * tokens * OSS.moe_layers  # 2 f BF16 per copy, one micro-batch
    extra = S.activation_bytes(OSS, LAY, 1) - S.activation_bytes(PLAIN, LAY, 1)
    assert extra == pytest.approx(kept, rel=1e-12)
    for lay in (replace(LAY, recompute="layernorm,moe_act"), replace(LAY, recompute="selective"),
                replace(LAY, recompute="full"), replace(LAY, expert_kernels="fused")):
        assert S.activation_bytes(OSS, lay, 1) == pytest.approx(S.activation_bytes(PLAIN, lay, 1), rel=1e-12)


def test_the_passes_slow_the_table_rows_that_run_grouped_experts():
    runs = {r.name: r for r in facts.PUBLISHED_RUNS}
    for name in ("gpt-oss-120b, 64 GB200, BF16 (25.11)", "gpt-oss-120b, 64 H100 SXM, BF16 (26.02)"):
        run = runs[name]
        assert run.expert_kernels == "grouped"
        with_passes = S.predict_run(run)[0].step_s
        without = S.predict_run(run, shape=replace(S.run_shape(run), moe=PLAIN.moe))[0].step_s
        assert with_passes > without * 1.03, name  # at least 3% of the step on either GPU
