"""The labs: their building blocks, and every lab run for real on CPU processes with gloo at
world sizes 2 and 4, with the predictions checked against independent arithmetic.

The lab runs use tiny models (a few steps, one layer) to fit the suite's time budget; the
notebooks run the defaults. Each run starts real processes, so these tests are marked slow.
"""
from __future__ import annotations

import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from labs import launch
from labs.data import CORPUS_PATH, batch_offsets, get_batch, load_corpus, rank_slice
from labs.fsdp import fsdp_padded_numel
from labs.model import GPT, GPTConfig, matmul_params, padded_vocab, param_count, param_shapes
from labs.report import all_ok, check_at_most, check_exact, check_within, format_checks
from labs.training import TrainConfig, lr_at

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "3", "--d-model", "32", "--n-layer", "1", "--n-head", "2",
        "--block-size", "32", "--batch-per-rank", "2"]


# --------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize("cfg", [GPTConfig(), GPTConfig(vocab_size=80, block_size=32, n_layer=1, n_head=2, d_model=32),
                                 GPTConfig(vocab_size=96, block_size=16, n_layer=3, n_head=3, d_model=48)])
def test_param_count_closed_form_matches_the_module(cfg):
    model = GPT(cfg)
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    assert {k: tuple(v.shape) for k, v in model.named_parameters()} == param_shapes(cfg)
    embeddings = model.embed.tok.weight.numel() + model.embed.pos.weight.numel()
    assert matmul_params(cfg) == param_count(cfg) - embeddings


def test_model_rejects_bad_config_and_trains_on_a_real_objective():
    with pytest.raises(ValueError, match="n_head"):
        GPTConfig(n_head=3, d_model=64)
    with pytest.raises(ValueError, match="d_model"):
        GPTConfig(d_model=0)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=80, block_size=16, n_layer=1, n_head=2, d_model=32)
    _, loss = GPT(cfg)(torch.randint(0, 80, (2, 16)), torch.randint(0, 80, (2, 16)))
    # An untrained model is close to uniform over the vocabulary: loss near ln(V).
    assert abs(loss.item() - math.log(80)) < 0.1


def test_padded_vocab():
    assert padded_vocab(76) == 80 and padded_vocab(80) == 80 and padded_vocab(1, 64) == 64
    with pytest.raises(ValueError):
        padded_vocab(0)


def test_corpus_is_the_shipped_file_and_batches_are_shared_by_ranks():
    assert CORPUS_PATH.stat().st_size < 2_000_000
    corpus = load_corpus()
    assert corpus.vocab_size == 76
    text = CORPUS_PATH.read_text(encoding="ascii")
    assert corpus.decode(corpus.train[:200]) == text[:200]
    assert len(corpus.train) + len(corpus.val) == len(text)
    offsets = batch_offsets(len(corpus.train), 32, 8, step=3, seed=1)
    assert torch.equal(offsets, batch_offsets(len(corpus.train), 32, 8, step=3, seed=1))
    assert not torch.equal(offsets, batch_offsets(len(corpus.train), 32, 8, step=4, seed=1))
    # The ranks' slices, put back together, are the global batch the reference trains on.
    assert torch.equal(torch.cat([rank_slice(offsets, r, 4) for r in range(4)]), offsets)
    x, y = get_batch(corpus.train, offsets, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError, match="divisible"):
        rank_slice(offsets, 0, 3)


