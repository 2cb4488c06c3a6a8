"""Labs 4 and 5 (tensor and pipeline parallelism) and the DP x TP grid: their building blocks,
the counts in ``solutions.model_parallel``, and every lab run on CPU processes with gloo at
world sizes 2 and 4, checked against arithmetic written out here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from labs import launch
from labs.grid3d import without_biases
from labs.model import Block, GPTConfig
from labs.pipeline_parallel import p2p_plan, stage_bounds, stage_order
from labs.report import all_ok
from labs.tensor_parallel import shard_slicers
from solutions.communication import communication_breakdown, tensor_parallel_bytes_per_layer
from solutions.model_parallel import (norm_activation_elements_per_layer, pipeline_bytes_sent_per_stage,
                                      sequence_parallel_bytes_per_layer, tensor_parallel_collectives_per_layer)

# --------------------------------------------------------------------------- solutions.model_parallel


def test_collectives_per_layer():
    assert tensor_parallel_collectives_per_layer() == {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 2}}
    sp = tensor_parallel_collectives_per_layer(True)
    assert sp["forward"] == sp["backward"] == {"all_gather": 2, "reduce_scatter": 2}
    with pytest.raises(ValueError, match="sequence_parallel"):
        tensor_parallel_collectives_per_layer("yes")


@pytest.mark.parametrize("b, s, h, t", [(1, 2, 3, 2), (4, 64, 64, 4), (2, 8, 16, 3), (1, 1, 1, 1)])
def test_sequence_parallel_moves_what_tensor_parallel_moves(b, s, h, t):
    # Four all-gathers and four reduce-scatters of b s h elements, (t-1)/t each, by hand.
    by_hand = 8 * b * s * h * 2 * (t - 1) / t
    assert sequence_parallel_bytes_per_layer(b, s, h, t) == pytest.approx(by_hand)
    assert sequence_parallel_bytes_per_layer(b, s, h, t) == pytest.approx(tensor_parallel_bytes_per_layer(b, s, h, t))


def test_norm_activations():
    # Two norms, each its input (b s h) and two statistics per token (b s).
    assert norm_activation_elements_per_layer(2, 8, 16) == 2 * (2 * 8 * 16 + 2 * 2 * 8)
    assert norm_activation_elements_per_layer(2, 8, 16, tp=4) == norm_activation_elements_per_layer(2, 8, 16)
    assert norm_activation_elements_per_layer(2, 8, 16, tp=4, sequence_parallel=True) == 2 * (256 + 32) / 4
    with pytest.raises(ValueError, match="tp"):
        norm_activation_elements_per_layer(2, 8, 16, tp=0)


def test_pipeline_bytes_per_stage():
    bsh = 2 * 8 * 16
    sends = [pipeline_bytes_sent_per_stage(k, 4, 2, 8, 16, 3, 2) for k in range(4)]
    assert sends == [3 * bsh * 2, 2 * 3 * bsh * 2, 2 * 3 * bsh * 2, 3 * bsh * 2]
    assert pipeline_bytes_sent_per_stage(0, 1, 2, 8, 16, 3) == 0
    for p in (2, 3, 4):
        busiest = communication_breakdown(1e6, dp=1, tp=1, pp=p, num_layers=12, seq_len=8, micro_batch=2,
                                          num_microbatches=3, d_model=16)["pp"]["bytes"]
        assert max(pipeline_bytes_sent_per_stage(k, p, 2, 8, 16, 3) for k in range(p)) == busiest
    with pytest.raises(ValueError, match="stage"):
        pipeline_bytes_sent_per_stage(4, 4, 2, 8, 16, 3)


# --------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize("t", [1, 2, 4])
def test_shards_put_back_together_are_the_block(t):
    cfg = GPTConfig(n_head=4, d_model=16)
    torch.manual_seed(0)
    block = Block(cfg)
    d = cfg.d_model
    params = dict(block.named_parameters())
    shards = [{n: f(params[n].detach()) for n, f in shard_slicers(d, t, r).items()} for r in range(t)]
    w = params["attn.qkv.weight"]
    for i in range(3):  # each rank's fused q|k|v rows, split again, stack to the full q, k, v
        part = torch.cat([sh["attn.qkv.weight"].view(3, d // t, d)[i] for sh in shards])
        assert torch.equal(part, w[i * d:(i + 1) * d])
    assert torch.equal(torch.cat([sh["attn.proj.weight"] for sh in shards], dim=1), params["attn.proj.weight"])
    assert torch.equal(torch.cat([sh["mlp.fc.weight"] for sh in shards]), params["mlp.fc.weight"])
    assert torch.equal(torch.cat([sh["mlp.proj.weight"] for sh in shards], dim=1), params["mlp.proj.weight"])
    # A rank holds 1/t of every matrix and all of the replicated vectors.
    held = sum(v.numel() for v in shards[0].values())
    assert held == 12 * d * d // t + 4 * d + 3 * d // t + 4 * d // t + 2 * d


def test_without_biases_leaves_only_matrices():
    cfg = GPTConfig(n_head=4, d_model=16)
    block = without_biases(Block(cfg))
    assert all(p.dim() == 2 for p in block.parameters())
    assert sum(p.numel() for p in block.parameters()) == 12 * 16 * 16
    assert block(torch.randn(2, 5, 16)).shape == (2, 5, 16)


def test_stage_bounds():
    assert [stage_bounds(8, 4, s) for s in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    with pytest.raises(ValueError, match="divisible"):
        stage_bounds(6, 4, 0)


def test_stage_orders():
    assert stage_order(2, 3, "gpipe", 0) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]
    # 1F1B on the first of three stages: two warm-up forwards, then alternate, then drain.
    assert stage_order(3, 4, "1f1b", 0) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                            ("B", 2), ("B", 3)]
    assert stage_order(3, 4, "1f1b", 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                                            ("F", 3), ("B", 3)]


def _rendezvous(plans):
    """Play the stages' plans where a send completes only once its receive is posted, and
    the other way round (the strictest semantics a transport may have), and a rank goes on
    only when its whole batch of messages has completed. Returns where each rank stopped and
    the sends in the order they completed."""
    p = len(plans)
    pos = [0] * p
    pending = [set(plans[s][0][0]) if plans[s] else set() for s in range(p)]
    matched = []
    progressed = True
    while progressed:
        progressed = False
        for s in range(p):
            for msg in sorted(pending[s]):
                direction, peer, what, i = msg
                partner = ("recv" if direction == "send" else "send", s, what, i)
                if pos[peer] < len(plans[peer]) and partner in pending[peer]:
                    pending[s].discard(msg)
                    pending[peer].discard(partner)
                    matched.append((s, msg) if direction == "send" else (peer, partner))
                    progressed = True
        for s in range(p):
            while pos[s] < len(plans[s]) and not pending[s]:
                pos[s] += 1  # batch done: compute its pass, post the next batch
                pending[s] = set(plans[s][pos[s]][0]) if pos[s] < len(plans[s]) else set()
                progressed = True
    return pos, matched


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_send_recv_plans_never_deadlock(kind, p):
    for m in (1, 2, 3, 5, 8):
        plans = [p2p_plan(p, m, kind, s) for s in range(p)]
        pos, matched = _rendezvous(plans)
        assert pos == [len(plan) for plan in plans], f"deadlock: p={p} m={m} at {pos}"
        # Every boundary carries each micro-batch's activation down and its gradient up, once.
        expected = {(s, ("send", s + 1, "act", i)) for s in range(p - 1) for i in range(m)}
        expected |= {(s, ("send", s - 1, "grad", i)) for s in range(1, p) for i in range(m)}
        assert len(matched) == len(expected) and set(matched) == expected
        # Every pass of the schedule is run once.
        for s, plan in enumerate(plans):
            assert [op for _, op in plan if op is not None] == stage_order(p, m, kind, s)


# --------------------------------------------------------------------------- lab runs


def _run(lab: str, n: int, tmp_path: Path, *extra: str) -> dict:
    module = __import__(f"labs.{lab}", fromlist=["build_parser", "worker"])
    report = tmp_path / f"{lab}-{n}.json"
    out = launch.run(lab, module.build_parser(), module.worker,
                     ["--nproc", str(n), "--backend", "gloo", "--report", str(report), *extra])
    assert out == json.loads(report.read_text())
    assert out["lab"] == lab and out["world_size"] == n
    for check in out["checks"]:
        assert set(check) >= {"name", "predicted", "measured", "ratio", "ok"}
    return out


def _check(report: dict, prefix: str) -> dict:
    found = [c for c in report["checks"] if c["name"].startswith(prefix)]
    assert len(found) == 1, f"expected one check starting with {prefix!r}, got {[c['name'] for c in found]}"
    return found[0]


def _failed(report):
    return [c["name"] for c in report["checks"] if not c["ok"]]


TP_ARGS = ["--n-layer", "2", "--d-model", "32", "--n-head", "4", "--block-size", "16", "--batch", "2"]


@pytest.mark.slow
@pytest.mark.parametrize("t", [4])  # two ranks: Lab 4's notebook (nbval compares its "all pass")
def test_tensor_parallel_lab(tmp_path, t):
    report = _run("tensor_parallel", t, tmp_path, *TP_ARGS)
    assert all_ok(report), _failed(report)
    b, s, h = 2, 16, 32
    # Four all-reduces of b s h fp32 elements per layer, 2(t-1)/t of each sent by every rank.
    per_layer = 4 * b * s * h * 4 * 2 * (t - 1) / t
    assert _check(report, "TP: bytes each rank sends per layer")["measured"] == per_layer
    assert _check(report, "TP + sequence parallel: bytes each rank sends per layer")["measured"] == per_layer
    assert _check(report, "TP: all-reduces per layer, forward")["measured"] == 2
    assert _check(report, "TP: all-reduces per layer, backward")["measured"] == 2
    # Sequence parallelism keeps 1/t of the two norms' inputs and statistics, fp32.
    saving = 2 * (b * s * h + 2 * b * s) * (1 - 1 / t) * 4
    assert _check(report, "sequence parallel: activation bytes saved per layer")["measured"] == saving
    assert _check(report, "torch TP: all-reduces per layer, backward")["measured"] == 2


@pytest.mark.slow
def test_tensor_parallel_checks_fail_without_communication(tmp_path):
    report = _run("tensor_parallel", 2, tmp_path, *TP_ARGS, "--comm", "none", "--no-torch-tp")
    failed = _failed(report)
    for prefix in ("TP vs one process: output", "TP vs one process: gradients",
                   "TP + sequence parallel vs one process: output", "TP: bytes each rank sends",
                   "TP: all-reduces per layer"):  # none issued: the counts say what ran
        assert any(name.startswith(prefix) for name in failed), prefix


PP_ARGS = ["--n-layer", "4", "--d-model", "64", "--micro-batch", "2", "--block-size", "32",
           "--microbatches", "1,4", "--repeats", "3"]


@pytest.mark.slow
@pytest.mark.parametrize("p", [4])  # two stages: Lab 5's notebook (nbval compares its "all pass")
def test_pipeline_parallel_lab(tmp_path, p):
    report = _run("pipeline_parallel", p, tmp_path, *PP_ARGS)
    assert all_ok(report), _failed(report)
    # The bubble was checked at two micro-batch counts, for both schedules, against (p-1)/(m+p-1).
    bubbles = [c for c in report["checks"] if "bubble" in c["name"]]
    assert len(bubbles) == 4
    for m in (1, 4):
        row = report["bubbles"][f"gpipe/{m}"]
        assert row["predicted"] == pytest.approx((p - 1) / (m + p - 1))
        assert abs(row["measured"] - row["predicted"]) <= report["config"]["bubble_tolerance"]
    # GPipe stashes all four micro-batches on stage 0; 1F1B at most p of them.
    assert _check(report, "GPIPE: most micro-batches stashed")["measured"] == 4
    assert _check(report, "1F1B: most micro-batches stashed")["measured"] == min(p, 4)
    gpipe = _check(report, "GPIPE: peak stashed activation bytes")["measured"]
    one_f = _check(report, "1F1B: peak stashed activation bytes")["measured"]
    assert one_f * 4 == gpipe * min(p, 4)
    # An activation of b s h fp32 per micro-batch and boundary; interior stages send both ways.
    per_mb = 2 * 32 * 64 * 4
    assert _check(report, "bytes the busiest stage sends")["measured"] == (1 if p == 2 else 2) * 4 * per_mb
    assert _check(report, "torch.distributed.pipelining Schedule1F1B")["ok"]


@pytest.mark.slow
def test_grid_dp_by_tp(tmp_path):
    report = _run("grid3d", 4, tmp_path, "--tp", "2", "--n-layer", "2", "--d-model", "32", "--block-size", "16",
                  "--batch", "2")
    assert all_ok(report), _failed(report)
    assert report["groups"] == {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
    b, s, h, L, t, d = 2, 16, 32, 2, 2, 2
    assert _check(report, "TP group: bytes")["measured"] == L * 4 * b * s * h * 4 * 2 * (t - 1) / t
    # Each rank all-reduces the gradient of its half of 12 h^2 L weights, 2(d-1)/d of it.
    assert _check(report, "DP group: bytes")["measured"] == 12 * h * h * L / t * 4 * 2 * (d - 1) / d


def test_the_rendezvous_model_catches_a_deadlock():
    """Posting each send on its own, before the next receive, deadlocks 1F1B under
    rendezvous semantics: two neighbours each wait for the other to receive."""
    def separate(plan):
        out = []
        for messages, op in plan:
            out += [([msg], None) for msg in messages if msg[0] == "send"]
            out.append(([msg for msg in messages if msg[0] == "recv"], op))
        return out

    plans = [separate(p2p_plan(2, 4, "1f1b", s)) for s in range(2)]
    pos, _ = _rendezvous(plans)
    assert pos != [len(plan) for plan in plans]


def test_stages_chained_are_the_model():
    from labs.model import GPT
    from labs.pipeline_parallel import Stage, stage_params

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=4, n_head=2, d_model=16)
    model = GPT(cfg)
    idx = torch.randint(0, 32, (2, 8))
    for p in (1, 2, 4):
        x = idx
        for s in range(p):
            x = Stage(model, s, p)(x)
        assert torch.equal(x, model(idx)[0])
        # Every parameter belongs to exactly one stage.
        names = [n for s in range(p) for n, _ in stage_params(model, s, p)]
        assert sorted(names) == sorted(n for n, _ in model.named_parameters())


def test_saved_tensor_bytes_counts_storages_once_and_no_weights():
    from labs.tensor_parallel import SavedTensorBytes

    w = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(4, 8, requires_grad=True)
    with SavedTensorBytes([w]) as saved:
        y = x @ w           # saves x and w; w is a weight, not an activation
        z = (y[:, :4] * y[:, 4:]).sum()  # saves two views of y's storage
    z.backward()
    assert saved.bytes == x.numel() * 4 + y.numel() * 4
