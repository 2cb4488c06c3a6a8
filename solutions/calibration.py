"""Calibrating the step-time model on the course's table of published runs, and checking it
run by run: the fitted constants, every run's error, and its leave-one-out error.

The model (:mod:`solutions.steptime`) has five fitted constants, shared by every GPU, every
precision and every shape (:class:`solutions.steptime.Calibration`): a multiplier on a matrix
product's counted memory traffic, charged on top of its FLOPs (what its kernel does not hide
behind them), FlashAttention's share of the BF16
matmul ceiling, the network's share of its line rate, a fixed cost per local expert and MoE
layer (routing, permutation, one grouped GEMM's launch; a fused grouped MLP has none, and
no row of the course's table runs one), and the share of overlapped
communication charged back to compute (NCCL's kernels take SMs from the kernels they overlap).
The counted elementwise bytes move at the HBM's bandwidth (a multiplier of 1, not fitted).
Everything else is a datasheet figure, a measured matmul ceiling or a count. :func:`fit`
chooses the five to minimise the squared log-error of the predicted tokens/s per GPU over the runs given, :data:`solutions.facts.PUBLISHED_RUNS` by
default; :func:`leave_one_out` refits without each run in turn and predicts it, which is
the honest error of the model on a run it has not seen.

:func:`heldout` predicts the rows of the same tables that the fit never sees
(:data:`solutions.facts.HELDOUT_RUNS`).

References: narayanan2021megatron, dubey2024llama3, nvidia2025megatronbridge, liu2024deepseekv3.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from . import facts, hardware, steptime
from ._validate import terse_argparse_errors

__all__ = ["BOUNDS", "Row", "run_architecture", "runs_like", "predict", "residuals", "fit", "leave_one_out", "table", "heldout", "summary", "format_rows",
           "main"]

#: The range each fitted constant may take: (gemm_traffic, attention, network, expert_s, contention).
#: The multiplier on counted elementwise bytes is not fitted: the bytes are counted, and
#: they move at the HBM's bandwidth (1).
ELEMENTWISE = 1.0
BOUNDS = ((0.0, 8.0), (0.15, 1.0), (0.2, 1.0), (0.0, 2e-3), (0.0, 0.5))
_START = (2.0, 0.45, 0.6, 3e-4, 0.1)
_SCALE = np.array([0.5, 0.1, 0.1, 1e-4, 0.05])


def _cal(x, names=()) -> steptime.Calibration:
    return steptime.Calibration(float(x[0]), ELEMENTWISE, float(x[1]), float(x[2]), tuple(names), 0.0, float(x[3]),
                                float(x[4]))


def predict(run, calibration) -> float:
    """Predicted tokens/s per GPU of ``run`` under ``calibration``."""
    return steptime.predict_run(run, calibration)[0].tokens_per_s_per_gpu


def residuals(x, runs) -> np.ndarray:
    cal = _cal(x)
    return np.array([math.log(predict(r, cal) / steptime.published_tokens_per_s(r)) for r in runs])


def fit(runs=None, start=None) -> steptime.Calibration:
    """The constants minimising the squared log-error of tokens/s per GPU over ``runs``."""
    from scipy.optimize import least_squares

    runs = tuple(facts.PUBLISHED_RUNS if runs is None else runs)
    lo, hi = zip(*BOUNDS)
    x0 = np.clip(np.array(start if start is not None else _START, dtype=float), lo, hi)
    res = least_squares(residuals, x0, bounds=(lo, hi), args=(runs,), x_scale=_SCALE,
                        diff_step=1e-3, xtol=1e-6, ftol=1e-8)
    return _cal(res.x, tuple(r.name for r in runs))


@dataclass(frozen=True)
class Row:
    """One run: published and predicted tokens/s per GPU, the error, and the error when the
    constants are fitted without it."""

    name: str
    published: float
    predicted: float
    loo_predicted: float
    fits: bool

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1

    @property
    def loo_error(self) -> float:
        return self.loo_predicted / self.published - 1


def leave_one_out(runs=None, calibration=None) -> dict:
    """``{run name: predicted tokens/s per GPU with the constants refitted without it}``."""
    runs = tuple(facts.PUBLISHED_RUNS if runs is None else runs)
    full = calibration or fit(runs)
    x0 = (full.gemm_traffic, full.attention, full.network, full.expert_s, full.contention)
    out = {}
    for i, run in enumerate(runs):
        cal = fit(runs[:i] + runs[i + 1:], start=x0)
        out[run.name] = predict(run, cal)
    return out


def table(runs=None, calibration=None, loo=None) -> list:
    """:class:`Row` per run (``loo`` from :func:`leave_one_out`, computed when not given)."""
    runs = tuple(facts.PUBLISHED_RUNS if runs is None else runs)
    cal = calibration or steptime.CALIBRATION
    loo = loo if loo is not None else leave_one_out(runs, cal)
    rows = []
    for run in runs:
        st = steptime.predict_run(run, cal)[0]
        rows.append(Row(run.name, steptime.published_tokens_per_s(run), st.tokens_per_s_per_gpu, loo[run.name],
                        st.fits))
    return rows


def heldout(runs=None, calibration=None) -> list:
    """:class:`Row` per held-out run (:data:`solutions.facts.HELDOUT_RUNS` by default), under
    the constants fitted on the course's table: runs the model has never seen, so the error
    and the "leave-one-out" error are the same."""
    runs = tuple(facts.HELDOUT_RUNS if runs is None else runs)
    cal = calibration or steptime.CALIBRATION
    rows = []
    for run in runs:
        st = steptime.predict_run(run, cal)[0]
        rows.append(Row(run.name, steptime.published_tokens_per_s(run), st.tokens_per_s_per_gpu,
                        st.tokens_per_s_per_gpu, st.fits))
    return rows


#: The sets of published runs, as :func:`runs_like` names them: the course's table (which the
#: constants are fitted on), the held-out rows and other software stacks' rows (never fitted).
_SET_LABELS = (("table", "PUBLISHED_RUNS"), ("held out", "HELDOUT_RUNS"), ("other stack", "OTHER_STACK_RUNS"))


def run_architecture(run) -> str | None:
    """The named architecture a published run trained (its ``arch``, or the name it starts with)."""
    if run.arch:
        return run.arch
    return next((k for k in facts.ARCHITECTURES if run.name.startswith((k + " ", k + ","))), None)


def runs_like(gpu, arch=None, moe=False, precision="bf16", limit=6) -> tuple:
    """``(what matched, [(set, Row), ...])``: the published runs nearest a plan, each predicted
    under the shipped constants, so that a plan can say how far the model has been from runs
    like it. The first of these that has runs wins: the same architecture on the same GPU; the
    same architecture; the same GPU, dense or MoE alike, in the same precision; the same GPU,
    dense or MoE alike; the same GPU, the other kind (a GPU's runs say something of it even
    when they trained another kind of model). At most ``limit`` runs: the latest listed, those in
    ``precision`` first; where that leaves some out, what matched says how many of how many."""
    gpu_name = hardware.find_gpu(gpu).name
    runs = [(label, r) for label, attr in _SET_LABELS for r in getattr(facts, attr)]

    def same_gpu(r):
        return hardware.find_gpu(r.gpu).name == gpu_name

    def is_moe(r):
        return r.arch in facts.MOE_ARCHITECTURES

    kind = "MoE" if moe else "dense"
    tiers = [(f"{arch} on the {gpu_name}", lambda r: run_architecture(r) == arch and same_gpu(r)),
             (f"{arch} on any GPU", lambda r: run_architecture(r) == arch)] if arch is not None else []
    tiers += [(f"{kind} models in {precision.upper()} on the {gpu_name}",
               lambda r: same_gpu(r) and is_moe(r) == moe and r.precision == precision),
              (f"{kind} models on the {gpu_name}", lambda r: same_gpu(r) and is_moe(r) == moe),
              (f"{'dense' if moe else 'MoE'} models on the {gpu_name}, its only published runs", same_gpu)]
    for what, match in tiers:
        found = [(label, r) for label, r in runs if match(r)]
        chosen = ([x for x in found if x[1].precision != precision]
                  + [x for x in found if x[1].precision == precision])[-limit:]
        if chosen:
            if len(chosen) < len(found):
                what += f" (the latest {len(chosen)} of {len(found)}, preferring {precision.upper()} ones)"
            return what, [(label, heldout([r])[0]) for label, r in chosen]
    return "no published run", []


def summary(rows) -> dict:
    """Median and worst absolute error, and the same for the leave-one-out errors."""
    e = [abs(r.error) for r in rows]
    l = [abs(r.loo_error) for r in rows]
    return {"runs": len(rows), "median": statistics.median(e), "worst": max(e), "loo_median": statistics.median(l),
            "loo_worst": max(l), "within_20": sum(x <= 0.2 for x in e), "oom": [r.name for r in rows if not r.fits]}


SETS = {"table": "PUBLISHED_RUNS", "heldout": "HELDOUT_RUNS", "other-stacks": "OTHER_STACK_RUNS"}


def format_rows(rows, cal, title) -> str:
    """The constants, one line per run (published, predicted, error, leave-one-out error) and
    the summary, as printed by ``python -m solutions.calibration``."""
    lines = [title,
             f"constants (fitted on the course's table): gemm traffic x{cal.gemm_traffic:.3f}, attention at "
             f"{cal.attention:.1%} of the matmul ceiling, network at {cal.network:.1%} of line rate, "
             f"{cal.expert_s * 1e6:.0f} us per local expert and MoE layer, contention {cal.contention:.3f}",
             f"{'run':56s} {'published':>10s} {'predicted':>10s} {'error':>8s} {'left out':>9s}"]
    for r in rows:
        flag = "" if r.fits else "  OUT OF MEMORY"
        lines.append(f"{r.name:56s} {r.published:10,.1f} {r.predicted:10,.1f} {r.error:+8.1%} {r.loo_error:+9.1%}{flag}")
    s = summary(rows)
    lines.append(f"{s['runs']} runs: median |error| {s['median']:.1%} (left out {s['loo_median']:.1%}), worst "
                 f"{s['worst']:.1%}, {s['within_20']} within 20%, {len(s['oom'])} called out of memory")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(prog="python -m solutions.calibration",
                                     description="The step-time model against published runs: the fitted constants, "
                                                 "every run's error and its leave-one-out error.")
    terse_argparse_errors(parser)
    parser.add_argument("--set", choices=list(SETS), default="table",
                        help="table: the course's calibration set (errors and leave-one-out errors); heldout: the "
                             "rows the fit never sees; other-stacks: rows of other software stacks, never fitted")
    parser.add_argument("--json", action="store_true", help="print the rows and the summary as one JSON object")
    args = parser.parse_args(argv)
    cal = steptime.CALIBRATION
    runs = getattr(facts, SETS[args.set])
    rows = table(runs, cal) if args.set == "table" else heldout(runs, cal)
    if args.json:
        out = {"set": args.set, "constants": {"gemm_traffic": cal.gemm_traffic, "attention": cal.attention,
                                              "network": cal.network, "expert_s": cal.expert_s,
                                              "contention": cal.contention},
               "rows": [{"name": r.name, "published": r.published, "predicted": r.predicted, "error": r.error,
                         "loo_error": r.loo_error, "fits": r.fits} for r in rows],
               "summary": summary(rows)}
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        title = {"table": "the course's table (fitted; 'left out': refitted without the run)",
                 "heldout": "held-out rows (never fitted; 'left out' is the same error)",
                 "other-stacks": "rows of other software stacks (never fitted; 'left out' is the same error)"}[args.set]
        print(format_rows(rows, cal, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
