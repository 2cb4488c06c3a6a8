"""Selective recomputation by module, as Megatron-Core's ``recompute_modules`` names it, by hand:
each module adds its own forward to the backward pass and nothing else (the attention core,
the norms, the experts' activation, MLA's up-projections, a dense MLP); the hardware FLOPs and
the activations it keeps; the rows whose recipes name modules; the planner's one-line errors."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from solutions import facts, hardware, layer_time, precision
from solutions import steptime as S

DSV3 = S.shape_of(facts.MOE_ARCHITECTURES["DeepSeek-V3"], seq_len=4096)
LAY = S.Layout(tp=1, pp=4, dp=64, zero=1, micro_batch=1, recompute="none", ep=64)
GB200 = hardware.find_gpu("GB200")
BF16 = precision.recipe("bf16")
ROW = {c: i for i, c in enumerate(layer_time.COMPONENTS)}


def _extra(shape, recompute, moe_layer):
    """What ``recompute`` adds to one layer over no recomputation (forward and backward columns)."""
    none = layer_time.layer_terms(shape, LAY, GB200, BF16, moe_layer=moe_layer).a
    return layer_time.layer_terms(shape, replace(LAY, recompute=recompute), GB200, BF16, moe_layer=moe_layer).a - none


def test_each_module_adds_its_own_forward_to_the_backward_pass():
    T, h, hbm = LAY.micro_batch * DSV3.seq_len, DSV3.hidden, GB200.hbm_bytes_per_s
    # the norms: their elementwise pass again (8 bytes per hidden unit and token, as the model counts them)
    norms = _extra(DSV3, "layernorm", moe_layer=True)
    assert norms[ROW["elementwise"]] == pytest.approx([0.0, 8.0 * h * T / hbm], rel=1e-12)
    assert abs(norms).sum() == pytest.approx(abs(norms[ROW["elementwise"]]).sum(), rel=1e-12)
    # the routed experts' activation: SwiGLU reads 2 f_e and writes f_e per token copy
    m = DSV3.moe
    act = _extra(DSV3, "moe_act", moe_layer=True)
    assert act[ROW["elementwise"]] == pytest.approx([0.0, 6.0 * m.expert_ffn * m.top_k * T / hbm], rel=1e-12)
    assert abs(_extra(DSV3, "moe_act", moe_layer=False)).sum() == 0.0  # a dense layer has no experts
    # the attention core: FlashAttention's forward again, products and exponentials, nothing else
    core = _extra(DSV3, "core_attn", moe_layer=True)
    fwd = layer_time.layer_terms(DSV3, LAY, GB200, BF16, moe_layer=True).a[ROW["attention"], 0]
    assert core[ROW["attention"]] == pytest.approx([0.0, fwd], rel=1e-12)
    assert abs(core).sum() == pytest.approx(fwd, rel=1e-12)
    # MLA's up-projections: the query's (q_lora -> heads x d_qk) and the keys' and values'
    # (kv_lora -> heads x (d_nope + d_v)) forward products again
    c = GB200.ceiling("bf16")
    a, dqk, dv = DSV3.heads, DSV3.qk_dim, DSV3.v_dim
    up_flops = 2.0 * T * (DSV3.q_lora * a * dqk + DSV3.kv_lora * a * (dqk - DSV3.qk_rope + dv))
    up = _extra(DSV3, "mla_up_proj", moe_layer=True)
    assert (DSV3.q_lora, DSV3.kv_lora, DSV3.qk_rope, dqk, dv) == (1536, 512, 64, 192, 128)
    assert up[ROW["gemm"]] == pytest.approx([0.0, up_flops / c], rel=1e-12)
    assert up[ROW["attention"]].sum() == 0.0 and up[ROW["elementwise"]].sum() == 0.0
    # modules add up
    both = _extra(DSV3, "layernorm,mla_up_proj", moe_layer=True)
    assert both == pytest.approx(norms + up, rel=1e-12, abs=1e-18)


def test_a_dense_mlp_recomputed_is_its_products_and_activation_again():
    dense = S.shape_of(facts.ARCHITECTURES["Llama 3 8B"], seq_len=4096)
    T, h, f = LAY.micro_batch * dense.seq_len, dense.hidden, dense.ffn
    extra = _extra(dense, "mlp", moe_layer=False)
    c = GB200.ceiling("bf16")
    assert extra[ROW["gemm"]] == pytest.approx([0.0, 2.0 * T * 3 * h * f / c], rel=1e-12)  # SwiGLU: 3 h f weights
    assert extra[ROW["elementwise"]] == pytest.approx([0.0, 6.0 * f * T / GB200.hbm_bytes_per_s], rel=1e-12)


def test_hardware_flops_count_the_recomputed_products():
    base = S.model_flops_per_token(DSV3)
    up = DSV3.q_lora * DSV3.heads * DSV3.qk_dim + DSV3.kv_lora * DSV3.heads * (DSV3.qk_dim - DSV3.qk_rope + DSV3.v_dim)
    assert S.hardware_flops_per_token(DSV3, "mla_up_proj") == pytest.approx(base + 2.0 * 61 * up, rel=1e-12)
    assert S.hardware_flops_per_token(DSV3, "layernorm,moe_act") == base  # elementwise work is not FLOPs
    assert S.hardware_flops_per_token(DSV3, "core_attn") == pytest.approx(S.hardware_flops_per_token(DSV3, "selective"),
                                                                         rel=1e-12)
    dense_mlp = (61 - DSV3.moe_layers) * 3 * DSV3.hidden * DSV3.ffn
    assert DSV3.moe_layers == 58
    assert S.hardware_flops_per_token(DSV3, "mlp") == pytest.approx(base + 2.0 * dense_mlp, rel=1e-12)


def test_modules_keep_fewer_activations():
    none = S.activation_bytes(DSV3, LAY, 64)
    norms = S.activation_bytes(DSV3, replace(LAY, recompute="layernorm"), 64)
    acts = S.activation_bytes(DSV3, replace(LAY, recompute="layernorm,moe_act"), 64)
    assert acts < norms < none
    layers_in_flight = S._layer_microbatches(61, 4, S._in_flight(4, 64, "1f1b", 1))
    moe_share = DSV3.moe_layers / DSV3.layers
    per_token = 2.0 * 2 * DSV3.hidden  # the norms' two outputs, 16-bit
    assert none - norms == pytest.approx(layers_in_flight * per_token * DSV3.seq_len, rel=1e-9)
    m = DSV3.moe
    assert norms - acts == pytest.approx(layers_in_flight * moe_share * 2.0 * m.top_k * m.expert_ffn * DSV3.seq_len,
                                         rel=1e-9)


@pytest.mark.parametrize("bad", ["some", "layernorm,foo", ",", "core_attn;layernorm"])
def test_unknown_modules_are_one_line_errors(bad):
    with pytest.raises(ValueError, match="recompute must be one of .* or modules among"):
        S.Layout(recompute=bad)
    out = subprocess.run([sys.executable, "-m", "solutions.plan", "--model", "7e9", "--tokens", "1e12", "--gpu", "H100",
                          "--count", "8", "--recompute", bad], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_rows_name_their_recipes_modules():
    runs = {r.name: r for r in (*facts.PUBLISHED_RUNS, *facts.HELDOUT_RUNS)}
    assert runs["DeepSeek-V3, 256 GB200, BF16 (25.11)"].recompute == "mla_up_proj"
    assert runs["DeepSeek-V3, 256 GB300, BF16 (25.11)"].recompute == "moe_act"
    assert runs["DeepSeek-V3, 256 GB200, MXFP8 (26.04)"].recompute == "mlp"
    assert runs["gpt-oss-120b, 64 GB200, BF16 (25.11)"].recompute == "layernorm,moe_act"
    assert runs["DeepSeek-V3, 2,048 H800"].recompute == "layernorm,mla_up_proj"  # the report, sec. 3.2.3
    # no row of NVIDIA's tables recomputes the attention core: none is left at 'selective'
    bridge = [r for r in runs.values() if r.cite == "nvidia2025megatronbridge"]
    assert bridge and all(r.recompute != "selective" for r in bridge)
    for r in runs.values():  # and each names modules its model has
        S.check_recompute_for(S.run_shape(r), r.recompute)


def test_the_planner_names_the_modules():
    p = subprocess.run([sys.executable, "-m", "solutions.plan", "--arch", "gpt-oss-120b", "--tokens", "1e12", "--gpu",
                        "H100", "--count", "64", "--tp", "1", "--pp", "4", "--dp", "16", "--ep", "8", "--micro-batch", "1",
                        "--recompute", "layernorm,moe_act"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "selective (layernorm, moe_act) recomputation" in p.stdout


@pytest.mark.parametrize("arch, module, missing", [("Llama 3 8B", "mla_up_proj", "multi-head latent attention"),
                                                   ("Llama 3 8B", "moe_act", "experts"),
                                                   ("Qwen3-30B-A3B", "mlp", "a dense layer")])
def test_a_module_the_model_lacks_is_a_one_line_error(arch, module, missing):
    """Recomputing what a model does not have is a mistake in the command, not a free option."""
    out = subprocess.run([sys.executable, "-m", "solutions.plan", "--arch", arch, "--tokens", "1e12", "--gpu", "H100",
                          "--count", "8", "--recompute", f"layernorm,{module}"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"recompute module {module} needs {missing}" in out.stderr
    # what the model has is accepted
    assert S.check_recompute_for(DSV3, "layernorm,mla_up_proj,moe_act,mlp") == "layernorm,mla_up_proj,moe_act,mlp"
