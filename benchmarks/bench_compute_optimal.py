"""Benchmark Exercise 2: the vectorised sweep against the exercise's loop,
and the sweep's error against the closed-form optimum.

Run from the repository root:  python benchmarks/bench_compute_optimal.py
"""

import time

import numpy as np

from solutions.scaling import EXERCISE, chinchilla_loss, compute_optimal, compute_optimal_closed_form

BUDGETS = np.logspace(18, 26, 1000)


def template_compute_optimal(C, ratios=None):
    """The exercise's scalar loop, as written in the chapter."""
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for r in ratios:
        N = np.sqrt(C / (6 * r))
        D = r * N
        loss = chinchilla_loss(N, D)
        if best is None or loss < best[3]:
            best = (N, D, r, loss)
    return best


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    t_vec, (N, D, r, L) = best_of(lambda: compute_optimal(BUDGETS), repeat=5)
    t_loop, loop = best_of(lambda: [template_compute_optimal(C) for C in BUDGETS], repeat=1)
    loop = np.array(loop, dtype=np.float64)
    same_choice = np.mean(loop[:, 2] == r)

    N_c, D_c, r_c, L_c = compute_optimal_closed_form(BUDGETS, EXERCISE)
    gap_N = np.max(np.abs(N / N_c - 1))
    gap_L = np.max(np.abs(L / L_c - 1))
    below = np.sum(L < L_c * (1 - 1e-12))

    print(f"compute_optimal over {BUDGETS.size} budgets (1e18..1e26), 200 ratios each")
    print(f"  vectorised:          {t_vec * 1e3:9.2f} ms")
    print(f"  Python loop (template): {t_loop * 1e3:6.0f} ms   ({t_loop / t_vec:.0f}x slower)")
    print(f"  same grid point chosen in {same_choice:.1%} of budgets")
    print("sweep vs closed form (exercise constants)")
    print(f"  max relative gap in N:    {gap_N:.3%}")
    print(f"  max relative gap in loss: {gap_L:.2e}")
    print(f"  budgets where the sweep beats the closed form: {below}")


if __name__ == "__main__":
    main()
