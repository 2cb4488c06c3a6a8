"""The quoted claims (solutions.quoted), the cited facts the chapter corrects them
with (solutions.facts), and the notebooks' use of both.

Expected values here are either paper figures with their citation in a comment,
or derived independently of the code under test (plain arithmetic).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from solutions import quoted, communication, compute, facts, memory, scaling

ROOT = Path(__file__).resolve().parents[2]
BIB = ROOT / "book" / "references.bib"
CHAPTERS = ROOT / "chapters"
CLAIMS = quoted.QUOTED_CLAIMS
GB = 1e9


def _bib_keys():
    return set(re.findall(r"@\w+\{([^,\s]+),", BIB.read_text(encoding="utf-8")))


def _new_cites():
    yield from (c.cite for c in CLAIMS.values())
    yield from (c.cite for c in facts.CLUSTERS.values())
    yield from (law.cite for law in facts.KAPLAN_LOSS_LAWS.values())
    yield facts.HOFFMANN_STUDY.cite


# -- the table itself ---------------------------------------------------------
def test_every_cite_key_is_in_the_bibliography():
    # No skip: the bibliography is part of the repository, so a missing file is a failure.
    assert BIB.is_file(), f"{BIB.relative_to(ROOT)} is missing"
    keys = _bib_keys()
    assert {c for c in _new_cites() if c not in keys} == set()


@pytest.mark.parametrize("key", sorted(CLAIMS))
def test_claim_entry_is_well_formed(key):
    claim = CLAIMS[key]
    assert claim.key == key
    assert claim.verdict in quoted.VERDICTS
    assert claim.sections, "every claim names the section that corrects it"
    for section in claim.sections:
        assert (CHAPTERS / f"{section}.md").exists(), section
    for name, value in claim.quoted.items():
        assert isinstance(value, (int, float)) and not isinstance(value, bool), name
        assert math.isfinite(value) and value > 0, name


def _renderings(value):
    """Ways a quoted figure writes a number: 17,920 / 1000 / 406.0 / 70B / 1.4T / 1e22."""
    out = {str(value), f"{value:g}", f"{value:,.0f}", f"{value:.0e}".replace("e+", "e")}
    for scale, suffix in ((1e12, "T"), (1e9, "B")):
        if value >= scale:
            out.add(f"{value / scale:g}{suffix}")
    return out


@pytest.mark.parametrize("key", sorted(CLAIMS))
def test_quoted_figures_are_the_ones_the_claim_states(key):
    # Internal consistency: every quoted number appears in the claim's own words.
    claim = CLAIMS[key]
    for name, value in claim.quoted.items():
        assert any(r in claim.says for r in _renderings(value)), (name, value, claim.says)


def test_claims_are_read_only():
    claim = CLAIMS["mtnlg_layout"]
    with pytest.raises(TypeError):
        claim.quoted["dp"] = 8
    with pytest.raises(TypeError):
        CLAIMS["mtnlg_layout"] = claim
    assert claim["dp"] == claim.quoted["dp"]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"verdict": "maybe"}, "verdict"), ({"quoted": {}}, "quoted")],
)
def test_quoted_claim_rejects_bad_entries(kwargs, match):
    fields = dict(key="x", quoted={"a": 1}, says="a 1", verdict="wrong", correction="", cite="nccltests",
                  sections=("00-introduction",))
    fields.update(kwargs)
    with pytest.raises(ValueError, match=match):
        quoted.QuotedClaim(**fields)


# -- each correction holds ----------------------------------------------------
MTNLG = [lay for lay in facts.LAYOUTS if lay.model == "MT-NLG"]
LLAMA = [lay for lay in facts.LAYOUTS if lay.model == "Llama 3 405B"]


def test_mtnlg_layout_claim_is_wrong():
    claim = CLAIMS["mtnlg_layout"]
    # The figures as the claim quotes them; its arithmetic is self-consistent.
    assert (claim["tp"], claim["pp"], claim["dp"], claim["gpus"]) == (8, 35, 64, 17_920)
    assert claim["tp"] * claim["pp"] * claim["dp"] == claim["gpus"]
    # TP and PP agree with every run the paper reports (Smith et al. 2022)...
    assert all((lay.tp, lay.pp) == (claim["tp"], claim["pp"]) for lay in MTNLG)
    # ...but neither the DP degree nor the GPU count is one of them,
    assert claim["dp"] not in {lay.dp for lay in MTNLG}
    assert claim["gpus"] not in {lay.num_gpus for lay in facts.LAYOUTS}
    # and the count is four times the whole of Selene (560 DGX A100 nodes of 8 GPUs).
    assert facts.SELENE.num_gpus == 560 * 8
    assert claim["gpus"] == 4 * facts.SELENE.num_gpus


def test_selene_holds_every_reported_mtnlg_run():
    assert facts.SELENE.largest_run == max(lay.num_gpus for lay in MTNLG) <= facts.SELENE.num_gpus
    # Every run is whole replicas on whole nodes.
    for lay in MTNLG:
        assert lay.num_gpus % facts.SELENE.gpus_per_node == 0


def test_llama3_cluster_claim_names_the_machine_not_the_job():
    claim = CLAIMS["llama3_cluster"]
    cluster = facts.LLAMA3_CLUSTER
    assert claim["gpus"] == cluster.num_gpus  # the cluster is that large ("24K GPUs")...
    # ...but pre-training used at most 16K of them (Dubey et al. 2024, Table 4).
    assert cluster.largest_run == max(lay.num_gpus for lay in LLAMA) == 2**14
    assert cluster.largest_run < claim["gpus"]


def test_state_70b_claim_is_below_every_convention():
    claim = CLAIMS["state_70b"]
    twelve = memory.memory_per_gpu(claim["params"], "dp", 1) / GB
    sixteen = memory.zero_memory_per_gpu(claim["params"], 0, 1, "zero_16") / GB
    assert twelve == pytest.approx(12 * 70)  # the quoted own 12 bytes per parameter
    assert sixteen == pytest.approx(16 * 70)
    assert claim["state_gb"] < twelve < sixteen
    # 700 GB is what 10 bytes per parameter would give: no convention the chapter uses.
    assert claim["state_gb"] * GB / claim["params"] == pytest.approx(10)


def test_state_7b_claim_fits_on_an_h200():
    claim = CLAIMS["state_7b"]
    fits = [g.name for g in facts.GPUS.values() if g.memory_gb >= claim["state_gb"]]
    assert fits == ["H200"]  # "fits on no single GPU" is wrong for exactly one GPU of the chapter


def test_h100_peak_claim_is_a_rounding_of_the_dense_figure():
    claim = CLAIMS["h100_peak"]
    dense = facts.GPUS["H100 SXM"].peak_flops_per_s
    assert claim["tflops"] * 1e12 != dense
    assert abs(claim["tflops"] * 1e12 / dense - 1) < 0.02  # a rounding, not the sparse figure
    assert 2 * dense / 1e12 == pytest.approx(1979, abs=0.5)  # datasheet's 2:4-sparse headline


def test_train_70b_years_claim_is_rounded_up():
    claim = CLAIMS["train_70b_years"]
    peak = facts.GPUS["H100 SXM"].peak_flops_per_s
    flops = scaling.training_flops(claim["params"], claim["tokens"])
    years = compute.training_time_seconds(flops, peak) / compute.SECONDS_PER_YEAR
    independent = 6 * 70e9 * 1.4e12 / peak / (365.25 * 86400)
    assert years == pytest.approx(independent)
    assert round(years) == 19 != claim["years"]
    assert abs(claim["years"] / years - 1) < 0.1
    # At the utilisation real runs reach, the single-GPU time is far longer than either figure.
    mfu_hi = max(facts.MFU["Llama 3 405B"]["mfu"])
    assert years / mfu_hi > 2 * claim["years"]


def test_ratio_drift_claim_holds_only_for_the_rounded_constants():
    claim = CLAIMS["optimal_ratio_drift"]
    low, high = claim["budget_low"], claim["budget_high"]

    def ratio(C, constants):
        return scaling.compute_optimal_closed_form(C, constants)[2]

    # Hoffmann et al.'s constants as printed: 62.6 at 1e22 and 122 at 1e25 (FACTS, checked
    # against the paper's eq. 10): "roughly 60" and "over 100" hold.
    assert ratio(low, scaling.HOFFMANN_ROUNDED) == pytest.approx(62.6, abs=0.1)
    assert ratio(high, scaling.HOFFMANN_ROUNDED) == pytest.approx(122, abs=0.5)
    assert ratio(high, scaling.HOFFMANN_ROUNDED) > claim["ratio_high"]
    assert abs(ratio(low, scaling.HOFFMANN_ROUNDED) / claim["ratio_low"] - 1) < 0.1
    # The unrounded constants (41 and 76) and the Epoch AI refit stay below both figures.
    for constants in (scaling.HOFFMANN_PRECISE, scaling.EPOCH_2024):
        assert ratio(low, constants) < claim["ratio_low"]
        assert ratio(high, constants) < claim["ratio_high"]
    assert ratio(low, scaling.HOFFMANN_PRECISE) == pytest.approx(41, abs=0.5)
    assert ratio(high, scaling.HOFFMANN_PRECISE) == pytest.approx(76, abs=0.5)


def test_exercise_constants_claim():
    claim = CLAIMS["exercise_constants"]
    ex, printed = scaling.EXERCISE, scaling.HOFFMANN_ROUNDED
    assert (claim["A"], claim["B"]) == (ex.A, ex.B)  # the exercises keep the quoted values
    assert (claim["A"], claim["B"]) != (printed.A, printed.B)  # the paper prints 406.4, 410.7

    def loss(N, D, A, B):  # eq. 2 of Hoffmann et al., written out independently
        return ex.E + A / N**ex.alpha + B / D**ex.beta

    assert round(loss(175e9, 300e9, claim["A"], claim["B"]), 3) == claim["loss_gpt3"]
    assert round(loss(70e9, 1.4e12, claim["A"], claim["B"]), 3) == claim["loss_chinchilla"]
    # With the printed constants Chinchilla's loss is 1.937, not the quoted 1.936.
    assert round(loss(70e9, 1.4e12, printed.A, printed.B), 3) == 1.937


def _crossover(batch_tokens, P=7e9, bandwidth=50e9, mfu=0.4):
    """Fewest data-parallel GPUs at which the ring all-reduce of bf16 gradients takes as
    long as the computation of one step (the bandwidth term only)."""
    n = np.arange(2, 200_001)
    t_compute = compute.training_time_seconds(6 * P * batch_tokens / n, facts.GPUS["H100 SXM"].peak_flops_per_s, mfu)
    t_comm = communication.allreduce_bytes_per_rank(2 * P, n) / bandwidth
    return int(n[np.argmax(t_comm >= t_compute)])


def test_dp_limit_claim_is_a_heuristic_that_moves_with_the_batch():
    claim = CLAIMS["dp_limit"]
    small, large = _crossover(2**22), _crossover(2**24)
    # The crossover scales with the batch (about 4x here), so no single GPU count is "the" limit.
    assert large / small == pytest.approx(4, rel=0.01)
    assert small < claim["gpus"] < large


def test_fsdp_claim_is_right_for_its_own_convention_only():
    claim = CLAIMS["fsdp_7b"]
    P, n = claim["params"], claim["gpus"]
    before12 = memory.memory_per_gpu(P, "dp", 1) / GB
    after12 = memory.memory_per_gpu(P, "fsdp", n) / GB
    assert before12 == pytest.approx(12 * 7) == claim["before_gb"]
    assert after12 == pytest.approx(12 * 7 / 8)
    assert math.ceil(after12) == claim["after_gb"]  # 10.5, rounded up
    before16 = memory.zero_memory_per_gpu(P, 0, 1, "zero_16") / GB
    after16 = memory.zero_memory_per_gpu(P, 3, n, "zero_16") / GB
    assert (before16, after16) == (pytest.approx(16 * 7), pytest.approx(16 * 7 / 8))
    # "Barely fits on an H100": it does not fit at all.
    assert claim["before_gb"] > facts.GPUS["H100 SXM"].memory_gb


def test_regime_bounds_are_ordered():
    b = quoted.REGIME_BOUNDS
    assert 0 < b["small_max"] < b["medium_max"] < b["frontier_min"]


# -- the new fact entries -----------------------------------------------------
def test_cluster_rejects_inconsistent_entries():
    with pytest.raises(ValueError, match="nodes"):
        facts.Cluster("x", 100, "A100", "MT-NLG", "smith2022mtnlg", nodes=10, gpus_per_node=8)
    with pytest.raises(ValueError, match="both"):
        facts.Cluster("x", 80, "A100", "MT-NLG", "smith2022mtnlg", nodes=10)


def test_kaplan_loss_exponents():
    n, d = facts.KAPLAN_LOSS_LAWS["N"], facts.KAPLAN_LOSS_LAWS["D"]
    # Kaplan et al. 2020, eqs. 1.1 and 1.2.
    assert (n.exponent, d.exponent) == (0.076, 0.095)
    # Doubling N cuts L(N) by about 5%, doubling D cuts L(D) by about 6.4%.
    assert scaling.loss_reduction_per_doubling(n.exponent) == pytest.approx(0.949, abs=5e-4)
    assert scaling.loss_reduction_per_doubling(d.exponent) == pytest.approx(0.936, abs=5e-4)


def test_hoffmann_study_scope():
    study = facts.HOFFMANN_STUDY
    chinchilla = facts.MODELS["Chinchilla"]
    # Chinchilla itself lies outside the grid it was chosen from: an extrapolation.
    assert chinchilla.params > study.params[1]
    assert chinchilla.tokens > study.tokens[1]
    with pytest.raises(ValueError, match="params"):
        facts.ScalingStudy("x", 1, (16e9, 70e6), (5e9, 500e9), "hoffmann2022chinchilla")


# -- the scaling helpers ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(scaling.CONSTANT_SETS))
def test_ratio_growth_exponent_is_the_slope_of_the_optimal_ratio(name):
    c = scaling.CONSTANT_SETS[name]
    k = scaling.ratio_growth_exponent(c)
    # D/N ~ C^(b - a) with a = beta/(alpha+beta), b = alpha/(alpha+beta) (Hoffmann et al. eq. 4).
    assert k == pytest.approx((c.alpha - c.beta) / (c.alpha + c.beta))
    r1 = scaling.compute_optimal_closed_form(1e20, c)[2]
    r2 = scaling.compute_optimal_closed_form(1e24, c)[2]
    assert math.log(r2 / r1) / math.log(1e4) == pytest.approx(k)
    assert (k > 0) == (c.alpha > c.beta)


def test_iso_flop_tokens_inverts_training_flops():
    N = np.logspace(8, 12, 7)
    D = scaling.iso_flop_tokens(3e23, N)
    np.testing.assert_allclose(scaling.training_flops(N, D), 3e23)
    assert scaling.iso_flop_tokens(6e20, 1e9) == pytest.approx(1e11)
    with pytest.raises(ValueError, match="N"):
        scaling.iso_flop_tokens(1e20, 0)
    with pytest.raises(ValueError, match="C"):
        scaling.iso_flop_tokens(-1, 1e9)
    with pytest.raises(ValueError, match="constants"):
        scaling.ratio_growth_exponent("exercise")


# -- the notebooks import these figures instead of typing them ----------------
NOTEBOOKS = sorted(CHAPTERS.glob("0[0-8]-*.md"))
CODE_CELL = re.compile(r"^```\{code-cell\}.*?^```\s*$", re.S | re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_define_no_quoted_figures_locally(path):
    code = "\n".join(CODE_CELL.findall(path.read_text(encoding="utf-8")))
    assert not re.search(r"^\s*QUOTED\w*\s*=", code, re.M), "quote the often-quoted figures from solutions.quoted"
    assert not re.search(r"^\s*SELENE\w*\s*=\s*\d", code, re.M), "use solutions.facts.SELENE"
    assert "NOT YET IN solutions" not in code
