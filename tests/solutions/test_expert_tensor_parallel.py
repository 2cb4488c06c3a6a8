"""The experts' tensor parallelism (ETP) by hand. An ETP group gathers the token copies its
members received, each member runs every gathered copy on 1/ETP of each expert's width, and
the outputs are reduce-scattered back: the FLOPs per GPU do not depend on ETP, the copies each
GPU holds and the traffic of the group's collectives do. Before, the planner split the width
without gathering the copies, so ``--etp 16`` made the experts 16 times cheaper (a Mixtral
8x7B plan on 64 H100s read 97.5% MFU)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from solutions import facts, hardware, layer_time, network, precision
from solutions import steptime as S

MIXTRAL = S.shape_of(facts.MOE_ARCHITECTURES["Mixtral 8x7B"], seq_len=4096)
H100 = hardware.find_gpu("H100")
BASE = S.Layout(tp=1, pp=1, dp=8, zero=1, micro_batch=1, recompute="none", ep=8, etp=1)
ROW = {c: i for i, c in enumerate(layer_time.COMPONENTS)}


def _terms(lay):
    return layer_time.layer_terms(MIXTRAL, lay, H100, precision.recipe("bf16"), moe_layer=True).a


@pytest.mark.parametrize("ep, etp", [(4, 2), (2, 4), (1, 8)])
def test_the_experts_flops_per_gpu_do_not_depend_on_etp(ep, etp):
    """Eight GPUs, EP x ETP = 8. The expert products' FLOPs, by hand: each GPU runs the copies
    of its own tokens' worth, ``T k``, through a whole expert (gate, up and down: 3 h f),
    forward once and backward twice, at the BF16 ceiling."""
    m = MIXTRAL.moe
    T = BASE.micro_batch * MIXTRAL.seq_len
    expert_flops = 2.0 * T * m.top_k * 3 * MIXTRAL.hidden * m.expert_ffn
    expected = expert_flops / H100.ceiling("bf16")
    one, split = _terms(BASE), _terms(replace(BASE, ep=ep, etp=etp))
    # the router and attention are the same; what changes between EP8 and EP x ETP is the experts
    assert one[ROW["gemm"]] == pytest.approx(split[ROW["gemm"]], rel=1e-12)
    # and the experts' share of it is the hand calculation (the rest: attention projections, router)
    rest = split[ROW["gemm"]][0] - expected
    attn = 2.0 * T * MIXTRAL.hidden * ((MIXTRAL.heads + 2 * MIXTRAL.kv) * MIXTRAL.head_size + MIXTRAL.heads
                                       * MIXTRAL.head_size) / H100.ceiling("bf16")
    router = 2.0 * T * MIXTRAL.hidden * m.experts / H100.ceiling("bf16")
    assert rest == pytest.approx(attn + router, rel=1e-9)


def test_etp_holds_its_group_s_copies_in_memory_by_hand():
    """The h-wide copies a GPU keeps for the backward pass grow ETP times; the experts'
    activations (ETP times the copies at 1/ETP the width) do not."""
    a = S.activation_bytes(MIXTRAL, BASE, 1)
    b = S.activation_bytes(MIXTRAL, replace(BASE, ep=4, etp=2), 1)
    m = MIXTRAL.moe
    per_layer = 2.0 * m.top_k * MIXTRAL.hidden * m.imbalance * BASE.micro_batch * MIXTRAL.seq_len  # 16-bit copies
    assert b - a == pytest.approx(per_layer * MIXTRAL.layers, rel=1e-9)


def test_etp_collectives_in_the_step_by_hand():
    """EP1 x ETP8 in one HGX server: per MoE layer and micro-batch, an all-gather of the
    group's copies and a reduce-scatter of their outputs forward, and the mirror backward;
    each moves ``(ETP - 1) / ETP`` of the gathered tensor per GPU, on NVLink."""
    cluster = S.cluster_of("H100", None, None)
    lay = replace(BASE, ep=1, etp=8)
    st = S.step_time(MIXTRAL, lay, cluster, 64)
    m = MIXTRAL.moe
    tokens = lay.micro_batch * MIXTRAL.seq_len
    gathered = tokens * m.top_k * m.imbalance * 8 * MIXTRAL.hidden * 2  # bytes, BF16
    layers_times_microbatches = MIXTRAL.moe_layers * st.microbatches
    assert st.bytes["ep"] == pytest.approx(4 * gathered * 7 / 8 * layers_times_microbatches, rel=1e-12)
    link = network.link_for(8, 1, cluster.domain, cluster.nvlink, cluster.network, cluster.nic_share)
    one = network.ring_time("all_gather", gathered, 8, link, S.CALIBRATION.network) \
        + network.ring_time("reduce_scatter", gathered, 8, link, S.CALIBRATION.network)
    assert st.links["ep"] == "nvlink"
    # the default overlap leaves expert-parallel traffic exposed
    assert st.breakdown_s["ep"] == pytest.approx(2 * one * layers_times_microbatches, rel=1e-9)
    # EP8 x ETP1 moves no ETP traffic: its EP bytes are the all-to-all's alone
    assert S.step_time(MIXTRAL, BASE, cluster, 64).bytes["ep"] < st.bytes["ep"]


def test_the_plan_names_etp_without_ep():
    out = subprocess.run([sys.executable, "-m", "solutions.plan", "--arch", "Mixtral 8x7B", "--gpu", "H100",
                          "--count", "8", "--tokens", "1e12", "--ep", "1", "--etp", "8", "--tp", "1", "--pp", "1",
                          "--seq-len", "4096", "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert (data["layout"]["ep"], data["layout"]["etp"]) == (1, 8)
    assert data["breakdown_s"]["ep"] > 0
    # an MFU a real H100 can reach: below its measured BF16 matmul ceiling
    assert 0 < data["predicted_mfu"] < H100.ceiling("bf16") / H100.bf16_peak


@pytest.mark.parametrize("name", ["DeepSeek-V3", "Qwen3-30B-A3B", "gpt-oss-120b", "Mixtral 8x22B"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_products_flops_per_token_depend_on_tp_only(name, tp):
    """Summed over the TP x CP ranks that share a micro-batch, a MoE layer's products do the same
    FLOPs per token whatever CP, EP, ETP, the micro-batch and sequence parallelism are. (TP may
    add some: MLA's down-projections and K/V heads fewer than TP are repeated on every rank.)"""
    shape = S.shape_of(facts.MOE_ARCHITECTURES[name], seq_len=4096)
    ceiling = H100.ceiling("bf16")
    seen = []
    for cp, ep, etp, b, sp in [(1, 1, 1, 1, True), (2, 8, 1, 2, True), (1, 2, 4, 1, False), (2, 1, 2, 2, False),
                               (1, 8, 2, 1, True)]:
        lay = S.Layout(tp=tp, cp=cp, dp=64, ep=ep, etp=etp, micro_batch=b, recompute="none", sequence_parallel=sp)
        terms = layer_time.layer_terms(shape, lay, H100, precision.recipe("bf16"), moe_layer=True).a
        seen.append(terms[ROW["gemm"]].sum() * ceiling * tp * cp / (b * shape.seq_len))
    assert seen == pytest.approx([seen[0]] * len(seen), rel=1e-12)
