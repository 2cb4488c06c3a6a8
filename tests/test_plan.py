"""solutions.plan reproduces the chapter's worked examples, and refuses bad input in one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from solutions import facts, plan

ROOT = Path(__file__).resolve().parents[1]
H100 = facts.GPUS["H100 SXM"]


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "solutions.plan", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


def test_7b_on_8_gpus_is_fsdp_with_the_chapters_memory():
    # FSDP on one server: 84 GB of state (12 bytes/param) becomes 10.5 GB per GPU.
    p = plan.make_plan(model=7e9, tokens=1e12, gpu="H100", count=8, convention="chapter_12")
    assert (p.tp, p.pp, p.dp, p.zero) == (1, 1, 8, 3)
    assert sum(p.state.values()) == pytest.approx(10.5e9, rel=1e-12)
    p16 = plan.make_plan(model=7e9, tokens=1e12, gpu="H100", count=8)  # ZeRO's 16 bytes: 112 GB -> 14 GB
    assert sum(p16.state.values()) == pytest.approx(14e9, rel=1e-12)
    assert p16.fits


def test_chinchillas_budget():
    C = 6 * 70e9 * 1.4e12
    p = plan.make_plan(budget=C, gpu="H100", count=1024)
    # 20 tokens per parameter at Chinchilla's budget is Chinchilla itself (Hoffmann et al. Table 3).
    assert p.twenty == pytest.approx((70e9, 1.4e12), rel=1e-12)
    # Tokens per parameter of the closed-form optimum (FACTS: 59 TeX-precise, 18.3 Epoch at 5.88e23).
    assert p.optimal["hoffmann_precise"][2] == pytest.approx(59, abs=0.5)
    assert p.optimal["epoch_2024"][2] == pytest.approx(18.3, abs=0.1)
    # and 92.6 with the rounded constants at the paper's 5.76e23.
    assert plan.make_plan(budget=5.76e23, count=1024).optimal["hoffmann_rounded"][2] == pytest.approx(92.6, abs=0.1)
    assert p.flops == C and p.budget_given


@pytest.mark.parametrize("count", [8192, 16384])
def test_llama3_405b_layouts(count):
    reported = next(l for l in facts.LAYOUTS if l.model == "Llama 3 405B" and l.num_gpus == count and l.cp == 1)
    p = plan.make_plan(model=405e9, tokens=15.6e12, gpu="H100", count=count)
    assert (p.tp, p.pp, p.dp) == (reported.tp, reported.pp, reported.dp)
    assert p.regime == "frontier" and p.fits
    assert p.arch.name == "Llama 3 405B"


def test_days_to_train_70b():
    p = plan.make_plan(model=70e9, tokens=1.4e12, gpu="H100", count=1024, mfu=0.4)
    expected_days = 6 * 70e9 * 1.4e12 / (1024 * 989.4e12 * 0.4) / 86400
    assert p.days == pytest.approx(expected_days, rel=1e-12)
    assert p.days == pytest.approx(16.8, abs=0.05)
    assert (p.tp, p.dp, p.zero) == (8, 128, 3)


def test_hand_layout_that_does_not_fit_gets_advice():
    p = plan.make_plan(model=70e9, tokens=1.4e12, gpu="H100", count=8, zero=0, tp=1)
    assert sum(p.state.values()) == pytest.approx(70e9 * 16, rel=1e-12)
    assert not p.fits
    assert p.advice and "DOES NOT FIT" in plan.format_plan(p)


def test_no_inference_means_the_compute_optimal_model():
    C = 6 * 70e9 * 1.4e12
    p = plan.make_plan(budget=C, count=1024, inference_tokens=0)
    N_opt, D_opt = p.optimal["hoffmann_rounded"][:2]
    assert (p.overtrained["N"], p.overtrained["D"]) == pytest.approx((N_opt, D_opt), rel=1e-4)
    assert plan.make_plan(budget=C, count=1024).overtrained is None


def test_serving_10t_tokens_overtrains_chinchilla_s_budget():
    """The worked example of the section on inference-aware scaling: at Chinchilla's budget
    (rounded constants), a model that will serve 10T tokens should be ~17.6B parameters trained
    on ~363 tokens each, and costs 17% less over its lifetime than the compute-optimal one."""
    T = 1e13
    p = plan.make_plan(model=70e9, tokens=1.4e12, count=1024, inference_tokens=T)
    o = p.overtrained
    assert o["N"] == pytest.approx(17.6e9, rel=0.005)
    assert o["D"] / o["N"] == pytest.approx(363, rel=0.005)
    N_opt, D_opt = p.optimal["hoffmann_rounded"][:2]
    assert o["baseline"] == pytest.approx(6 * N_opt * D_opt + 2 * N_opt * T, rel=1e-12)  # Sardana et al. eq. 3
    assert o["lifetime"] == pytest.approx(6 * o["N"] * o["D"] + 2 * o["N"] * T, rel=1e-12)
    assert 1 - o["lifetime"] / o["baseline"] == pytest.approx(0.17, abs=0.005)
    assert "serving 10T tokens: N=17.6B" in plan.format_plan(p)


def test_cli_prints_a_complete_plan():
    out = run_cli("--model", "70e9", "--tokens", "1.4e12", "--gpu", "H100", "--count", "1024", "--mfu", "0.4")
    assert out.returncode == 0, out.stderr
    for n in range(1, 13):
        assert f"\n{n}. " in "\n" + out.stdout, f"line {n} missing"
    assert "TP8 x PP1 x DP128" in out.stdout and "fits" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--model", "7e9", "--tokens", "1e12", "--count", "12", "--tp", "8"], "tp * pp must divide count"),
    (["--model", "7e9", "--tokens", "1e12", "--gpu", "B200"], "gpu must be one of"),
    (["--budget", "1e23", "--model", "7e9", "--tokens", "1e12"], "not both"),
    (["--model", "7e9"], "give a budget, or both model and tokens"),
    (["--model", "7e9", "--tokens", "1e12", "--mfu", "1.5"], "mfu must be in (0, 1]"),
    (["--model", "7e9", "--tokens", "1e12", "--count", "abc"], "invalid int value"),
    (["--model", "7e9", "--tokens", "1e12", "--zero", "4"], "zero must be one of"),
    (["--model", "7e9", "--tokens", "1e12", "--inference-tokens", "-5"], "inference_tokens must be a non-negative"),
])
def test_cli_bad_input_is_one_line(args, message):
    out = run_cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], out.stderr


def test_find_gpu_aliases():
    assert plan.find_gpu("h100") is H100
    assert plan.find_gpu("a100 40gb").memory_gb == 40
    with pytest.raises(ValueError, match="gpu must be one of"):
        plan.find_gpu("H100 NVL")
