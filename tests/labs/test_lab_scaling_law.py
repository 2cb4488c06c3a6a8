"""Lab 6 (a scaling law from your own runs): a reduced grid trains and fits end to end on CPU
ranks, and the committed cache of the full grid is consistent with the code that made it."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labs import scaling_law
from labs.data import load_corpus
from labs.model import GPTConfig, padded_vocab
from solutions import fit

ROOT = Path(__file__).resolve().parents[2]
CHECK_KEYS = {"name", "predicted", "measured", "ratio", "ok"}


def run_lab(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "labs.scaling_law", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=timeout)


def test_reduced_grid_end_to_end(tmp_path):
    cache, report = tmp_path / "grid.json", tmp_path / "report.json"
    out = run_lab("--nproc", 2, "--rerun", "--grid", "tiny", "--cache", cache, "--fit-top-k", 10,
                  "--bootstrap", 4, "--report", report)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rep = json.loads(report.read_text())
    assert rep["lab"] == "scaling_law" and rep["world_size"] == 2
    assert rep["checks"] and all(CHECK_KEYS <= set(c) for c in rep["checks"])
    assert all(c["ok"] for c in rep["checks"]), [c for c in rep["checks"] if not c["ok"]]
    grid = json.loads(cache.read_text())
    planned = scaling_law.plan_runs("tiny", load_corpus().vocab_size)
    assert len(grid["runs"]) == len(planned) == sum(len(s) for s in scaling_law.GRIDS["tiny"].values())
    uniform = math.log(load_corpus().vocab_size)  # the loss of a model that learned nothing
    for run, plan in zip(grid["runs"], planned):
        assert (run["budget"], run["shape"]) == (plan["budget"], plan["shape"])
        assert 0 < run["val_loss"] < uniform
        assert run["D"] == run["steps"] * scaling_law.BATCH * scaling_law.BLOCK_SIZE
    f3 = grid["fits"]["approach3"]
    assert f3["starts"] == 10 and f3["bootstrap"]["resamples"] == 4
    # Reading the cache back (no --rerun) reports the same fit without training.
    again = run_lab("--nproc", 1, "--cache", cache, "--report", tmp_path / "again.json", timeout=120)
    assert again.returncode in (0, 3), again.stderr
    assert json.loads((tmp_path / "again.json").read_text())["fits"] == grid["fits"]


@pytest.fixture(scope="module")
def cached():
    return scaling_law.load_cache()


def test_cached_grid_matches_the_plan(cached):
    assert cached["grid"] == "full"
    vocab = load_corpus().vocab_size
    planned = scaling_law.plan_runs("full", vocab)
    assert [(r["budget"], r["shape"]) for r in cached["runs"]] == [(p["budget"], p["shape"]) for p in planned]
    for run in cached["runs"]:
        n_layer, d, n_head = scaling_law.SHAPES[run["shape"]]
        cfg = GPTConfig(vocab_size=padded_vocab(vocab), block_size=scaling_law.BLOCK_SIZE, n_layer=n_layer,
                        n_head=n_head, d_model=d)
        V = cfg.vocab_size
        # matmul parameters: head V d + blocks L (12 d^2 + 13 d) + final norm 2 d (no embeddings).
        assert run["N"] == V * d + n_layer * (12 * d * d + 13 * d) + 2 * d
        assert abs(run["D"] / (run["budget"] / (6 * run["N"])) - 1) < scaling_law.TOKENS_TOLERANCE


def test_cached_fit_is_the_fit_of_the_cached_runs(cached):
    runs, f3 = cached["runs"], cached["fits"]["approach3"]
    assert f3["starts"] == len(fit.PAPER_INIT_GRID) and f3["converged"]
    N, D, L = (np.array([r[k] for r in runs], dtype=float) for k in ("N", "D", "val_loss"))
    quick = fit.fit_approach3(N, D, L, top_k=20)
    assert quick.alpha == pytest.approx(f3["alpha"], abs=1e-3)
    assert quick.beta == pytest.approx(f3["beta"], abs=1e-3)
    for key in ("alpha", "beta", "a"):
        lo, hi = f3["intervals"][key]
        assert lo <= f3[key] <= hi


@pytest.mark.parametrize("args, message", [
    (["--cache", "missing.json"], "no cached grid"),
    (["--bootstrap", "1", "--fit-top-k", "-1"], "--fit-top-k must be >= 0"),
    (["--rerun", "--grid", "tiny"], "would replace the course's full grid"),
    (["--rerun", "--grid", "tiny", "--cache", "{tmp}"], "is a folder"),
    (["--rerun", "--grid", "tiny", "--cache", "{tmp}/notes.txt"], "is not a cached grid; refusing to overwrite it"),
    (["--bootstrap", "5", "--seed", "7"], "add --refit to fit the cached runs again"),
    (["--resume"], "give it with --rerun"),
])
def test_bad_arguments_get_one_line(tmp_path, args, message):
    """Including what --rerun and --refit would write: never over a file that is no cached
    grid, nor the course's own full grid with a smaller one; and options the cached fits
    would silently ignore."""
    (tmp_path / "notes.txt").write_text("my notes\n")
    args = [a.format(tmp=tmp_path) for a in args]
    out = run_lab("--nproc", 1, "--report", tmp_path / "r.json", *args, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


def test_full_grid_spans_two_decades_with_runs_long_enough():
    runs = scaling_law.plan_runs("full", load_corpus().vocab_size)
    budgets = sorted({r["budget"] for r in runs})
    assert budgets[-1] / budgets[0] >= 100 - 1e-9
    short = [(r["budget"], r["shape"], r["steps"]) for r in runs if r["steps"] < scaling_law.MIN_STEPS]
    assert not short, f"runs shorter than {scaling_law.MIN_STEPS} steps: {short}"


def test_every_cached_profile_has_its_best_size_inside(cached):
    """Each budget's lowest held-out loss is at neither end of the sizes tried, so that the
    grid spans the optimum at every budget (Approach 2 needs it)."""
    for budget in sorted({r["budget"] for r in cached["runs"]}):
        profile = sorted((r["N"], r["val_loss"]) for r in cached["runs"] if r["budget"] == budget)
        best = min(range(len(profile)), key=lambda i: profile[i][1])
        assert 0 < best < len(profile) - 1, (budget, profile)


def test_the_readers_fit_comes_out(cached):
    """The fit of the shipped runs is not degenerate: a floor E above 0.3 nats, both exponents
    above 0.15, and an allocation exponent within 0.15 of the profile minima's (Approach 2)."""
    f3, f2 = cached["fits"]["approach3"], cached["fits"]["approach2"]
    assert f3["converged"]
    assert f3["E"] > 0.3, f3["E"]
    assert f3["alpha"] > 0.15 and f3["beta"] > 0.15, (f3["alpha"], f3["beta"])
    assert "a" in f2, f2.get("error")
    assert abs(f3["a"] - f2["a"]) <= 0.15, (f3["a"], f2["a"])