def test_learning_rate_warms_up_then_decays_by_cosine():
    cfg = TrainConfig(steps=20, warmup=4, lr=1e-3, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(cfg.steps)]
    assert lrs[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
    assert lrs[-1] == pytest.approx(1e-4)
    # Half-way through the decay the cosine is at the mean of peak and floor.
    mid = TrainConfig(steps=21, warmup=0, lr=1.0, min_lr_ratio=0.0)
    assert lr_at(10, mid) == pytest.approx(0.5)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_fsdp_padding_matches_torch_chunk(n):
    shapes = [(80, 32), (32, 32), (96,), (7, 3), (1,)]
    # torch.chunk's first chunk has ceil(d0/n) rows: FSDP pads every shard to that size.
    brute = sum(n * torch.empty(s).chunk(n)[0].numel() for s in shapes)
    assert fsdp_padded_numel(shapes, n) == brute


def test_backend_choice():
    assert launch.choose_backend("auto", 2, 0)[0] == "gloo"
    backend, reason = launch.choose_backend("auto", 2, 1)  # Colab: one GPU, two ranks
    assert backend == "gloo" and "one GPU per rank" in reason
    assert launch.choose_backend("auto", 2, 2)[0] == "nccl"
    assert launch.choose_backend("auto", 2, 8)[0] == "nccl"
    assert launch.choose_backend("gloo", 2, 8)[0] == "gloo"
    with pytest.raises(ValueError, match="nccl needs one CUDA GPU per rank"):
        launch.choose_backend("nccl", 2, 1)
    with pytest.raises(ValueError, match="nccl needs CUDA GPUs and none is visible"):
        launch.choose_backend("nccl", 1, 0)
    with pytest.raises(ValueError, match="backend"):
        launch.choose_backend("mpi", 2, 0)
    with pytest.raises(ValueError, match="nproc"):
        launch.choose_backend("auto", 0, 0)


def test_report_checks():
    assert check_exact("a", 10, 10)["ok"] and not check_exact("a", 10, 11)["ok"]
    assert check_exact("zero", 0, 0)["ratio"] == 1.0 and check_exact("zero", 0, 1)["ratio"] is None
    assert check_within("m", 100, 101.9, 2)["ok"] and not check_within("m", 100, 102.1, 2)["ok"]
    bounded = check_at_most("d", 1e-4, 3.7e-7)
    assert bounded["ok"] and bounded["ratio"] == pytest.approx(3.7e-3)
    assert not check_at_most("d", 1e-4, 2e-4)["ok"]
    with pytest.raises(ValueError):
        check_exact("nan", 1, float("nan"))
    table = format_checks({"checks": [bounded, check_exact("bytes", 4096, 4096)]})
    # A passing tolerance check shows its bound, not the machine-dependent rounding error.
    assert "3.7e-07" not in table and "<= 0.0001" in table and "4,096 bytes" in table
    assert not all_ok({"checks": []})


def test_launcher_rejects_bad_arguments():
    from labs import ddp

    with pytest.raises(ValueError, match="--nproc is required"):
        launch.run("ddp", ddp.build_parser(), ddp.worker, ["--report", "x.json"])
    with pytest.raises(ValueError, match="--fail-rank"):
        launch.run("ddp", ddp.build_parser(), ddp.worker, ["--nproc", "2", "--fail-rank", "2"])
    import torch

    with pytest.raises(ValueError, match="nccl needs (one CUDA GPU per rank|CUDA GPUs and none is visible)"):
        launch.run("ddp", ddp.build_parser(), ddp.worker, ["--nproc", "64", "--backend", "nccl"])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="none is visible"):
            launch.run("ddp", ddp.build_parser(), ddp.worker, ["--nproc", "1", "--backend", "nccl"])


# --------------------------------------------------------------------------- lab runs


def _run(lab: str, n: int, tmp_path: Path, *extra: str) -> dict:
    module = __import__(f"labs.{lab}", fromlist=["build_parser", "worker"])
    report = tmp_path / f"{lab}-{n}.json"
    out = launch.run(lab, module.build_parser(), module.worker,
                     ["--nproc", str(n), "--backend", "gloo", "--report", str(report), *extra])
    assert out == json.loads(report.read_text())
    assert out["lab"] == lab and out["world_size"] == n and out["backend"] == "gloo"
    for check in out["checks"]:
        assert set(check) >= {"name", "predicted", "measured", "ratio", "ok"}
    return out


