"""Lab 6: a scaling law from your own runs. Tiny GPTs on Shakespeare, at several compute
budgets, then a Chinchilla fit (Hoffmann et al. 2022, Approaches 2 and 3).

    python -m labs.scaling_law --nproc 2 --report PATH            # fit the cached grid
    python -m labs.scaling_law --nproc 2 --rerun --report PATH    # train the grid afresh

The grid is a set of iso-FLOP profiles: for each compute budget ``C`` a handful of model
sizes ``N``, each trained on ``D = C / (6 N)`` characters with the labs' recipe (AdamW,
warm-up then a cosine decay matched to the run's length, as Hoffmann et al. found
necessary), and evaluated on the held-out tenth of the corpus. ``N`` counts the
parameters that take part in a matrix multiply (:func:`labs.model.matmul_params`),
the ``N`` of ``6 N D``. The full grid spans two decades of compute, 3e10 to 3e12 FLOPs, with
sizes on both sides of each profile's minimum; every run takes at least :data:`MIN_STEPS`
optimizer steps (a shorter run is mostly warm-up, and the parametric form would read its
shortfall as a penalty for data).

The ranks share out the runs (rank ``r`` trains runs ``r, r + n, ...``) and rank 0 gathers
them. The results are cached in ``labs/data/scaling_grid.json`` with the fits, so that the
notebook builds in seconds; ``--rerun`` trains afresh and rewrites ``--cache``.
Approach 3 is fitted from the paper's full 4,500-point grid of starting points
(``--fit-top-k 0``) and bootstrapped (``--bootstrap``).

Checks: every run trained on its planned token count; the Approach 3 fit converged (the
check of :func:`solutions.fit.check_convergence`); and its residuals are small. Whether
Approaches 2 and 3 agree is a finding, reported in ``fits``, not a check.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from solutions import fit as fitting
from solutions.scaling import FLOPS_PER_PARAM_PER_TOKEN, compute_optimal_closed_form

from . import launch
from .data import batch_offsets, get_batch, load_corpus
from .model import GPT, GPTConfig, matmul_params, padded_vocab
from .report import check_at_most, check_exact
from .training import TrainConfig, lr_at, make_optimizer, optimizer_update

LAB = "scaling_law"
CACHE = Path(__file__).resolve().parent / "data" / "scaling_grid.json"
REGENERATE = "python -m labs.scaling_law --nproc 2 --rerun"

#: Model shapes: (n_layer, d_model, n_head), smallest to largest (the "b" shapes fill the gaps
#: near the optimum of the two largest budgets).
SHAPES = {
    "S0": (1, 8, 2),
    "S1": (1, 16, 2),
    "S2": (1, 24, 2),
    "S3": (1, 32, 2),
    "S3b": (1, 40, 2),
    "S4": (2, 32, 2),
    "S4b": (2, 40, 4),
    "S5": (2, 48, 4),
    "S5b": (2, 56, 4),
    "S6": (2, 64, 4),
    "S7": (3, 96, 4),
    "S8": (4, 128, 4),
}
#: Compute budget (FLOPs) -> the shapes trained at it: sizes on both sides of each budget's
#: optimum, two decades of budgets. (A first grid one size larger throughout had every optimum at
#: its smallest size: at these budgets a character-level model wants hundreds of characters per
#: parameter. A second, one decade wide, gave a degenerate fit: the lab's notebook shows it.)
GRIDS = {
    "full": {3e10: ("S0", "S1", "S2", "S3"),
             1e11: ("S0", "S1", "S2", "S3", "S4"),
             3e11: ("S2", "S3", "S4", "S5", "S6"),
             1e12: ("S2", "S3", "S3b", "S4", "S4b", "S5", "S6", "S7"),
             3e12: ("S3", "S4", "S4b", "S5", "S5b", "S6", "S7", "S8")},
    "tiny": {3e9: ("S1", "S2", "S3"), 1e10: ("S1", "S2", "S3")},
}
#: The fewest optimizer steps a run of the full grid takes (``tests/labs/test_lab_scaling_law.py``).
#: With fewer, most of the run is warm-up at a batch fixed for all sizes, and the loss says more
#: about the schedule than about N and D. The grid leaves out the two runs that would fall short
#: (the largest size at each of the two smallest budgets).
MIN_STEPS = 300
BLOCK_SIZE = 64
BATCH = 16  # sequences per step: 1,024 characters
LR = 2e-3
EVAL_BATCHES, EVAL_BATCH = 16, 32  # 32,768 held-out characters, the same for every run
#: Tokens trained may differ from the plan by rounding to whole steps.
TOKENS_TOLERANCE = 0.01
#: Approach 2 fits each profile's parabola to the lowest point and its two neighbours: the
#: profiles are much steeper on the large-model side, which drags a parabola through all
#: five points off the minimum.
PARABOLA_WINDOW = 3
#: Root-mean-square residual of the Approach 3 fit in log loss: the parametric form must
#: describe the runs to 3% of the loss. It does to 2.2% over the cached grid's two decades (to
#: under 2% over the first decade alone, where it fits well and means little: see the notebook).
RMS_RESIDUAL = 0.03

__all__ = ["SHAPES", "GRIDS", "MIN_STEPS", "CACHE", "plan_runs", "train_run", "fit_runs", "load_cache", "build_parser",
           "worker", "main"]


def _config(shape: str, vocab_size: int) -> GPTConfig:
    n_layer, d_model, n_head = SHAPES[shape]
    return GPTConfig(vocab_size=padded_vocab(vocab_size), block_size=BLOCK_SIZE, n_layer=n_layer,
                     n_head=n_head, d_model=d_model)


def plan_runs(grid: str, vocab_size: int) -> list[dict]:
    """The runs of ``grid``: budget, shape, ``N``, planned tokens ``D = C/(6N)`` and steps."""
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {tuple(GRIDS)}, got {grid!r}")
    runs = []
    for budget, shapes in GRIDS[grid].items():
        for shape in shapes:
            cfg = _config(shape, vocab_size)
            N = matmul_params(cfg)
            D = budget / (FLOPS_PER_PARAM_PER_TOKEN * N)
            steps = max(1, round(D / (BATCH * BLOCK_SIZE)))
            runs.append({"budget": budget, "shape": shape, "n_layer": cfg.n_layer, "d_model": cfg.d_model,
                         "n_head": cfg.n_head, "N": N, "D_planned": D, "steps": steps})
    return runs


@torch.no_grad()
def _eval_loss(model, tokens) -> float:
    model.eval()
    losses = []
    for i in range(EVAL_BATCHES):
        offsets = batch_offsets(len(tokens), BLOCK_SIZE, EVAL_BATCH, i, seed=12345)
        x, y = get_batch(tokens, offsets, BLOCK_SIZE)
        losses.append(model(x, y)[1].item())
    model.train()
    return float(np.mean(losses))


def train_run(run: dict, seed: int = 0) -> dict:
    """Train one run of :func:`plan_runs` on CPU in fp32; return it with ``D`` (tokens
    trained), ``train_loss`` (mean of the last 10% of steps), ``val_loss`` and ``seconds``."""
    corpus = load_corpus()
    cfg = _config(run["shape"], corpus.vocab_size)
    torch.manual_seed(seed)
    model = GPT(cfg)
    steps = run["steps"]
    tcfg = TrainConfig(steps=steps, batch_per_rank=BATCH, lr=LR, warmup=min(100, max(1, steps // 10)), seed=seed)
    opt = make_optimizer(model, tcfg)
    start = time.perf_counter()
    tail = []
    for step in range(steps):
        x, y = get_batch(corpus.train, batch_offsets(len(corpus.train), BLOCK_SIZE, BATCH, step, seed), BLOCK_SIZE)
        _, loss = model(x, y)
        loss.backward()
        optimizer_update(model, opt, lr_at(step, tcfg), tcfg)
        opt.zero_grad(set_to_none=True)
        if step >= steps - max(1, steps // 10):
            tail.append(loss.item())
    val = _eval_loss(model, corpus.val)
    return {**run, "D": steps * BATCH * BLOCK_SIZE, "train_loss": float(np.mean(tail)), "val_loss": val,
            "seconds": round(time.perf_counter() - start, 2)}


def fit_runs(runs: list[dict], top_k: int | None = None, n_boot: int = 200, seed: int = 0, partial=None) -> dict:
    """Approach 3 (full paper grid unless ``top_k``) with bootstrap intervals, and Approach 2,
    on the runs' ``N``, ``D`` (tokens trained) and held-out loss. JSON-ready."""
    N = np.array([r["N"] for r in runs], dtype=float)
    D = np.array([r["D"] for r in runs], dtype=float)
    L = np.array([r["val_loss"] for r in runs], dtype=float)
    C = np.array([r["budget"] for r in runs], dtype=float)
    budgets = tuple(sorted(set(C)))
    f3 = fitting.fit_approach3(N, D, L, top_k=top_k, strict=False)
    out = {"approach3": {"E": f3.E, "A": f3.A, "B": f3.B, "alpha": f3.alpha, "beta": f3.beta, "a": f3.a,
                         "b": f3.b, "converged": f3.converged, "diagnosis": f3.diagnosis,
                         "starts": f3.n_starts, "objective": f3.objective}}
    consts = f3.constants()
    pred = np.log(consts.E + consts.A / N**consts.alpha + consts.B / D**consts.beta)
    out["approach3"]["rms_log_residual"] = float(np.sqrt(np.mean((pred - np.log(L)) ** 2)))
    out["approach3"]["tokens_per_param"] = {f"{c:g}": compute_optimal_closed_form(c, consts)[2] for c in budgets}
    if partial is not None:  # keep the slow full-grid fit even if what follows fails
        partial({"approach3": dict(out["approach3"])})
    if n_boot:
        intervals, dropped = fitting.bootstrap_approach3(N, D, L, n_boot=n_boot, seed=seed, fit=f3,
                                                         budgets=budgets, top_k=20)
        out["approach3"]["intervals"] = {k: [v.low, v.high] for k, v in intervals.items()}
        out["approach3"]["interval_level"] = next(iter(intervals.values())).level
        out["approach3"]["bootstrap"] = {"resamples": n_boot, "dropped": dropped}
    try:
        f2 = fitting.fit_approach2(C, N, L, window=PARABOLA_WINDOW)
        out["approach2"] = {"window": PARABOLA_WINDOW, "a": f2.a, "b": f2.b, "budgets": list(f2.budgets), "N_opt": list(f2.N_opt),
                            "D_opt": list(f2.D_opt), "L_opt": list(f2.L_opt)}
        if n_boot:
            # Five sizes per profile, each run once: a parametric bootstrap with the runs'
            # scatter about the Approach 3 fit.
            iv2, dropped2 = fitting.bootstrap_approach2(C, N, L, n_boot=n_boot, seed=seed, window=PARABOLA_WINDOW,
                                                        noise=out["approach3"]["rms_log_residual"])
            out["approach2"]["intervals"] = {k: [v.low, v.high] for k, v in iv2.items()}
            out["approach2"]["bootstrap"] = {"resamples": n_boot, "dropped": dropped2, "kind": "parametric",
                                             "noise": out["approach3"]["rms_log_residual"]}
    except ValueError as exc:  # a profile without an interior minimum: say so, keep Approach 3
        out["approach2"] = {"error": str(exc)}
    return out


