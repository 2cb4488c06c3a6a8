"""solutions.moe's expert-parallel functions against arithmetic and brute force written out
here, and the numbers the section on mixtures of experts glues, pinned to hand calculations
and to the papers' own figures."""
from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path

import numpy as np
import pytest

from solutions import facts, moe

ROOT = Path(__file__).resolve().parents[2]


def glued(notebook: str, folder: str = "chapters") -> dict:
    nb = json.loads((ROOT / folder / notebook).read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []) if cell["cell_type"] == "code" else ():
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                out[name] = o["data"]["application/papermill.record/text/plain"].strip("'")
    return out


# --------------------------------------------------------------------------- routing and bytes


def test_experts_are_placed_in_contiguous_blocks():
    assert [moe.expert_owner(e, 8, 4) for e in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert moe.expert_owner(np.array([[7, 0], [3, 4]]), 8, 2).tolist() == [[1, 0], [0, 1]]
    with pytest.raises(ValueError, match="ep must divide num_experts"):
        moe.expert_owner(0, 8, 3)
    with pytest.raises(ValueError, match="expert must be in 0..7"):
        moe.expert_owner(8, 8, 2)


def test_routing_counts_rows_are_each_ranks_copies():
    rng = np.random.default_rng(1)
    ids = [rng.integers(0, 8, size=(10, 2)) for _ in range(4)]
    C = moe.routing_counts(ids, 8, 4)
    assert C.sum(axis=1).tolist() == [20] * 4
    for s in range(4):
        for d in range(4):
            assert C[s, d] == sum(int(e) // 2 == d for e in ids[s].ravel())
    with pytest.raises(ValueError, match="one routing per rank"):
        moe.routing_counts(ids[:3], 8, 4)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_uniform_counts_give_the_uniform_formula(n):
    T, k, h = 64, 2, 16
    C = np.full((n, n), T * k // n)
    got = moe.expert_parallel_bytes_from_counts(C, h, 2)
    assert got == pytest.approx(np.full(n, moe.expert_parallel_bytes_per_layer(T, h, k, n)))
    fp8 = moe.expert_parallel_bytes_from_counts(C, h, 2, dispatch_bytes_per_element=1)
    assert fp8 == pytest.approx(np.full(n, moe.expert_parallel_bytes_per_layer(T, h, k, n, 2, dispatch_bytes_per_element=1)))


def test_uneven_counts_by_hand():
    C = np.array([[5, 3], [7, 1]])
    # Rank 0 dispatches its 3 foreign copies and combines back the 7 it received; rank 1 the
    # reverse. Twice (backward), h = 4 elements of 2 bytes.
    assert moe.all_to_all_rows(C, "dispatch").tolist() == [3, 7]
    assert moe.all_to_all_rows(C, "combine").tolist() == [7, 3]
    assert moe.expert_parallel_bytes_from_counts(C, 4).tolist() == [2 * (3 + 7) * 4 * 2] * 2
    assert moe.expert_parallel_bytes_from_counts(C, 4, backward=False).tolist() == [(3 + 7) * 4 * 2] * 2
    with pytest.raises(ValueError, match="square"):
        moe.all_to_all_rows(np.ones((2, 3)))
    with pytest.raises(ValueError, match="direction"):
        moe.all_to_all_rows(C, "sideways")


def test_count_exchange_and_flops_per_copy():
    assert moe.count_exchange_bytes(256, 64) == 63 * 4 * 8
    assert moe.count_exchange_bytes(8, 1) == 0
    assert moe.expert_flops_per_copy(7168, 2048) == 18 * 7168 * 2048
    assert moe.expert_flops_per_copy(7168, 2048, backward=False) == 6 * 7168 * 2048


def test_layer_time_by_hand():
    C = np.array([[10, 0], [10, 0]])  # everything to rank 0
    t = moe.expert_parallel_layer_time(C, seconds_per_copy=1e-3, row_bytes=100, bandwidth_bytes_per_s=1e4,
                                       latency_s=1e-3, fixed_s=2e-3, count_exchange_s=5e-4)
    assert t.compute_s.tolist() == pytest.approx([2e-3 + 20e-3, 2e-3])
    # Busiest rank: rank 0 combines 10 rows back (rank 1 dispatched 10): 10 x 100 B / 1e4 B/s.
    per_a2a = 1e-3 + 10 * 100 / 1e4
    assert t.communication_s == pytest.approx(4 * per_a2a + 5e-4)
    assert t.step_s == pytest.approx(22e-3 + 4 * per_a2a + 5e-4)
    assert t.imbalance == pytest.approx(22 / 12)
    assert moe.all_to_all_seconds(np.array([[4]]), 8, 1e9) == 0.0


# --------------------------------------------------------------------------- balance


def test_top_k_with_a_bias_chooses_but_ties_go_low():
    scores = np.array([[0.1, 0.5, 0.5, 0.2]])
    assert moe.top_k_experts(scores, 2).tolist() == [[1, 2]]
    assert moe.top_k_experts(scores, 2, bias=[1.0, 0, 0, 0]).tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="bias"):
        moe.top_k_experts(scores, 2, bias=[1.0])


def test_bias_update_follows_the_sign_rule():
    b = moe.aux_loss_free_bias_update([0.0, 0.0, 0.0, 0.0], [10, 2, 4, 4], 0.001)
    assert b.tolist() == pytest.approx([-0.001, 0.001, 0.001, 0.001])  # mean 5: 4 is under it too
    b = moe.aux_loss_free_bias_update([0.0, 0.0, 0.0], [3, 3, 3], 0.5)
    assert b.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="speed"):
        moe.aux_loss_free_bias_update([0.0], [1], 0)


def test_bias_balancing_removes_a_learned_preference():
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(2048, 8)) + np.linspace(1, 0, 8) for _ in range(150)]
    imbalances, bias = moe.balance_with_bias(batches, 2, 0.01)
    assert imbalances[0] > 1.5 and imbalances[-30:].mean() < 1.15
    assert np.all(np.diff(bias) > -0.05)  # the preferred experts end with the lowest bias


