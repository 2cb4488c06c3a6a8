"""Numbers that a referee's reads against the papers corrected (sections 1-12, the labs, the
assignments and the planner page).

Each test pins a corrected figure to the code that computes it and, where the figure is
glued into a stored notebook, to what the reader sees: every one would fail on the old value.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from solutions import context, efficiency, facts, moe, scaling
from solutions.communication import tensor_parallel_bytes_per_layer

ROOT = Path(__file__).resolve().parents[2]


def glued(notebook: str, folder: str = "chapters") -> dict:
    """Glue name -> plain-text value stored in an executed chapter (or lab) notebook."""
    nb = json.loads((ROOT / folder / notebook).read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []) if cell["cell_type"] == "code" else ():
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                out[name] = o["data"]["application/papermill.record/text/plain"].strip("'")
    return out


LLAMA = facts.ARCHITECTURES["Llama 3 405B"]
CP_LAYOUT = next(lay for lay in facts.LAYOUTS if lay.model == "Llama 3 405B" and lay.cp > 1)
LONG = facts.LLAMA3_LONG_CONTEXT_TOKENS


def test_cp_and_tp_counted_on_one_layout():
    # Llama 3's TP8 x CP16: the CP group shares a TP index, so 1/8 of the K/V heads (128 of
    # 1,024 elements per token) travel; TP acts on the 8,192 tokens of its CP rank.
    kv = context.kv_width(LLAMA.d_model, LLAMA.heads, LLAMA.kv_heads)
    t = context.tp_cp_bytes_per_layer(1, LONG, LLAMA.d_model, kv, CP_LAYOUT.tp, CP_LAYOUT.cp)
    assert t.cp == pytest.approx(2 * 2 * LONG * (kv / 8) * 15 / 16 * 2, rel=1e-12)
    assert t.cp == pytest.approx(125.8e6, rel=1e-3)
    assert t.tp == pytest.approx(tensor_parallel_bytes_per_layer(1, LONG // 16, LLAMA.d_model, 8), rel=1e-12)
    assert t.tp == pytest.approx(1.879e9, rel=1e-3)
    assert t.tp_over_cp == pytest.approx(14.93, abs=0.01)  # not the 30 of mixed assumptions
    g = glued("10-beyond-3d.ipynb")
    assert (g["s10_cp_mb"], g["s10_tp_gb"], g["s10_tp_over_cp"]) == ("126 MB", "1.9 GB", "15")


def test_q1_counts_the_tp8_layout():
    kv = context.kv_width(LLAMA.d_model, LLAMA.heads, LLAMA.kv_heads)
    with_tp = context.context_parallel_bytes_per_layer(1, 32768, kv, 8, tp=8)
    assert with_tp == pytest.approx(context.context_parallel_bytes_per_layer(1, 32768, kv, 8) / 8)
    assert float(glued("10-beyond-3d.ipynb")["s10_q1_mb"].split()[0]) == pytest.approx(with_tp / 1e6, abs=0.5)
    # TP divides K/V traffic and attention work alike: the overlap ratio does not move.
    r1 = context.context_parallel_overlap_ratio(32768, LLAMA.d_model, kv, 8, 1e15, 50e9)
    r8 = context.context_parallel_overlap_ratio(32768, LLAMA.d_model, kv, 8, 1e15, 50e9, tp=8)
    assert r8 == pytest.approx(r1, rel=1e-12)
    with pytest.raises(ValueError, match="tp must divide kv_dim"):
        context.context_parallel_bytes_per_layer(1, 32768, 100, 8, tp=8)


def test_ep_multiple_of_tp_with_fp8_dispatch():
    ds = facts.MOE_ARCHITECTURES["DeepSeek-V3"]
    a2a = facts.DEEPSEEK_V3_ALL_TO_ALL_BYTES
    ep16 = moe.expert_parallel_bytes_per_layer(4096, ds.d_model, ds.top_k, 64)
    ep8 = moe.expert_parallel_bytes_per_layer(4096, ds.d_model, ds.top_k, 64, a2a["combine"],
                                              dispatch_bytes_per_element=a2a["dispatch"])
    tp = tensor_parallel_bytes_per_layer(1, 4096, ds.d_model, 64)
    assert ep16 / tp == pytest.approx(ds.top_k / 2)  # 4 times TP's four all-reduces
    assert ep8 / ep16 == pytest.approx((1 + 2) / (2 + 2))
    assert ep8 / tp == pytest.approx(3)
    g = glued("10-beyond-3d.ipynb")
    assert (g["s10_ds_ep_ratio16"], g["s10_ds_ep_ratio"]) == ("4", "3")
    assert glued("12-precision-and-kernels.ipynb")["s12_a2a_share"] == "75%"


def test_deepseek_v3_bytes_agree_across_sections():
    conv = efficiency.DEEPSEEK_V3_FP8_STATE
    dual = moe.with_parameter_copies(conv, facts.PIPELINE_SCHEDULES["DualPipe"].parameter_copies)
    assert (conv.total, dual.total) == (12, 16)
    assert (dual.weights, dual.grads, dual.optimizer) == (8, 4, 4)
    s9, s11 = glued("10-beyond-3d.ipynb"), glued("12-precision-and-kernels.ipynb")
    assert s9["s10_ds_bytes"] == s11["s12_ds_bytes"] == "12"  # section 9 used ZeRO's 16
    assert s9["s10_ds_bytes_dualpipe"] == s11["s12_ds_bytes_dualpipe"] == "16"


def test_deepseek_v3_state_and_expert_share():
    ds = facts.MOE_ARCHITECTURES["DeepSeek-V3"]
    lay = facts.MOE_LAYOUTS[0]
    routed = (ds.layers - ds.dense_layers) * ds.experts * 3 * ds.d_model * ds.expert_ffn
    dense = ds.total_params - routed
    conv = moe.with_parameter_copies(efficiency.DEEPSEEK_V3_FP8_STATE, 2)
    parts = moe.moe_memory_breakdown(dense, routed, ep=lay.ep, dp=lay.dp, pp=lay.pp, zero_stage=1, convention=conv)
    by_hand_dense = dense / 16 * (8 + 4 + 4 / 128)
    by_hand_experts = routed / (64 * 16) * (8 + 4 + 4 / 2)
    assert parts.dense == pytest.approx(by_hand_dense)
    assert parts.experts == pytest.approx(by_hand_experts)
    assert parts.total == pytest.approx(moe.moe_memory_per_gpu(dense, routed, lay.ep, lay.dp, pp=lay.pp,
                                                               zero_stage=1, convention=conv))
    assert parts.expert_share == pytest.approx(0.41, abs=0.005)
    g = glued("10-beyond-3d.ipynb")
    assert g["s10_ds_state_dualpipe_gb"] == f"{parts.total / 1e9:.0f} GB"
    assert g["s10_ds_expert_share"] == "41%"


def test_full_recomputation_alternative():
    per_layer = context.full_recompute_bytes_per_layer(1, LONG, LLAMA.d_model, tp=8)
    assert per_layer == pytest.approx(2 * LONG * LLAMA.d_model / 8)
    assert context.FULL_RECOMPUTE_EXTRA_COMPUTE == pytest.approx(1 / 3)
    assert glued("10-beyond-3d.ipynb")["s10_recompute_gb"] == "4.3 GB"


def test_ulysses():
    assert context.ulysses_max_degree(128, 8) == 8
    assert context.ulysses_max_degree(128, 8, replicate_kv=True) == 128
    # b s/u (2h + 2 d_kv) (u-1)/u elements forward, the same backward, 2 bytes each.
    assert context.ulysses_bytes_per_layer(1, 1024, 64, 16, 4) == pytest.approx(2 * 256 * (128 + 32) * 0.75 * 2)
    with pytest.raises(ValueError, match="degree must divide seq_len"):
        context.ulysses_bytes_per_layer(1, 1000, 64, 16, 3)


def test_pipeline_schedule_facts():
    zbv, dual = facts.PIPELINE_SCHEDULES["ZB-V"], facts.PIPELINE_SCHEDULES["DualPipe"]
    assert facts.pipeline_stash(zbv, 8) == 8 and zbv.sends_vs_1f1b == 2 and zbv.parameter_copies == 1
    assert facts.pipeline_stash(dual, 8) == 9 and dual.parameter_copies == 2
    with pytest.raises(ValueError, match="stages"):
        facts.pipeline_stash(zbv, 0)


def test_fp8_recipes():
    ds = facts.FP8_RECIPES["DeepSeek-V3"]
    assert (ds.forward_format, ds.gradient_format) == ("E4M3", "E4M3")
    assert ds.activation_tile == (1, 128) and ds.weight_block == (128, 128) and ds.fp32_promotion_interval == 128
    assert {r.scaling for r in facts.FP8_RECIPES.values()} >= {"delayed", "current"}


def test_new_cites_are_in_the_bibliography():
    bib = (ROOT / "book" / "references.bib").read_text()
    cites = {r.cite for r in facts.FP8_RECIPES.values()} | {s.cite for s in facts.PIPELINE_SCHEDULES.values()}
    cites |= {facts.DEEPSEEK_V3_MLA["cite"], facts.DEEPSEEK_V3_ALL_TO_ALL_BYTES["cite"]}
    for key in cites | {"jacobs2023ulysses", "gale2023megablocks", "dao2023flashattention2"}:
        assert f"{{{key}," in bib, key
    assert "arXiv:2401.10241 (2023)" not in bib


def _first_figures(x: float, n: int) -> float:
    """``x`` rounded to ``n`` significant figures."""
    return float(f"{x:.{n}g}")


def test_lab6_fits_differ_beyond_the_third_figure():
    # Hoffmann et al.'s printed constants against their unrounded ones: equal to two figures.
    rounded, precise, epoch = scaling.HOFFMANN_ROUNDED, scaling.HOFFMANN_PRECISE, scaling.EPOCH_2024
    for name in ("alpha", "beta"):
        assert _first_figures(getattr(rounded, name), 2) == _first_figures(getattr(precise, name), 2)
    # Epoch AI's refit of the same data: beta differs already in its first figure
    # (the old text said the published fits differ only in the third).
    assert _first_figures(epoch.beta, 1) != _first_figures(rounded.beta, 1)
    g = glued("06-scaling-law.ipynb", folder="labs")
    assert float(g["l06_beta_epoch"]) == pytest.approx(epoch.beta, abs=0.005)
    assert float(g["l06_beta_hoffmann"]) == pytest.approx(rounded.beta, abs=0.005)


def test_mla_cache_width():
    # DeepSeek-V3's MLA caches a 512-wide latent and a 64-wide rotary key per token (report
    # sec. 4.2: d_c = 512, d_h^R = 64), against 2 x 128 heads x 128 for full keys and values.
    mla = facts.DEEPSEEK_V3_MLA
    assert (mla["kv_latent"], mla["rope_key"], mla["heads"], mla["head_dim"]) == (512, 64, 128, 128)
    g = glued("10-beyond-3d.ipynb")
    assert int(g["s10_mla_cached"].replace(",", "")) == mla["kv_latent"] + mla["rope_key"]
    assert int(g["s10_mla_full"].replace(",", "")) == 2 * mla["heads"] * mla["head_dim"]


# ------------------------------------------------------------------------------------------
# A referee's second read (errors, slips and the field through 2026): every corrected number is
# read back from the stored notebook, where the reader sees it, and fails on the old value.

def _md(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def test_palm_kv_width_is_one_head_of_256():
    palm = facts.ARCHITECTURES["PaLM"]
    assert context.kv_width(palm.d_model, palm.heads, palm.kv_heads, head_dim=palm.head_dim) == 256
    assert context.kv_width(palm.d_model, palm.heads, palm.kv_heads) == 384  # d_model / heads: the old figure
    assert glued("10-beyond-3d.ipynb")["s10_palm_kv"] == "256"


def test_kaplan_takeaway_follows_the_sections_body():
    takeaways = _md("chapters/02-kaplan.md").split("```{admonition} Takeaways", 1)[1]
    assert "fixed learning-rate schedule; the next section" not in takeaways
    assert "more than to the learning-rate schedule" in takeaways


def test_selective_recomputation_at_the_paragraphs_sequence_length():
    from solutions import steptime

    arch = facts.ARCHITECTURES["Llama 3 70B"]
    extra = {s: steptime.hardware_flops_per_token(steptime.shape_of(arch, seq_len=s), "selective")
             / steptime.model_flops_per_token(steptime.shape_of(arch, seq_len=s)) - 1 for s in (4096, 8192)}
    assert f"{extra[4096]:.0%}" == "2%" and f"{extra[8192]:.0%}" == "4%"  # 4% was computed at 8,192
    g = glued("06-model-parallelism.ipynb")
    assert (g["s06_sel_time"], g["s06_sel_seq"], g["s06_seq"]) == ("2%", "4,096", "4,096")


def test_section_6_uses_no_zero_before_section_7():
    g = glued("06-model-parallelism.ipynb")
    assert g["s06_tp_only_state"] == "140 GB"  # TP8 alone, 16 bytes/param, no sharding: 1,120 / 8
    assert g["s06_dp_only_state"] == "1,120 GB"  # ZeRO-1 over 1,024 replicas printed 281 GB
    text = _md("chapters/06-model-parallelism.md")
    assert "(ZeRO-1, ZeRO's byte count)" not in text


def test_fsdp_traffic_per_pass_and_per_step():
    from solutions import practice

    p3 = practice.s07_traffic_ratio()
    assert p3["ratio"] == pytest.approx(1.5) and p3["ratio_step"] == pytest.approx(12)
    g = glued("07-fsdp.ipynb")
    assert (g["s07_pr3_ratio"], g["s07_pr3_ratio_step"], g["s07_z3_m_ratio"], g["s07_m"]) == ("1.5", "12", "12", "8")
    takeaways = _md("chapters/07-fsdp.md").split("```{admonition} Takeaways", 1)[1]
    assert "per forward and backward pass" in takeaways and "micro-batch" in takeaways
    assert "set_reshard_after_backward(False)" in _md("chapters/07-fsdp.md")


def test_flashattention_keeps_two_numbers_per_row():
    text = _md("chapters/01-single-gpu.md")
    assert "only one number per row" not in text and "two numbers (the running maximum and the sum)" in text


def test_section_1_counts_its_accelerators():
    assert len(facts.GPUS) == 6
    assert glued("01-single-gpu.ipynb")["s01_n_gpus"] == "Six"  # "Five" was typed for six rows


def test_mtnlg_mfu_is_one_figure_with_its_source():
    assert facts.MFU["MT-NLG"]["mfu"] == 0.302
    assert glued("06-model-parallelism.ipynb")["s06_mtnlg_mfu"] == "30.2%"
    g = glued("planner.ipynb")
    assert g["pl_mtnlg_palm"] == "30.2%"  # PaLM's table, beside the course's own count
    assert abs(float(g["pl_mtnlg_pub"].rstrip("%")) - 30.2) <= 0.2


def test_llama3_long_context_layout_is_printed_alike():
    lay = CP_LAYOUT
    assert (lay.tp, lay.cp, lay.pp, lay.dp, lay.num_gpus) == (8, 16, 16, 8, 16384)
    g = glued("10-beyond-3d.ipynb")
    assert (g["s10_tp"], g["s10_cp"], g["s10_pp"], g["s10_dp"], g["s10_gpus"]) == ("8", "16", "16", "8", "16,384")
    nb = json.loads((ROOT / "chapters" / "06-model-parallelism.ipynb").read_text())
    tables = "".join(o.get("data", {}).get("text/markdown", "") if isinstance(o.get("data", {}).get("text/markdown"), str)
                     else "".join(o.get("data", {}).get("text/markdown", []))
                     for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    assert "| TP × CP × PP × DP |" in tables and "| 16,384 | 8 × 16 × 16 × 8 | 38% |" in tables


def test_context_parallel_memory_is_per_micro_batch():
    text = _md("chapters/10-beyond-3d.md")
    assert "{glue:text}`s10_act_stage_cp_gb` of activations for the same stage, per micro-batch" in text


def test_every_often_quoted_note_says_who_is_quoted():
    import glob

    notes = 0
    for path in sorted(glob.glob(str(ROOT / "chapters" / "*.md"))):
        text = Path(path).read_text(encoding="utf-8")
        assert "**Often quoted:**" not in text, path
        notes += text.count("**Often quoted** (here in the words of this course's first draft):")
    assert notes == 11


def test_deepseek_v3_reading_is_stated():
    text = _md("chapters/12-precision-and-kernels.md")
    assert "a count is a" in text and "reading of the recipe" in text and "files the master copy" in text


def test_lab6_gives_the_factors_and_the_digits():
    g = glued("06-scaling-law.ipynb", folder="labs")
    assert g["l06_factor_rounding"] == "1.6" and g["l06_factor_refit"] == "5.1"
    assert "a factor of several" not in _md("labs/06-scaling-law.md")
    nb = json.loads((ROOT / "labs" / "06-scaling-law.ipynb").read_text())
    shown = json.dumps(nb)
    # Every digit each set has (the sets differ in the third figure, the refit in the first)
    assert "| Hoffmann et al., rounded | 1.69 | 406.4 | 410.7 | 0.34 | 0.28 | 0.4516 |" in shown
    assert "| Hoffmann et al., unrounded | 1.69337 | 406.401 | 410.723 | 0.33917084 | 0.2849083 | 0.4565 |" in shown


def test_lab2_names_the_n_of_6n():
    from labs.data import load_corpus
    from labs.model import GPTConfig, matmul_params, padded_vocab, param_count

    cfg = GPTConfig(vocab_size=padded_vocab(load_corpus().vocab_size))
    g = glued("02-ddp.ipynb", folder="labs")
    assert g["l02_matmul_params"] == f"{matmul_params(cfg):,}" != g["l02_params"] == f"{param_count(cfg):,}"


def test_wording_slips():
    assert "makes its cost independent of the number of ranks" not in _md("assignments/a1-ring-allreduce.md")
    a5 = _md("assignments/a5-pipeline-1f1b.md")
    assert "narayanan2021memory" in a5 and "narayanan2019pipedream,narayanan2021megatron" not in a5
    assert "from first principles" not in _md("chapters/planner.md")
    lab7 = _md("labs/07-predicted-vs-measured.md")
    assert "from first principles" not in lab7 and "streaming multiprocessors" in lab7


def test_the_exercises_come_after_what_they_use():
    toc = _md("book/_toc.yml")
    order = [line.split("chapters/")[1].strip() for line in toc.splitlines() if "file: chapters/" in line]
    assert order.index("09-exercises") == order.index("08-when-to-use-what") + 1
    assert order.index("09-exercises") < order.index("10-beyond-3d")


def test_frontier_figures_as_their_sources_print_them():
    from solutions import frontier

    fmt = frontier.BLOCK_SCALED_FORMATS
    assert (fmt["MXFP8"].block, fmt["NVFP4"].block, fmt["NVFP4"].scale_format) == (32, 16, "E4M3")
    g = glued("12-precision-and-kernels.ipynb")
    assert (g["s12_mx_block"], g["s12_nv_block"], g["s12_mx_params"], g["s12_mx_tokens"]) == ("32", "16", "8B", "15T")
    assert (g["s12_nv_params"], g["s12_nv_tokens"]) == ("12B", "10T")
    assert (g["s12_l4_gpus"], g["s12_l4_tflops"], g["s12_l4_tokens"]) == ("32K", "390", "30T")
    g7 = glued("07-fsdp.ipynb")
    assert (g7["s07_k2_total"], g7["s07_k2_active"], g7["s07_k2_tokens"]) == ("1.04T", "32B", "15.5T")
    g11 = glued("11-after-chinchilla.ipynb")
    assert (g11["s11_small_low"], g11["s11_small_high"], g11["s11_qwen_tokens"]) == ("3,667", "60,000", "36T")
    g8 = glued("08-when-to-use-what.ipynb")
    assert (g8["s08_rl_hours"], g8["s08_rl_run"]) == ("400,000", "100,000")
    bib = (ROOT / "book" / "references.bib").read_text()
    keys = {r.cite for r in frontier.LOW_PRECISION_RUNS.values()} | {m.cite for m in frontier.OVERTRAINED_SMALL_MODELS}
    keys |= {frontier.KIMI_K2["cite"], frontier.RL_SCALING_STUDY["cite"], "jordan2024muon", "liu2025muon",
             "liang2025torchtitan", "deepseek2025deepep", "deepseek2025dualpipe", "guo2025deepseekr1",
             "tazi2025ultrascale", "austin2025scaling", "hf2025smolplaybook"}
    for key in keys:
        assert f"{{{key}," in bib, key
