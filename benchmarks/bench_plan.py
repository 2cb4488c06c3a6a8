"""How fast the planner and the fitter are, against their targets (2-core machine):

* ``python -m solutions.plan --model 70e9 --tokens 1.4e12 --gpu H100 --count 1024`` searches the
  layouts, predicts them and prints the plan in under 3 s (Python start and imports included);
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
