"""Chapter 13's "Three walls, and two layouts in one model": the facts it glues, checked
against the rules it states (the planner page's readings of the gpt-oss-120b and MT-NLG rows
assert theirs in the notebook, which the book build executes)."""
from pathlib import Path

import pytest

from solutions import facts, moe_step, steptime

ROOT = Path(__file__).resolve().parents[2]


def test_folding_example_is_a_layout_of_its_gpus():
    f = facts.PARALLEL_FOLDING_EXAMPLE
    assert f["tp"] * f["cp"] * f["dp"] * f["pp"] == f["gpus"]
    # folded, the experts' EP x ETP fills exactly the TP x CP x DP ranks of one stage
    assert f["ep"] * f["etp"] == f["tp"] * f["cp"] * f["dp"]


def test_planner_folds_expert_parallelism_like_megatron_core():
    f = facts.PARALLEL_FOLDING_EXAMPLE
    experts = steptime.shape_of(facts.MOE_ARCHITECTURES["DeepSeek-V3"]).moe
    moe_step.check_expert_layout(experts, f["ep"], f["etp"], f["tp"], f["cp"], f["dp"])
    # without folding EP is carved out of DP alone, and EP 64 over DP 8 cannot be
    with pytest.raises(ValueError, match="ep x etp must divide"):
        moe_step.check_expert_layout(experts, f["ep"], f["etp"], 1, 1, f["dp"])


def test_report_figures_and_cites():
    r = facts.MCORE_MOE_REPORT_TFLOPS
    # GB300 above GB200 for both models
    for model in ("DeepSeek-V3", "Qwen3-235B-A22B"):
        assert r[model]["GB300"] > r[model]["GB200"] > 0
    bib = (ROOT / "book" / "references.bib").read_text()
    for key in (r["cite"], facts.PARALLEL_FOLDING_EXAMPLE["cite"]):
        assert f"{{{key}," in bib, key