def _check(report: dict, prefix: str) -> dict:
    found = [c for c in report["checks"] if c["name"].startswith(prefix)]
    assert len(found) == 1, f"expected one check starting with {prefix!r}"
    return found[0]


def _failed(report):
    return [c["name"] for c in report["checks"] if not c["ok"]]


@pytest.mark.slow
def test_collectives_cli_contract(tmp_path):
    """``python -m labs.collectives --nproc 2 --report PATH`` from a shell, exit status 0."""
    report = tmp_path / "collectives.json"
    proc = subprocess.run(
        [sys.executable, "-m", "labs.collectives", "--nproc", "2", "--report", str(report),
         "--max-bytes", "16384", "--iters", "2", "--ring-elements", "1001", "--ring-dtype", "fp16"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "backend: gloo" in proc.stdout
    data = json.loads(report.read_text())
    assert all_ok(data), _failed(data)
    # 1001 elements are padded to 1002 for two ranks; each rank sends half of it twice, in
    # 2-byte fp16 elements (fp32 rings are counted by the DDP runs).
    assert _check(data, "ring all-reduce: bytes each rank sends")["measured"] == 2 * (2 - 1) / 2 * 1002 * 2
    assert data["config"]["ring_dtype"] == "fp16"
    ops = {row["op"] for row in data["sweep"]}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "ring_all_reduce"}


@pytest.mark.slow
def test_collectives_four_ranks_bf16_ring_and_more_ranks_than_cores(tmp_path, monkeypatch, capsys):
    # Pretend this machine has one core: four ranks must draw a warning (and still pass).
    monkeypatch.setattr(launch, "cpu_cores", lambda: 1)
    report = _run("collectives", 4, tmp_path, "--max-bytes", "16384", "--iters", "2", "--ring-elements", "1001",
                  "--ring-dtype", "bf16")
    assert "warning: --nproc 4 starts 4 CPU processes on 1 core:" in capsys.readouterr().err
    assert all_ok(report), _failed(report)
    # 1001 elements padded to 1004 on four ranks; 2(n-1)/n of that, in 2-byte bf16 elements.
    assert _check(report, "ring all-reduce: bytes each rank sends")["measured"] == 2 * 3 / 4 * 1004 * 2
    assert _check(report, "ring all-reduce: sequential steps")["measured"] == 6
    # bf16's rounding (eps 2^-7), not float32's, bounds the ring's difference from all_reduce.
    bound = _check(report, "ring all-reduce vs dist.all_reduce")["predicted"]
    assert 4 * 4 * 2**-7 <= bound <= 4 * 4 * 2**-7 * 10


def _timing_is_consistent(metrics: dict, step_seconds: list, cfg: dict, n: int) -> None:
    """tokens/s is the global batch's tokens over the median timed step (the first left out
    when there are three or more), recomputed here from the report's own step times."""
    train, model = cfg["train"], cfg["model"]
    assert len(step_seconds) == train["steps"] - cfg["checked_steps"] == metrics["timed_steps"]
    timed = step_seconds[1:] if len(step_seconds) >= 3 else step_seconds
    assert metrics["step_seconds"] == pytest.approx(statistics.median(timed), rel=1e-12)
    tokens = n * train["batch_per_rank"] * model["block_size"]
    assert metrics["tokens_per_s"] == pytest.approx(tokens / statistics.median(timed), rel=1e-12)


REFERENCE_DELAY = 1.0  # seconds rank 0 sleeps in each reference step: no timed step may see it


@pytest.mark.slow
@pytest.mark.parametrize("n", [4])  # two ranks: the lab's notebook (nbval compares its "all pass")
def test_ddp_equals_one_process(tmp_path, n):
    report = _run("ddp", n, tmp_path, *TINY, "--reference-delay", str(REFERENCE_DELAY))
    assert all_ok(report), _failed(report)
    cfg = GPTConfig(**report["config"]["model"])
    grad_bytes = 4 * sum(p.numel() for p in GPT(cfg).parameters())
    assert _check(report, "gradient bytes all-reduced")["measured"] == grad_bytes
    assert _check(report, "bytes each rank sends per step (ring)")["measured"] == 2 * (n - 1) / n * grad_bytes
    assert _check(report, "steps where replicas differ")["measured"] == 0
    # The bounds themselves (fp32): a looser bound would let a real difference through.
    grad, weights = _check(report, "DDP vs one process: gradient"), _check(report, "DDP vs one process: weights")
    assert (grad["predicted"], weights["predicted"]) == (1e-5, 1e-3)
    assert grad["ok"] and weights["ok"]
    assert len(report["history"]["loss"]) == 3
    metrics = report["metrics"]
    _timing_is_consistent(metrics, report["history"]["step_seconds"], report["config"], n)
    assert max(report["history"]["step_seconds"]) < REFERENCE_DELAY  # the reference is not timed
    assert metrics["scaling_efficiency"] == pytest.approx(
        metrics["tokens_per_s"] / metrics["single_process_tokens_per_s"] / n)
    assert "mfu" not in metrics and metrics["mfu_note"].startswith("CPU")
    assert {r["backend"] for r in report["ranks"]} == {"gloo"} and len(report["ranks"]) == n


def test_lab_tolerances_are_pinned():
    from labs.ddp import TOLERANCE

    assert TOLERANCE == {torch.float32: {"grad": 1e-5, "param": 1e-3},
                         torch.float16: {"grad": 1e-2, "param": 5e-2},
                         torch.bfloat16: {"grad": 5e-2, "param": 1e-1}}


@pytest.mark.slow
def test_ddp_checks_fail_without_all_reduce(tmp_path):
    """The checks can fail: with no all-reduce, replicas drift apart and DDP != one process,
    in the gradients and in the weights."""
    report = _run("ddp", 2, tmp_path, *TINY, "--allreduce", "none")
    failed = _failed(report)
    assert any(name.startswith("steps where replicas differ") for name in failed)
    assert any(name.startswith("DDP vs one process: gradient") for name in failed)
    assert any(name.startswith("DDP vs one process: weights") for name in failed)
    assert any(name.startswith("bytes each rank sends") for name in failed)
    assert any(name.startswith("gradient bytes all-reduced per step") for name in failed)  # none were
    # Each rank kept half the batch's gradient: far outside the bound, not a rounding error.
    assert _check(report, "DDP vs one process: weights")["measured"] > 100 * 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("n", [4])  # two ranks: the lab's notebook (nbval compares its "all pass")
def test_fsdp_memory_and_traffic(tmp_path, n):
    report = _run("fsdp", n, tmp_path, *TINY, "--reference-delay", str(REFERENCE_DELAY))
    assert all_ok(report), _failed(report)
    P = sum(p.numel() for p in GPT(GPTConfig(**report["config"]["model"])).parameters())
    for strategy, share in (("DP", 1), ("FSDP", n)):
        for part, nbytes in (("weights", 4), ("grads", 4), ("optimizer", 8)):
            check = _check(report, f"{strategy}: {part} bytes per rank")
            assert check["rule"] == "within 2%"
            assert abs(check["measured"] / (nbytes * P / share) - 1) <= 0.02
    # ZeRO-3: two all-gathers and one reduce-scatter of every parameter per step ...
    assert _check(report, "FSDP: all-gathered bytes")["measured"] == 2 * 4 * P
    assert _check(report, "FSDP: reduce-scattered bytes")["measured"] == 4 * P
    # ... so each rank sends 1.5x what DDP's ring all-reduce sends.
    dp_sent = _check(report, "DP: bytes each rank sends")["measured"]
    fsdp_sent = _check(report, "FSDP: bytes each rank sends")["measured"]
    assert dp_sent == 2 * (n - 1) / n * 4 * P
    assert fsdp_sent == pytest.approx(1.5 * dp_sent)
    grad, weights = _check(report, "FSDP vs one process: gradient"), _check(report, "FSDP vs one process: weights")
    assert (grad["predicted"], weights["predicted"]) == (1e-5, 1e-3)
    assert grad["ok"] and weights["ok"]
    assert report["phases"]["dp"]["loss"] == pytest.approx(report["phases"]["fsdp"]["loss"], rel=1e-4)
    for strategy in ("dp", "fsdp"):
        phase = report["phases"][strategy]
        assert max(phase["step_seconds_all"]) < REFERENCE_DELAY  # rank 0's reference is not timed
        tokens = n * report["config"]["train"]["batch_per_rank"] * report["config"]["model"]["block_size"]
        assert report["side_by_side"][strategy]["tokens_per_s"] == pytest.approx(tokens / phase["step_seconds"])
        assert phase["timed_steps"] == 2 and phase["checked_steps"] == 1


def _processes_mentioning(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(proc.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to look for leftover processes")
def test_a_killed_rank_ends_the_lab_quickly_and_leaves_nothing(tmp_path):
    from labs import ddp

    report = tmp_path / "killed.json"  # the unique marker in every rank's command line
    start = time.monotonic()
    with pytest.raises(launch.LabFailed) as failure:
        launch.run("ddp", ddp.build_parser(), ddp.worker,
                   ["--nproc", "2", "--backend", "gloo", "--report", str(report), *TINY,
                    "--fail-rank", "1", "--fail-at-step", "1"])
    elapsed = time.monotonic() - start
    message = str(failure.value)
    assert elapsed < 60
    assert "rank 1 killed by SIGKILL" in message
    assert "--- rank 0" in message and "--- rank 1" in message  # every rank's story
    assert not report.exists()
    assert _processes_mentioning(str(report)) == []


@pytest.mark.slow
def test_fsdp_fp16_with_a_gradient_scaler(tmp_path):
    """The T4's precision, run on CPU: both phases compute in fp16 under autocast with a
    gradient scaler, keep fp32 weights, gradients and AdamW state, and so move fp32 buffers."""
    report = _run("fsdp", 2, tmp_path, *TINY, "--dtype", "fp16")
    assert all_ok(report), _failed(report)
    assert report["config"]["dtype"] == "torch.float16"
    P = sum(p.numel() for p in GPT(GPTConfig(**report["config"]["model"])).parameters())
    assert _check(report, "FSDP: all-gathered bytes")["measured"] == 2 * 4 * P
    assert _check(report, "FSDP: reduce-scattered bytes")["measured"] == 4 * P
    assert _check(report, "FSDP: weights bytes per rank")["measured"] == 4 * P / 2  # fp32 shards
    grad, weights = _check(report, "FSDP vs one process: gradient"), _check(report, "FSDP vs one process: weights")
    assert (grad["predicted"], weights["predicted"]) == (1e-2, 5e-2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_torchrun_nodes_on_localhost_agree(tmp_path):
    """Multi-node, rehearsed on one machine: two torchrun "nodes" (c10d rendezvous, gloo) run
    the DDP lab as one job of two ranks, exactly as two machines would."""
    report = tmp_path / "two-nodes.json"
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("LABS_BACKEND", None)
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--rdzv-id", "labs-rehearsal", "-m", "labs.ddp", "--backend", "gloo", "--report", str(report),
         *TINY, "--dtype", "bf16"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for node in (0, 1)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    data = json.loads(report.read_text())
    assert all_ok(data), _failed(data)
    assert data["world_size"] == 2 and data["config"]["dtype"] == "torch.bfloat16"
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert {r["backend"] for r in data["ranks"]} == {"gloo"}
    assert [r["local_rank"] for r in data["ranks"]] == [0, 0]  # one rank per node: each is local rank 0
    assert _check(data, "steps where replicas differ")["measured"] == 0
