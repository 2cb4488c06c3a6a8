"""A fact-check of the introduction and sections 1-7 against their sources.

Each test pins one correction: the sentence as it was would fail it. The source each one was
checked against is named in the test; the prose cites it, and every key the chapters cite must
be in the bibliography (the book build also fails on a missing key, but only on a full build).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from solutions import facts, steptime

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
CITE = re.compile(r"\{cite(?::[tp])?\}`([^`]+)`")


def _md(name: str) -> str:
    return (ROOT / "chapters" / f"{name}.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    """The text with every run of whitespace made one space (a sentence may be reflowed)."""
    return " ".join(text.split())


def _glued(notebook: str) -> dict:
    nb = json.loads((ROOT / "chapters" / notebook).read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []) if cell["cell_type"] == "code" else ():
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                out[name] = o["data"]["application/papermill.record/text/plain"].strip("'")
    return out


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_every_cited_key_is_in_the_bibliography(chapter):
    keys = set(re.findall(r"@\w+\{([^,\s]+),", (ROOT / "book" / "references.bib").read_text(encoding="utf-8")))
    cited = {k.strip() for m in CITE.finditer(chapter.read_text(encoding="utf-8")) for k in m.group(1).split(",")}
    assert not cited - keys, f"{chapter.name} cites keys the bibliography lacks: {sorted(cited - keys)}"


def test_the_introduction_maps_every_section():
    # The map named three sections beyond the core and left out 13-mixture-of-experts.
    toc = (ROOT / "book" / "_toc.yml").read_text(encoding="utf-8")
    sections = re.findall(r"file: chapters/(\d\d-[\w-]+)", toc)
    intro = _md("00-introduction")
    missing = [s for s in sections if s != "00-introduction" and f"{{doc}}`{s}`" not in intro]
    assert not missing, f"the introduction's map of the course leaves out {missing}"
    assert "Three further sections" not in intro


def test_llama3_mfu_is_the_papers_where_the_prose_says_reported():
    # Dubey et al. 2024, Table 4: 16,384 GPUs, TP8 x PP16 x DP128, 400 TFLOP/s per GPU, 41% MFU.
    # 400 TFLOP/s over the 989.4 dense peak is 40.4%: the glued figure is the throughput's share
    # of the peak, so the sentence must not call it the paper's reported MFU.
    run = next(r for r in facts.PUBLISHED_RUNS if r.name == "Llama 3 405B, 16,384 GPUs")
    assert run.mfu == 0.41 and f"{steptime.published_mfu(run):.0%}" == "40%"
    assert _glued("01-single-gpu.ipynb")["s01_run_mfu"] == "40%"
    text = _flat(_md("01-single-gpu"))
    assert "which reported {glue:text}`s01_run_mfu` MFU" not in text
    assert "reported throughput per GPU is {glue:text}`s01_run_mfu` of the dense peak" in text


def test_balance_share_names_what_the_step_model_puts_in_it():
    # roofline.mfu_shares: balance = HFU x step / (eta x compute), and steptime adds the SMs
    # that overlapped NCCL kernels take (contention x hidden seconds) to the compute time.
    run = next(r for r in facts.PUBLISHED_RUNS if r.name == "Llama 3 405B, 16,384 GPUs")
    st, _ = steptime.predict_run(run)
    contention = steptime.CALIBRATION.contention * sum(st.hidden_s.values())
    assert contention / st.breakdown_s["compute"] > 0.1  # a fifth of the compute time here
    text = _flat(_md("01-single-gpu"))
    assert "the busiest pipeline stage also carries the output layer, and the others wait for it;" not in text
    assert "communication that overlaps the computation takes some of the GPU's multiprocessors" in text


def test_korthikanti_attention_term_is_softmax_dropout_mask_and_output():
    # Korthikanti et al. 2022, sec. 4.1: 2as^2b (softmax output) + as^2b (dropout mask) +
    # 2as^2b (dropout output) = 5as^2b; the pre-softmax scores are not kept.
    text = _flat(_md("01-single-gpu"))
    assert "the second term is the attention score and softmax matrices" not in text
    assert "softmax output, its dropout mask and the output of that dropout" in text
    assert "model FLOPs utilisation, MFU {cite}`chowdhery2022palm`" in text


def test_h200_holds_the_70b_weights_alone_but_nothing_more():
    # 70B x 2 bytes = 140 GB against the H200's 141 GB (NVIDIA datasheet): the weights fit.
    g = _glued("04-why-distribute.ipynb")
    assert (g["s04_weights_gb"], g["s04_h200_gb"]) == ("140 GB", "141 GB")
    text = _flat(_md("04-why-distribute"))
    assert "in bf16, do not fit." not in text and "would fill it, with nothing left" in text
    # FSDP implements ZeRO-2 as well (SHARD_GRAD_OP) and hybrid sharding: full sharding is its default.
    assert "FSDP, PyTorch's implementation of ZeRO's fullest stage," not in text


def test_zero2_reduces_every_micro_batch_in_prose_as_in_the_step_model():
    # DeepSpeed issue 2252 (maintainer): stages 2 and 3 reduce the gradients after every
    # backward pass, because each rank keeps only its partition. The step-time model (S8)
    # already counts it (k = m for zero == 2); the prose said the DP rule held "unchanged".
    assert "stage 2 every micro-batch" in (ROOT / "solutions" / "steptime.py").read_text(encoding="utf-8")
    s05, s07 = _flat(_md("05-data-parallelism")), _flat(_md("07-fsdp"))
    assert "and ZeRO-2 move the same bytes ({doc}`07-fsdp`), so the same rule holds for them" not in s05
    assert "ZeRO-1 and ZeRO-2 send what plain data parallelism sends, so" not in s07
    for text in (s05, s07):
        assert "deepspeed2022zero2accumulation" in text


def test_ring_latency_paragraph_says_nccl_also_runs_trees():
    # NCCL src/graph/tuning.cc: tree latency 2 x ((ranks per node - 1) x intra + log2(nodes) x inter)
    # against the ring's 2(n-1) steps; the tuner runs the algorithm its model predicts fastest.
    text = _flat(_md("05-data-parallelism"))
    assert "NCCL does not always run the ring" in text and "nvidia2024nccltuning" in text


def test_model_parallelism_corrections():
    text = _flat(_md("06-model-parallelism"))
    # Megatron-Core's attention divides num_query_groups by the TP size too (GQA).
    assert "the number of key-value heads as well" in text
    # Zero-bubble schedules (Qi et al. 2024) also shrink the bubble, to nothing (section 12).
    assert "Only interleaving, at $v$ times the pipeline communication, reduces the bubble" not in text
    assert "{cite:t}`qi2023zerobubble`" in text
    # The section's own count: TP alone divides most activations by t (521 GB -> 89 GB).
    assert "and (with sequence parallelism) activations |" not in text
    # Recomputing norms and activation functions costs elementwise FLOPs, no matrix products.
    assert "add no FLOPs at all" not in text


def test_muonclip_rescales_query_and_key_weights():
    # Kimi K2 report (arXiv 2507.20534), MuonClip section: QK-Clip rescales W_q and W_k per head after
    # the update when the head's max logit exceeds tau; the logits themselves are not clipped.
    text = _flat(_md("07-fsdp"))
    assert "Muon with a clip on the attention logits" not in text
    assert "rescales a head's query and key weights" in text
