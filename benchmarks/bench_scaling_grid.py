"""How long Lab 6's full grid takes to train on this machine's CPU, estimated without training it.

    python benchmarks/bench_scaling_grid.py [--steps 30]

For each model shape of the grid (``labs.scaling_law.GRIDS["full"]``) it times ``--steps``
training steps of the lab's recipe (one thread, fp32, the lab's batch) and takes the median CPU
seconds per step: the CPU time of this process, which other work on a shared machine disturbs
far less than the wall clock. Each run of the grid costs its planned steps times that, and
``--rerun`` deals the runs out to its ranks longest first; the script prints the estimated wait
with one and with two ranks (one per core), next to the seconds the cached grid recorded (wall
clock, on whatever machine trained it).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_seconds_per_step(shape: str, steps: int) -> float:
    import torch

    from labs import scaling_law as sl
    from labs.data import batch_offsets, get_batch, load_corpus
    from labs.model import GPT
    from labs.training import TrainConfig, lr_at, make_optimizer, optimizer_update

    torch.set_num_threads(1)
    corpus = load_corpus()
    model = GPT(sl._config(shape, corpus.vocab_size))
    cfg = TrainConfig(steps=steps + 5, batch_per_rank=sl.BATCH, lr=sl.LR, warmup=1)
    opt = make_optimizer(model, cfg)
    times = []
    for step in range(steps + 5):
        start = time.process_time()
        x, y = get_batch(corpus.train, batch_offsets(len(corpus.train), sl.BLOCK_SIZE, sl.BATCH, step), sl.BLOCK_SIZE)
        _, loss = model(x, y)
        loss.backward()
        optimizer_update(model, opt, lr_at(step, cfg), cfg)
        opt.zero_grad(set_to_none=True)
        if step >= 5:  # the first steps warm up the allocator
            times.append(time.process_time() - start)
    return statistics.median(times)


def wait_with(ranks: int, costs: list[float]) -> float:
    """Wall seconds when ``ranks`` ranks take the runs in turn, longest first (as --rerun does)."""
    loads = [0.0] * ranks
    for i, cost in enumerate(sorted(costs, reverse=True)):
        loads[i % ranks] += cost
    return max(loads)


def main(argv=None) -> int:
    from labs import scaling_law as sl
    from labs.data import load_corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    runs = sl.plan_runs("full", load_corpus().vocab_size)
    per_step = {shape: cpu_seconds_per_step(shape, args.steps) for shape in sorted({r["shape"] for r in runs})}
    for shape, t in per_step.items():
        print(f"{shape:4} {sl.SHAPES[shape]}  {1e3 * t:6.1f} ms of CPU per step")
    costs = [r["steps"] * per_step[r["shape"]] for r in runs]
    print(f"{len(runs)} runs, {sum(r['steps'] for r in runs):,} steps: {sum(costs) / 60:.1f} CPU minutes")
    for ranks in (1, 2):
        print(f"estimated wait with --nproc {ranks}: {wait_with(ranks, costs) / 60:.1f} minutes")
    try:
        cached = sl.load_cache()["runs"]
        print(f"the cached grid recorded {sum(r['seconds'] for r in cached) / 60:.1f} minutes of training (wall clock)")
    except ValueError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