def load_cache(path=CACHE) -> dict:
    """The cached grid: ``{"grid", "recipe", "runs", "fits", "command"}``."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no cached grid at {path}: run `{REGENERATE}` to train it")
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"--cache {path}: not a cached grid ({type(exc).__name__}); run `{REGENERATE}` "
                         "to train one") from None
    if not isinstance(cache, dict) or "runs" not in cache:
        raise ValueError(f"--cache {path}: not a cached grid (no runs in it); run `{REGENERATE}` to train one")
    return cache


def _write(cache: dict, path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(cache, indent=1) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m labs.{LAB}", description=__doc__.split("\n")[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("scaling law")
    g.add_argument("--rerun", action="store_true", help="train the grid afresh instead of reading --cache")
    g.add_argument("--resume", action="store_true",
                   help="with --rerun: keep the runs already in --cache and train only the missing ones")
    g.add_argument("--refit", action="store_true", help="fit the cached runs again (no training) and rewrite --cache")
    g.add_argument("--grid", choices=tuple(GRIDS), default="full", help="which grid to train with --rerun")
    g.add_argument("--cache", default=str(CACHE), help="the cached grid: read, or written by --rerun")
    g.add_argument("--fit-top-k", type=int, default=0,
                   help="Approach 3: L-BFGS from the k best grid points (0: all 4,500, the paper's procedure)")
    g.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples for the intervals (0: none)")
    g.add_argument("--seed", type=int, default=0)
    return parser


def worker(ctx, args) -> dict:
    _check_args(args)
    if args.rerun:
        torch.set_num_threads(1)
        vocab = load_corpus().vocab_size
        runs = plan_runs(args.grid, vocab)
        done = {}
        if args.resume and Path(args.cache).exists():  # keep the runs the cache already holds
            old = load_cache(args.cache)
            if old["grid"] == args.grid and old["recipe"]["seed"] == args.seed:
                done = {(r["budget"], r["shape"]): r for r in old["runs"]}
        todo = [i for i, r in enumerate(runs) if (r["budget"], r["shape"]) not in done]
        # Deal the runs out longest first, so that the ranks finish together.
        order = sorted(todo, key=lambda i: -runs[i]["steps"])
        mine = [(i, done[(r["budget"], r["shape"])]) for i, r in enumerate(runs)
                if ctx.is_main and (r["budget"], r["shape"]) in done]
        for i in order[ctx.rank::ctx.world_size]:
            result = train_run(runs[i], args.seed)
            print(f"rank {ctx.rank}: C={result['budget']:.0e} {result['shape']} N={result['N']:,} "
                  f"D={result['D']:,} val loss {result['val_loss']:.4f} ({result['seconds']:.0f} s)", flush=True)
            mine.append((i, result))
        gathered = [None] * ctx.world_size
        dist.all_gather_object(gathered, mine)
        if not ctx.is_main:
            return {}
        runs = [r for _, r in sorted((p for part in gathered for p in part), key=lambda p: p[0])]
        cache = {"grid": args.grid, "command": REGENERATE if args.grid == "full" else None,
                 "recipe": {"block_size": BLOCK_SIZE, "batch": BATCH, "lr": LR, "schedule": "warm-up, cosine to 0.1x",
                            "eval_tokens": EVAL_BATCHES * EVAL_BATCH * BLOCK_SIZE, "precision": "fp32", "seed": args.seed,
                            "torch": torch.__version__},
                 "runs": runs, "fits": None}
        _write(cache, args.cache)  # the runs are safe before the (slow) fits start
    else:
        if not ctx.is_main:
            return {}
        cache = load_cache(args.cache)
        runs = cache["runs"]
    if args.rerun or args.refit or not cache.get("fits"):
        ctx.log(f"fitting: Approach 3 from {'all' if not args.fit_top_k else args.fit_top_k} starting points, "
                f"{args.bootstrap} bootstrap resamples")
        def save_partial(fits):
            _write({**cache, "fits": fits}, args.cache)

        cache["fits"] = fit_runs(runs, args.fit_top_k or None, args.bootstrap, args.seed, save_partial)
        _write(cache, args.cache)
        ctx.log(f"cache: {args.cache}")
    fits = cache["fits"]
    f3 = fits["approach3"]
    checks = [check_at_most(f"run {r['shape']} at C={r['budget']:.0e}: |tokens / planned - 1|", TOKENS_TOLERANCE,
                            abs(r["D"] / r["D_planned"] - 1)) for r in runs]
    checks.append(check_exact("Approach 3 fit converged (re-optimising does not move it)", 1, int(f3["converged"]), ""))
    checks.append(check_at_most("Approach 3 RMS residual in log loss", RMS_RESIDUAL, f3["rms_log_residual"]))
    ctx.log(f"Approach 3: alpha={f3['alpha']:.3f} beta={f3['beta']:.3f} a={f3['a']:.3f} E={f3['E']:.3f}")
    return {"config": {"grid": cache["grid"], "cache": str(args.cache), "rerun": args.rerun,
                       "runs": len(runs)}, "fits": fits, "checks": checks}


def _check_args(args, world_size: int | None = None) -> None:
    if args.fit_top_k < 0:
        raise ValueError(f"--fit-top-k must be >= 0, got {args.fit_top_k}")
    if args.bootstrap < 0 or args.bootstrap == 1:
        raise ValueError(f"--bootstrap must be 0 or at least 2, got {args.bootstrap}")
    if args.resume and not args.rerun:
        raise ValueError("--resume keeps the runs of an interrupted --rerun: give it with --rerun")
    defaults = build_parser().parse_args([])
    fit_options = [f"--{k.replace('_', '-')}" for k in ("fit_top_k", "bootstrap", "seed")
                   if getattr(args, k) != getattr(defaults, k)]
    if not args.rerun:
        cache = load_cache(args.cache)  # there, and a grid: one line now, not a traceback in a rank
        if fit_options and not args.refit and cache.get("fits"):
            raise ValueError(f"{' and '.join(fit_options)} change the fits, which are read from the cache: add --refit "
                             "to fit the cached runs again (or --rerun to train them again)")
    if args.rerun or args.refit:
        _check_cache_writable(args)


def _check_cache_writable(args) -> None:
    """One line, before any rank trains, where ``--cache`` cannot take what ``--rerun`` or
    ``--refit`` writes: a folder, a file that is no cached grid, an unwritable folder, or the
    course's own full grid replaced by a smaller one."""
    path = Path(args.cache)
    if str(args.cache) == "" or path.is_dir():
        raise ValueError(f"--cache {args.cache}: is a folder; give a file name, e.g. {path / 'grid.json'}")
    if args.rerun and args.grid != "full" and path.resolve() == Path(CACHE).resolve():
        raise ValueError(f"--grid {args.grid} would replace the course's full grid in {CACHE.name}: "
                         "give --cache PATH for a grid of your own")
    if path.exists():
        try:
            load_cache(path)
        except ValueError:
            raise ValueError(f"--cache {args.cache}: exists and is not a cached grid; refusing to overwrite it") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise ValueError(f"--cache {args.cache}: cannot write in {path.parent}/ ({exc.strerror or exc})") from None


def main(argv=None) -> int:
    import sys

    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        _check_args(args)  # before any rank starts: one line, not a rank's traceback
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return launch.main(LAB, parser, worker, argv, _check_args)


if __name__ == "__main__":
    raise SystemExit(main())
