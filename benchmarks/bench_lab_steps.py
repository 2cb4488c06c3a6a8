"""What a timed step of the FSDP lab costs with and without the collective counter.

    python benchmarks/bench_lab_steps.py [--repeat 5] [--steps 20]

The labs count collectives with a Python dispatch mode (``labs.training.CollectiveCounter``),
which intercepts every aten op of a step. The FSDP lab once timed every step inside it; now
only its checked steps run under it and the timed steps do the training step alone. This
script trains the lab's default model with FSDP2 on one CPU rank (gloo) in this process and
times, interleaved, ``--steps`` training steps plain and ``--steps`` under the counter, five
times (``--repeat``). It prints the median seconds per step, wall clock and CPU (this
process's CPU time, which other processes on a shared machine disturb less).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)

    from torch.distributed.device_mesh import init_device_mesh

    from labs.data import batch_offsets, get_batch, load_corpus
    from labs.fsdp import shard_model
    from labs.model import GPT, GPTConfig, padded_vocab
    from labs.training import CollectiveCounter, TrainConfig, make_optimizer, train_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    corpus = load_corpus()
    cfg = GPTConfig(vocab_size=padded_vocab(corpus.vocab_size))  # the lab's default model
    tcfg = TrainConfig(steps=args.steps)
    torch.manual_seed(0)
    model = shard_model(GPT(cfg), init_device_mesh("cpu", (1,)))
    opt = make_optimizer(model, tcfg)
    dev = torch.device("cpu")
    x, y = get_batch(corpus.train, batch_offsets(len(corpus.train), cfg.block_size, 8, 0, 0), cfg.block_size)

    def run(counted: bool) -> tuple[float, float]:
        wall, cpu = [], []
        for _ in range(args.steps):
            counter = CollectiveCounter() if counted else None
            t0, c0 = time.perf_counter(), time.process_time()
            if counter is not None:
                with counter:
                    train_step(model, opt, x, y, 1e-3, tcfg, dev, torch.float32)
            else:
                train_step(model, opt, x, y, 1e-3, tcfg, dev, torch.float32)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            opt.zero_grad(set_to_none=True)
        return statistics.median(wall), statistics.median(cpu)

    run(False)  # warm-up
    results = {True: [], False: []}
    for _ in range(args.repeat):
        for counted in (True, False):
            results[counted].append(run(counted))
    for counted, label in ((True, "under the counter (before)"), (False, "plain (the timed steps now)")):
        wall = statistics.median(r[0] for r in results[counted])
        cpu = statistics.median(r[1] for r in results[counted])
        print(f"{label:<30} {1e3 * wall:7.1f} ms wall  {1e3 * cpu:7.1f} ms CPU per step")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
