"""How fast the planner and the fitter are, against their targets (2-core machine):

* ``python -m solutions.plan --model 70e9 --tokens 1.4e12 --gpu H100 --count 1024`` searches the
  layouts, predicts them and prints the plan in under 3 s (Python start and imports included);
* ``plan --json`` of a mixture of experts given by its flags (``--experts --top-k
  --expert-ffn-hidden``) with its layout fixed, under 1 s;
* the layout search over TP x PP x DP x EP x CP (with ZeRO, micro-batch, recompute, virtual
  stages) for DeepSeek-V3 on 2,048 H800s in FP8, under 5 s;
* ``solutions.fit.fit_approach3`` from the 20 best of the paper's starting points on the
  cached grid of Lab 6 (what the notebook runs), and from all 4,500 (what ``--rerun`` runs).

    python benchmarks/bench_plan.py [--repeat N] [--full-grid]

Each figure is a median of wall-clock seconds; CPU contention from other processes inflates
them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["--model", "70e9", "--tokens", "1.4e12", "--gpu", "H100", "--count", "1024"]
#: Qwen3-235B-A22B's shape by flags, its Megatron-Bridge layout on 256 B200s, FP8: no search.
MOE_JSON = ["--model", "235e9", "--tokens", "36e12", "--layers", "94", "--hidden", "4096", "--heads", "64",
            "--kv-heads", "4", "--head-dim", "128", "--vocab", "151936", "--experts", "128", "--top-k", "8",
            "--expert-ffn-hidden", "1536", "--gpu", "B200", "--count", "256", "--precision", "fp8", "--tp", "1",
            "--pp", "8", "--dp", "32", "--ep", "8", "--zero", "1", "--micro-batch", "1", "--recompute", "selective",
            "--json"]
#: Every degree searched, EP and CP included.
MOE_SEARCH = ["--arch", "DeepSeek-V3", "--tokens", "14.8e12", "--gpu", "H800", "--count", "2048", "--precision",
              "fp8", "--json"]


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--full-grid", action="store_true", help="also time the 4,500-start fit (minutes)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = median_seconds(lambda: subprocess.run([sys.executable, "-m", "solutions.plan", *PLAN], env=env,
                                                check=True, capture_output=True), args.repeat)
    print(f"python -m solutions.plan (70B, 1,024 H100s): {cli:.2f} s median of {args.repeat} (target < 3 s)")
    for what, argv, target in (("plan --json, MoE flags, layout given", MOE_JSON, 1.0),
                               ("plan --json, DeepSeek-V3 on 2,048 H800s, TP x PP x DP x EP x CP searched",
                                MOE_SEARCH, 5.0)):
        t = median_seconds(lambda: subprocess.run([sys.executable, "-m", "solutions.plan", *argv], env=env,
                                                  check=True, capture_output=True), args.repeat)
        print(f"{what}: {t:.2f} s median of {args.repeat} (target < {target:g} s)")

    sys.path.insert(0, str(ROOT))
    import numpy as np

    from labs.scaling_law import load_cache
    from solutions import fit

    runs = load_cache()["runs"]
    N, D, L = (np.array([r[k] for r in runs], dtype=float) for k in ("N", "D", "val_loss"))
    quick = median_seconds(lambda: fit.fit_approach3(N, D, L, top_k=20), args.repeat)
    print(f"fit_approach3, 20 best starts, {len(runs)} runs: {quick:.2f} s median of {args.repeat}")
    if args.full_grid:
        full = median_seconds(lambda: fit.fit_approach3(N, D, L), 1)
        print(f"fit_approach3, all {len(fit.PAPER_INIT_GRID):,} starts: {full:.1f} s")


if __name__ == "__main__":
    main()
