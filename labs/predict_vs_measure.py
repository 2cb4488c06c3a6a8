"""The step-time model against the labs' own runs: predicted and measured step times on CPU.

    python -m labs.predict_vs_measure --nproc 2 [--quick] --report PATH

The ranks (started by ``labs.launch``, gloo, one core and one thread each) first measure the
machine, then time training steps of the labs' GPT with the labs' own parallel code:

* **Calibration, micro-benchmarks**: the per-core matmul rate (a 1024 x 1024 x 1024 fp32
  matmul on one thread); Lab 1's hand-written ring all-reduce at two sizes, each call after a
  little compute as the runs make them (:data:`RING_WORK`), which give gloo's latency per
  message and its bandwidth (``t = 2 (n-1) alpha + 2 (n-1)/n B / beta``); gloo's
  own all-gather and reduce-scatter, the collectives FSDP2 issues, timed the same way in chains
  (:data:`GLOO_COLLECTIVES`: gloo's reduce-scatter is an all-reduce of the whole buffer, twice
  a ring reduce-scatter's bytes and steps); and FSDP2's own work per unit and micro-batch, from
  a tiny sharded GPT against the same GPT plain (:func:`bookkeeping_steps`).
* **Runs**: one process (every rank alone, at several widths; two of them set the model's
  last two constants, see ``solutions.steptime.calibrate_cpu``); DDP with Lab 2's
  ``wrap_ddp`` (the gradients all-reduced by the hand-written ring inside the hook); FSDP with
  Lab 3's ``shard_model`` and ``m`` micro-batches per step (FSDP2 gathers and
  reduce-scatters again for every micro-batch); tensor parallelism with Lab 4's
  ``TensorParallelBlock`` (ring all-reduces, no sequence parallelism: the model is told so;
  embeddings and head replicated); and a 1F1B
  pipeline with Lab 5's ``Stage`` and ``run_schedule`` (unpaced).

A timed step is the forward and backward pass of every micro-batch with its communication,
and no optimizer step: the step-time model does not count the optimizer either. After one
warm-up step each, the configurations (and the micro-benchmarks) take turns for ``--repeats``
rounds, so that whatever else runs on the machine disturbs them alike; a step takes as long as
its slowest rank, and each configuration's least disturbed step is kept (other work can only
add time; the reasoning of timeit's minimum).

:func:`predictions` turns a report into predicted-vs-measured rows with
``solutions.steptime`` alone; ``labs/reference/cpu/`` keeps a measured report, and
``labs/07-predicted-vs-measured.md`` shows it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from pathlib import Path

from solutions import steptime

from . import launch

LAB = "predict_vs_measure"
#: The runs that set ``w0`` and ``c`` (:func:`solutions.steptime.calibrate_cpu`): those of one
#: process, which compute and do not communicate. Every parallel run is held out.
CALIBRATION_STRATEGY = "one"
#: What the model promises on the held-out runs, asserted on the stored reference by
#: ``tests/labs/test_steptime_cpu.py`` and checked by every run of the lab: how far off each
#: predicted step time is, as a factor either way less one (:func:`miss`: a prediction too fast
#: and one too slow by the same factor count alike), at most ``worst`` on every run and
#: ``median`` at the median. (The figures below were taken, until December 2026, as the signed
#: error predicted / measured - 1, whose size understates a prediction that is too fast; the
#: stored reference's worst, tp d32 b2, is -37% that way and 59% as a miss.)
#: Until FSDP2's own work and gloo's own collectives were measured, FSDP rows came out 1.5-3x
#: too fast on a 2-core AMD EPYC (the others within 6% there when it was quiet). With them,
#: four full measurements on a 2-core EPYC shared with other work (load average 5 to 8, the
#: ranks at raised priority, ``nice -n -15``) had held-out medians of 15-18% and worst rows of
#: 48-91%: the width-32 models, whose steps are a few fixed costs, move most with the load
#: (DDP and pipeline rows at width 32; FSDP rows within 27% in the last two). Later the
#: lab failed two runs in three on the same machine when quiet, on its tensor-parallel rows:
#: the model priced them as sequence-parallel, and the ring was timed one call at a time
#: (:data:`RING_WORK`).
#: Priced as Lab 4 runs them, with the ring timed after compute and 21 rounds, five runs on the
#: quiet machine had held-out medians of 7-13% and worst rows of 23-39%. The stored reference
#: is the first of the last three (load average 1.7 to 2.4), the one at the lowest load,
#: chosen by load, not by error.
CPU_BOUNDS = {"median": 0.40, "worst": 0.85}
#: Where the measured reference lives, and its name.
REFERENCE = launch.REPO_ROOT / "labs" / "reference" / "cpu" / "predict-vs-measure.json"
STRATEGIES = ("one", "ddp", "fsdp", "tp", "pp")

__all__ = ["CALIBRATION_STRATEGY", "CPU_BOUNDS", "REFERENCE", "RING_WORK", "run_configs", "model_of", "predictions", "miss", "summary",
           "build_parser", "worker", "main"]


def _run(strategy, d, layers=2, batch=8, m=1, heads=4, block=64):
    name = f"{strategy} d{d}" + (f" L{layers}" if layers != 2 else "") + (f" m{m}" if m != 1 else "") \
        + (f" b{batch}" if batch != 8 else "")
    return {"name": name, "strategy": strategy, "d_model": d, "n_layer": layers, "n_head": heads,
            "block_size": block, "micro_batch": batch, "microbatches": m}


def run_configs(quick: bool = False) -> list[dict]:
    """The configurations timed: ``--quick`` a tiny one per strategy (a test's few seconds)."""
    tiny = dict(batch=2)
    calibration = [_run("one", 32, **tiny), _run("one", 256)]
    if quick:
        return [_run("one", 32, **tiny), _run("one", 64, **tiny), _run("ddp", 32, **tiny),
                _run("fsdp", 32, m=2, **tiny), _run("tp", 32, **tiny), _run("pp", 32, m=2, **tiny)]
    runs = calibration + [_run("one", d) for d in (64, 128)] + [_run("one", 128, layers=4, batch=4, m=2)]
    runs += [_run("ddp", 32, **tiny)] + [_run("ddp", d) for d in (64, 128, 256)]
    runs += [_run("fsdp", 32, m=2, **tiny)] + [_run("fsdp", 128, batch=4, m=m) for m in (1, 2, 4)]
    runs += [_run("fsdp", 256, batch=4, m=2)]
    runs += [_run("tp", 32, **tiny)] + [_run("tp", d) for d in (128, 256)]
    runs += [_run("pp", 32, m=2, **tiny)] + [_run("pp", 128, layers=4, batch=4, m=m) for m in (2, 4, 8)]
    return runs


# --------------------------------------------------------------------------- the model's side


def model_of(run: dict, world: int, vocab: int):
    """``(Shape, Layout, global_batch)`` of a run for ``solutions.steptime``: the labs' GPT
    (its ``N`` the parameters that enter a matmul, as the labs count FLOPs) and the layout."""
    from .model import GPTConfig, matmul_params

    cfg = GPTConfig(vocab_size=vocab, block_size=run["block_size"], n_layer=run["n_layer"], n_head=run["n_head"],
                    d_model=run["d_model"])
    shape = steptime.Shape(cfg.n_layer, cfg.d_model, cfg.n_head, cfg.block_size, vocab=vocab,
                           params=matmul_params(cfg), dropout=False)
    b, m, n = run["micro_batch"], run["microbatches"], world
    layout = {"one": steptime.Layout(micro_batch=b), "ddp": steptime.Layout(dp=n, micro_batch=b),
              "fsdp": steptime.Layout(dp=n, zero=3, micro_batch=b), "tp": steptime.Layout(tp=n, micro_batch=b, sequence_parallel=False),
              "pp": steptime.Layout(pp=n, micro_batch=b, schedule="1f1b")}[run["strategy"]]
    return shape, layout, b * m * layout.dp


def cluster_of(report: dict) -> steptime.Cluster:
    """The machine as :func:`solutions.steptime.cpu_cluster` sees it: the matmul rate, the ring's
    latency and bandwidth, and, where the report measured them, gloo's own all-gather and
    reduce-scatter (the collectives FSDP2 issues)."""
    c = report["calibration"]
    own = {op: (v["latency_s"], v["bandwidth_bytes_per_s"], v["algorithm"])
           for op, v in c.get("collectives", {}).items()}
    base = steptime.cpu_cluster(c["matmul_flops_per_s"], c["bandwidth_bytes_per_s"], c["latency_s"],
                                report["machine"]["cores"], collectives=own)
    return dataclasses.replace(base, fsdp_unit_s=fsdp_unit_seconds(report, base))


def predictions(report: dict) -> dict:
    """Predicted against measured for every run of ``report``: the cluster from its
    micro-benchmarks, ``w0`` and ``c`` from the one-process runs (:data:`CALIBRATION_STRATEGY`), then
    :func:`solutions.steptime.step_time` for every run. Returns ``{"calibration", "rows"}``."""
    world, vocab = report["world_size"], report["config"]["vocab_size"]
    cluster = cluster_of(report)
    setting = [r for r in report["runs"] if r["strategy"] == CALIBRATION_STRATEGY]
    if len({r["d_model"] for r in setting}) < 2:
        raise ValueError("the report needs one-process runs at two widths or more to set w0 and c")
    cal = steptime.calibrate_cpu(cluster, [(*model_of(r, world, vocab), r["measured_s"]) for r in setting])
    rows = []
    for run in report["runs"]:
        shape, lay, batch = model_of(run, world, vocab)
        st = steptime.step_time(shape, lay, cluster, batch, calibration=cal, bytes_per_element=4)
        rows.append({"name": run["name"], "strategy": run["strategy"], "sets_constant": run["strategy"] == CALIBRATION_STRATEGY,
                     "predicted_s": st.step_s, "measured_s": run["measured_s"], "median_s": run["median_s"],
                     "error": st.step_s / run["measured_s"] - 1,
                     "breakdown_s": {k: v for k, v in st.breakdown_s.items() if v}})
    return {"calibration": cal, "cluster": cluster, "rows": rows}


def miss(row) -> float:
    """How far off a row's prediction is, as a factor either way less one:
    ``max(predicted / measured, measured / predicted) - 1`` (0.5 for a prediction one and a
    half times too fast or too slow; ``error``, the signed ``predicted / measured - 1``, would
    call those -33% and +50%)."""
    ratio = row["predicted_s"] / row["measured_s"]
    return max(ratio, 1 / ratio) - 1


def summary(rows) -> dict:
    """Median and worst :func:`miss` of the held-out rows (those :data:`CPU_BOUNDS` bounds)."""
    held = [miss(r) for r in rows if not r["sets_constant"]]
    return {"held_out": len(held), "median": statistics.median(held), "worst": max(held)}


# --------------------------------------------------------------------------- the rank's side


def _timed(step) -> float:
    """Seconds ``step()`` takes on this rank, every rank starting together."""
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def _slowest(times: list) -> list:
    """Each entry the largest over ranks (a step lasts as long as its slowest rank)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


MATMUL = 1024  # the micro-benchmark's square matmul
RING_ELEMENTS = (256, 1 << 20)  # fp32 elements: 1 KiB and 4 MiB
#: gloo's all-gathers and reduce-scatters are timed in chains of this many, one after the other
#: with no barrier between, as FSDP2 issues them: a rank that leaves one collective late
#: enters the next late, and the chain's time per call counts that; a single call after a
#: barrier, both ranks already waiting, does not.
CHAIN = 8
#: The ring all-reduce is timed as the runs call it: in a chain of :data:`CHAIN` calls, each after
#: a ``RING_WORK``-square matmul (a few tenths of a millisecond of compute, like a narrow
#: tensor-parallel layer's between two of its all-reduces), less the same chain of matmuls alone.
#: On a quiet 2-core EPYC virtual machine the latency per ring step came out at 0.36-0.40 ms
#: this way (five runs of the lab), 0.16-0.17 ms from calls chained back to back (three runs),
#: and 0.32 or 1.4 ms from one call after a barrier, the old way: calls chained without compute
#: made the tensor-parallel rows measure 1.4-2.2 times their prediction, and one call alone made
#: the lab fail two runs in three.
RING_WORK = 256


#: The collectives FSDP2 issues on gloo, calibrated on their own: ``{op: algorithm}``, the ring
#: whose steps and bytes each one moves. Gloo's all-gather is a ring; its reduce-scatter is
#: not: PyTorch simulates it with an all-reduce of the whole input and keeps this rank's chunk
#: (pytorch/pytorch#118911), twice the bytes of a ring reduce-scatter and twice its steps.
GLOO_COLLECTIVES = {"all_gather": "all_gather", "reduce_scatter": "all_reduce"}


def micro_benchmarks(all_reduce: str = "ring", world_size: int = 2):
    """``{name: step}``: the matmul, the ring all-reduce, and gloo's all-gather and
    reduce-scatter (what FSDP2 calls), each at two sizes of the full buffer, timed like the runs
    (torch's built-in all-reduce, also a ring on gloo, where ``all_reduce`` is "builtin")."""
    import torch
    import torch.distributed as dist

    from .collectives import ring_all_reduce

    if all_reduce == "builtin":
        ring_all_reduce = dist.all_reduce  # noqa: F811
    a, b = torch.randn(MATMUL, MATMUL), torch.randn(MATMUL, MATMUL)
    small, large = (torch.ones(k) for k in RING_ELEMENTS)
    work = torch.randn(RING_WORK, RING_WORK)

    def ring_chain(x):
        for _ in range(CHAIN):
            work @ work
            if x is not None:
                ring_all_reduce(x.clone())
    steps = {"matmul": lambda: a @ b, "ring small": lambda: ring_chain(small),
             "ring large": lambda: ring_chain(large), "ring work": lambda: ring_chain(None)}
    for size, k in zip(("small", "large"), RING_ELEMENTS):
        full = torch.ones(k * world_size)
        shard = torch.ones(k)
        gathered, out = torch.empty(k * world_size), torch.empty(k)

        def gathers(g=gathered, x=shard):
            for _ in range(CHAIN):
                dist.all_gather_into_tensor(g, x)

        def scatters(o=out, x=full):
            for _ in range(CHAIN):
                dist.reduce_scatter_tensor(o, x)
        steps[f"all_gather {size}"], steps[f"reduce_scatter {size}"] = gathers, scatters
    return steps


def _alpha_beta(n, algorithm, sizes_bytes, t_small, t_large):
    """Latency per step and bandwidth from ``t = steps alpha + factor B / beta`` at two buffer
    sizes, for a ring ``algorithm`` (all-reduce: ``2 (n-1)`` steps, ``2 (n-1)/n`` of the buffer;
    all-gather, reduce-scatter: ``n-1`` and ``(n-1)/n``)."""
    small, large = sizes_bytes
    steps = (2 if algorithm == "all_reduce" else 1) * (n - 1)
    factor = (2 if algorithm == "all_reduce" else 1) * (n - 1) / n
    if t_large > t_small:
        bandwidth = factor * (large - small) / (t_large - t_small)
    else:  # a disturbed small run took longer than the large one: charge the large one's time
        bandwidth = factor * large / t_large  # to bandwidth alone (a lower bound on it)
    latency = max(0.0, (t_small - factor * small / bandwidth) / steps)
    return latency, bandwidth


#: The tiny GPT on which FSDP2's own work is timed (:func:`bookkeeping_steps`): not one of the
#: runs, and so narrow that neither its matmuls nor its bytes count for much.
BOOKKEEPING = {"d_model": 16, "n_layer": 2, "n_head": 2, "block_size": 32, "micro_batch": 1, "microbatches": 2}


def bookkeeping_steps(ctx, vocab: int) -> dict:
    """``{"tiny fsdp": step, "tiny plain": step}``: the :data:`BOOKKEEPING` GPT, once sharded
    by FSDP2 over every rank (each block, the embeddings and the head a unit, as Lab 3 wraps
    it), once plain on each rank. What the sharded step takes beyond the plain one and beyond
    its few bytes is FSDP2's own work per unit and micro-batch (:func:`fsdp_unit_seconds`):
    its hooks, the copy-in and copy-out around each collective, the sharded gradients
    accumulated as DTensors, and the wait at each of its collectives for a rank that left the
    previous one late."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from .fsdp import shard_model
    from .model import GPT, GPTConfig
    from .training import forward_backward

    k = BOOKKEEPING
    cfg = GPTConfig(vocab_size=vocab, block_size=k["block_size"], n_layer=k["n_layer"], n_head=k["n_head"],
                    d_model=k["d_model"])
    g = torch.Generator().manual_seed(ctx.rank)
    xs = [(torch.randint(0, vocab, (k["micro_batch"], k["block_size"]), generator=g),
           torch.randint(0, vocab, (k["micro_batch"], k["block_size"]), generator=g)) for _ in range(k["microbatches"])]
    steps = {}
    for name in ("tiny fsdp", "tiny plain"):
        torch.manual_seed(0)
        model = GPT(cfg)
        if name == "tiny fsdp":
            model = shard_model(model, init_device_mesh("cpu", (ctx.world_size,)))

        def step(model=model):
            for x, y in xs:
                forward_backward(model, x, y, ctx.device, torch.float32)
            model.zero_grad(set_to_none=True)
        steps[name] = step
    return steps


def fsdp_unit_seconds(report: dict, cluster: steptime.Cluster) -> float:
    """FSDP2's own seconds per unit and micro-batch: the :data:`BOOKKEEPING` model's sharded
    step less its plain step and less the collectives ``cluster`` prices for it, over its
    ``(L + 2) m`` unit-passes (0 where the report did not time it)."""
    c = report["calibration"].get("fsdp_seconds")
    if not c:
        return 0.0
    world, vocab = report["world_size"], report["config"]["vocab_size"]
    shape, lay, batch = model_of({**c["model"], "strategy": "fsdp"}, world, vocab)
    st = steptime.step_time(shape, lay, cluster, batch, calibration=steptime.CPUCalibration(1.0, 0.0, ()),
                            bytes_per_element=4)
    units = (c["model"]["n_layer"] + 2) * c["model"]["microbatches"]
    return max(0.0, c["fsdp"] - c["plain"] - st.breakdown_s["dp"]) / units


def calibration_from(ctx, seconds: dict) -> dict:
    """The machine's constants from the micro-benchmarks' least times: matmul rate, the ring's
    latency per step and bandwidth from ``t = 2 (n-1) alpha + 2 (n-1)/n B / beta`` (``t`` a
    chained call's time beyond its :data:`RING_WORK` matmul), and the same
    two constants for each of gloo's collectives that FSDP2 issues (:data:`GLOO_COLLECTIVES`),
    where they were timed."""
    n = ctx.world_size
    small, large = RING_ELEMENTS
    t_small, t_large = ((seconds[f"ring {k}"] - seconds["ring work"]) / CHAIN for k in ("small", "large"))
    latency, bandwidth = _alpha_beta(n, "all_reduce", (4 * small, 4 * large), t_small, t_large)
    out = {"matmul_flops_per_s": 2 * MATMUL**3 / seconds["matmul"], "matmul_shape": [MATMUL] * 3,
           "ring_bytes": [4 * small, 4 * large], "ring_seconds": [t_small, t_large],
           "bandwidth_bytes_per_s": bandwidth, "latency_s": latency}
    own = {}
    for op, algorithm in GLOO_COLLECTIVES.items():
        if f"{op} small" not in seconds:
            continue
        ts = (seconds[f"{op} small"] / CHAIN, seconds[f"{op} large"] / CHAIN)
        sizes = (4 * small * n, 4 * large * n)  # the full buffer: gathered output, scattered input
        a, b = _alpha_beta(n, algorithm, sizes, *ts)
        own[op] = {"algorithm": algorithm, "bytes": list(sizes), "seconds": list(ts), "latency_s": a,
                   "bandwidth_bytes_per_s": b}
    if own:
        out["collectives"] = own
    if "tiny fsdp" in seconds:
        out["fsdp_seconds"] = {"fsdp": seconds["tiny fsdp"], "plain": seconds["tiny plain"], "model": BOOKKEEPING}
    return out


def _batches(corpus, run, count, seed=0):
    from .data import batch_offsets, get_batch

    b, T = run["micro_batch"], run["block_size"]
    out = []
    for i in range(count):
        x, y = get_batch(corpus.train, batch_offsets(len(corpus.train), T, b, i, seed), T)
        out.append((x, y))
    return out


def _make_step(ctx, run, corpus, vocab, all_reduce="ring"):
    """A function doing one timed step of ``run`` on this rank."""
    import torch
    import torch.nn.functional as F

    from .model import GPT, GPTConfig
    from .training import forward_backward

    n, dev, fp32 = ctx.world_size, ctx.device, torch.float32
    cfg = GPTConfig(vocab_size=vocab, block_size=run["block_size"], n_layer=run["n_layer"], n_head=run["n_head"],
                    d_model=run["d_model"])
    torch.manual_seed(0)
    model = GPT(cfg)
    m = run["microbatches"]
    mbs = _batches(corpus, run, m, seed=ctx.rank if run["strategy"] in ("ddp", "fsdp") else 0)
    strategy = run["strategy"]

    if strategy in ("one", "ddp", "fsdp"):
        if strategy == "ddp":
            from .ddp import wrap_ddp

            model = wrap_ddp(model, ctx, all_reduce, bucket_mb=25.0)[0]
        elif strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh

            from .fsdp import shard_model

            model = shard_model(model, init_device_mesh("cpu", (n,)))

        def step():
            for x, y in mbs:
                forward_backward(model, x, y, dev, fp32)
            model.zero_grad(set_to_none=True)
        return step
    if strategy == "tp":
        from .tensor_parallel import TensorParallelBlock, TensorParallelComm

        comm = TensorParallelComm(None, all_reduce)
        blocks = [TensorParallelBlock(b, cfg.n_head, comm) for b in model.blocks]
        params = [p for blk in blocks for p in blk.parameters()] + list(model.embed.parameters()) \
            + list(model.out.parameters())

        def step():
            for x, y in mbs:
                h = model.embed(x)
                for blk in blocks:
                    h = blk(h)
                logits = model.out(h)
                F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)).backward()
            for p in params:
                p.grad = None
        return step
    if strategy == "pp":
        from .pipeline_parallel import Stage, run_schedule

        stage = Stage(model, ctx.rank, n)
        params = list(stage.parameters())
        xs, ys = [x for x, _ in mbs], [y for _, y in mbs]
        shape = (run["micro_batch"], run["block_size"], run["d_model"])

        def step():
            run_schedule(stage, ctx, "1f1b", xs, ys, shape, params, pace=0.0)
            for p in params:
                p.grad = None
        return step
    raise ValueError(f"unknown strategy {strategy!r}")


def machine() -> dict:
    """The machine, in words and numbers (no host names)."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": launch.cpu_cores(), "threads_per_rank": torch.get_num_threads(),
            "nice": os.nice(0) if hasattr(os, "nice") else None,
            "torch": torch.__version__, "python": platform.python_version(), "system": platform.system()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.predict_vs_measure", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("runs")
    g.add_argument("--quick", action="store_true", help="one tiny configuration per strategy (seconds)")
    g.add_argument("--repeats", type=int, default=21,
                   help="rounds: every configuration is timed once per round, in turn (the least disturbed counts)")
    return parser


def validate(args, world_size: int) -> None:
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    if world_size < 2:
        raise ValueError(f"--nproc must be at least 2 (the parallel runs need two ranks), got {world_size}")
    from labs.collectives import ring_is_stub  # asked here, before any process group exists

    # The course's ring, or torch's built-in all-reduce while Assignment 1's ring is still the
    # student release's stub.
    args.all_reduce = "builtin" if ring_is_stub() else "ring"
    for run in run_configs(args.quick):
        if run["n_head"] % world_size or run["n_layer"] % world_size:
            raise ValueError(f"--nproc {world_size} must divide the heads ({run['n_head']}) and layers "
                             f"({run['n_layer']}) of run {run['name']!r}")


def worker(ctx, args) -> dict:
    from .data import load_corpus
    from .model import padded_vocab

    corpus = load_corpus()
    vocab = padded_vocab(corpus.vocab_size)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    steps = micro_benchmarks(getattr(args, "all_reduce", "ring"), ctx.world_size)
    steps.update(bookkeeping_steps(ctx, vocab))
    configs = run_configs(args.quick)
    for run in configs:
        steps[run["name"]] = _make_step(ctx, run, corpus, vocab, getattr(args, "all_reduce", "ring"))
    for step in steps.values():  # warm-up
        step()
    # Round-robin: whatever else the machine runs disturbs every configuration alike.
    times = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            times[name].append(_timed(step))
    times = {name: _slowest(t) for name, t in times.items()}
    cal = calibration_from(ctx, {k: min(v) for k, v in times.items() if k.split()[0] in ("matmul", "ring", "tiny", *GLOO_COLLECTIVES)})
    ctx.log(f"matmul {cal['matmul_flops_per_s'] / 1e9:.3g} GFLOP/s per core; ring all-reduce: "
            f"latency {cal['latency_s'] * 1e6:.3g} us per step, bandwidth {cal['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s")
    for op, v in cal.get("collectives", {}).items():
        ctx.log(f"gloo {op}: latency {v['latency_s'] * 1e6:.3g} us per step, bandwidth "
                f"{v['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s (as a ring {v['algorithm'].replace('_', '-')})")

    runs = []
    for run in configs:
        best, med = min(times[run["name"]]), statistics.median(times[run["name"]])
        runs.append({**run, "measured_s": best, "median_s": med})
        ctx.log(f"timing: {run['name']:<16} {best * 1e3:8.2f} ms (median {med * 1e3:.2f})")
    info = machine()
    info["load_average_1min"] = [load_before, os.getloadavg()[0] if hasattr(os, "getloadavg") else None]
    report = {"config": {"vocab_size": vocab, "repeats": args.repeats, "quick": args.quick, "dtype": "torch.float32"},
              "machine": info, "calibration": cal, "runs": runs, "world_size": ctx.world_size}
    pred = predictions(report)
    rows = pred["rows"]
    ctx.log(f"FSDP2's own work: {pred['cluster'].fsdp_unit_s * 1e6:.3g} us per unit and micro-batch, "
            f"beyond its bytes")
    from .report import check_at_most, check_factor

    held = summary(rows)
    checks = [check_factor(f"{r['name']}: step seconds, predicted vs measured", r["predicted_s"], r["measured_s"],
                           1 + CPU_BOUNDS["worst"], unit="s") for r in rows if not r["sets_constant"]]
    checks.append(check_at_most("held-out runs: median miss (a factor either way, less one)", CPU_BOUNDS["median"],
                                held["median"]))
    ctx.log(f"held-out runs: median miss {100 * held['median']:.3g}%, worst {100 * held['worst']:.3g}% "
            "(how far off, as a factor either way less one)")
    return {**report, "checks": checks, "summary": held}


def main(argv=None) -> int:
    status = launch.main(LAB, build_parser(), worker, argv, validate)
    if "RANK" not in os.environ:
        args = build_parser().parse_args(argv)
        path = Path(args.report)
        if path.exists():  # no host names in a report meant to be kept
            report = json.loads(path.read_text(encoding="utf-8"))
            for r in report.get("ranks", []):
                r.pop("host", None)
            path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    launch.exit_now(main())