@pytest.mark.parametrize("E, g, k", [(8, 2, 2), (8, 4, 3), (12, 3, 2)])
def test_expected_groups_per_token_is_the_brute_force_mean(E, g, k):
    per = E // g
    touched = [len({e // per for e in choice}) for choice in itertools.combinations(range(E), k)]
    assert moe.expected_groups_per_token(E, g, k) == pytest.approx(np.mean(touched))


def test_cross_node_copies_for_deepseek_v3_by_hand():
    # 256 experts on 8 nodes, 8 per token: expected nodes 8 (1 - C(224, 8) / C(256, 8)).
    nodes = 8 * (1 - comb(224, 8) / comb(256, 8))
    assert moe.expected_groups_per_token(256, 8, 8) == pytest.approx(nodes)
    assert moe.cross_group_copies_per_token(256, 8, 8, dedup=False) == pytest.approx(8 * 7 / 8)
    assert moe.cross_group_copies_per_token(256, 8, 8) == pytest.approx(nodes * 7 / 8)
    assert moe.cross_group_copies_per_token(256, 8, 8, group_limit=4) == pytest.approx(4 * 7 / 8)
    # a limit of more nodes than there are changes nothing
    assert moe.cross_group_copies_per_token(256, 8, 8, group_limit=9) == pytest.approx(nodes * 7 / 8)


@pytest.mark.parametrize("D, G, M", [(8, 8, 4), (4, 8, 4), (2, 8, 3), (4, 4, 2)])
def test_group_limited_domains_are_the_brute_force_mean(D, G, M):
    """Groups laid in order over domains (G / D groups each): every choice of M groups, each
    touched, and the domains they lie on; with experts enough (k = 8) to touch every group."""
    per = G // D
    touched = [len({g // per for g in choice}) for choice in itertools.combinations(range(G), M)]
    assert moe.group_limited_domains_per_token(D, 8, G, M) == pytest.approx(np.mean(touched), rel=1e-12)


def test_group_limited_domains_never_exceed_what_the_experts_reach():
    # two experts over 8 domains touch 8 (1 - (7/8)^2) = 1.875 at most, whatever 4 groups allow
    assert moe.group_limited_domains_per_token(8, 2, 8, 4) == pytest.approx(8 * (1 - (7 / 8) ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="group_limit must be at most router_groups"):
        moe.group_limited_domains_per_token(8, 8, 4, 5)


def test_published_runs_as_the_papers_state_them():
    runs = {r.model: r for r in moe.MOE_RUNS}
    v3 = runs["DeepSeek-V3"]  # report sec. 3.2, 4.2
    assert (v3.gpus, v3.ep, v3.pp, v3.tp, v3.routed_experts, v3.top_k, v3.shared_experts) == (2048, 64, 16, 1, 256, 8, 1)
    assert facts.MOE_LAYOUTS[0].ep == v3.ep and facts.MOE_ARCHITECTURES["DeepSeek-V3"].experts == v3.routed_experts
    k2 = runs["Kimi K2"]  # report sec. 2.3, 2.4.2
    assert (k2.ep, k2.pp, k2.routed_experts, k2.top_k, k2.sparsity) == (16, 16, 384, 8, 48)
    v2 = runs["DeepSeek-V2"]  # report sec. 3.1.2, 3.1.3
    assert (v2.ep, v2.pp, v2.routed_experts, v2.top_k, v2.shared_experts) == (8, 16, 160, 6, 2)
    assert (runs["DeepSeek-V3 (prefill)"].ep, runs["DeepSeek-V3 (decode)"].ep) == (32, 320)
    assert moe.KIMI_K2_SPARSITY_FLOP_SAVINGS[8] == 1.69
    assert moe.DEEPSEEK_V3_TRAINING["nvlink_bytes_per_s"] / moe.DEEPSEEK_V3_TRAINING["ib_bytes_per_s"] == 3.2


# --------------------------------------------------------------------------- the section's numbers


def test_the_sections_numbers_are_the_hand_calculations():
    g = glued("13-mixture-of-experts.ipynb")
    ds = facts.MOE_ARCHITECTURES["DeepSeek-V3"]
    assert g["s13_ds_flops"] == f"{6 * 37e9 * 14.8e12:.2g}" == "3.3e+24"
    assert g["s13_ds_flop_ratio"] == "18"  # 671 / 37
    assert g["s13_copy_mflops"] == f"{18 * 7168 * 2048 / 1e6:.0f}"
    assert g["s13_bytes_per_token_kb"] == f"{4 * 8 * 7168 * 63 / 64 * 2 / 1e3:.0f} kB"
    assert g["s13_fp8_share"] == "75%"  # (1 + 2) / (2 + 2): dispatch in FP8, combine in BF16
    # DeepSeek-V3's own figures: 3.2 times the bandwidth, "a maximum of 13 experts".
    assert (g["s13_link_ratio"], g["s13_max_experts"], g["s13_node_limit"]) == ("3.2", "13", "4")
    assert g["s13_cross_limit"] == f"{4 * 7 / 8:.1f}"
    # The worked design: ZeRO-1 (4 + 12/DP bytes per parameter of a shard), PP16, DP128.
    routed = (ds.layers - ds.dense_layers) * ds.experts * 3 * ds.d_model * ds.expert_ffn
    dense = ds.total_params - routed
    ep8 = dense / 16 * (4 + 12 / 128) + routed / (8 * 16) * (4 + 12 / 16)
    assert g["s13_w_state_8"] == f"{ep8 / 1e9:.0f} GB"
    assert g["s13_w_state_1"] == f"{(dense + routed) / 16 * (4 + 12 / 128) / 1e9:.0f} GB"
    compute_ms = 4096 * 9 * 18 * 7168 * 2048 / (989.4e12 * 0.4) * 1e3
    assert g["s13_w_compute_ms"] == f"{compute_ms:.0f} ms"
    assert g["s13_w_ep8_ms"] == f"{4 * 4096 * 8 * 7168 * 7 / 8 * 2 / 450e9 * 1e3:.1f} ms"
    assert g["s13_w_ep64_limit_ms"] == f"{4 * 4096 * 3.5 * 7168 * 2 / 50e9 * 1e3:.0f} ms"
    assert float(g["s13_imb_start"]) > 1.5 > 1.2 > float(g["s13_imb_end"])
    assert g["s13_q3_drop"] == f"{2 * (4096 - 1280) / 8192:.0%}"


def test_the_lab_notebook_glues_the_lab_bytes():
    g = glued("08-expert-parallel.ipynb", "labs")
    # Two ranks, 64 tokens, k = 2, h = 32, fp32: 4 T k h (n-1)/n elements.
    assert g["l08_balanced_bytes"] == f"{4 * 64 * 2 * 32 / 2 * 4:,.0f}" == g["l08_sent_balanced"]
    assert g["l08_skew_rank0"] == f"{2 * 64 * 2 * 32 * 4:,}"
    assert g["l08_all_ok"] == "all pass"


def test_the_imbalance_is_capped_by_what_the_ep_degree_allows():
    """A token's k copies go to k different experts, so one GPU of an EP group of e ranks gets at
    most min(k, E/e) of them against k/e on average: Mixtral (E = 8, k = 2) can be skewed at
    most x1 at EP1 (every GPU runs its own tokens' copies), x2 at EP2 (min(2, 4) x 2 / 2) and
    x4 = E/k at EP8; an imbalance asked for beyond that is what the layout allows."""
    from solutions import moe_step, plan

    cfg = moe_step.MoEConfig(experts=8, top_k=2, expert_ffn=14336, imbalance=3.0)
    assert [moe_step.busiest(cfg, e) for e in (1, 2, 4, 8)] == pytest.approx([1.0, 2.0, 3.0, 3.0], rel=1e-12)
    assert moe_step.busiest(moe_step.MoEConfig(8, 2, 14336, imbalance=4.0), 8) == pytest.approx(4.0, rel=1e-12)

    def step(ep, imbalance):
        return plan.make_plan(arch="Mixtral 8x7B", tokens=1e12, gpu="H100", count=8, tp=1, pp=1, ep=ep,
                              imbalance=imbalance).step

    assert step(1, 3.0).step_s == pytest.approx(step(1, 1.0).step_s, rel=1e-12)
    assert step(1, 3.0).memory_bytes == pytest.approx(step(1, 1.0).memory_bytes, rel=1e-12)
    assert step(2, 3.0).step_s == pytest.approx(step(2, 2.0).step_s, rel=1e-12)
    assert step(2, 2.0).step_s > step(2, 1.0).step_s
    assert step(8, 3.0).step_s > step(8, 2.0).step_s  # EP8 allows x3
