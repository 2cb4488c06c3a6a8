"""One command that runs every lab on the GPUs of this machine and writes one summary.

    python -m labs.gpu_check [--out DIR]        (or: make gpu-check)

With ``N >= 1`` CUDA GPUs it runs each lab of :data:`LABS` with NCCL at world size
``min(N, 2)`` and at 1, in the precision ``--dtype auto`` picks for the GPU, and writes
``DIR/summary.json`` and ``DIR/summary.md``: the device, the torch, CUDA and NCCL versions,
and for every run its checks (predicted, measured, ok), tokens/s, MFU and peak memory. Each
run is the lab's own command line (``python -m labs.<lab> ...``), so a failing row can be
rerun by hand. Without a GPU it says so and exits 0, having run nothing.

Adding a lab is one entry in :data:`LABS`: ``LabRun("tensor_parallel", ("--steps", "10"))``.
A lab whose report holds ``metrics`` (``tokens_per_s``, ``mfu``, ``peak_allocated_gib``) or
``side_by_side`` (the same, per strategy) has them in the table without further code.

Exit status: 0 when every run passed every check (or there is no GPU), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .launch import REPO_ROOT

__all__ = ["LabRun", "LABS", "world_sizes", "figures", "markdown", "main"]


@dataclass(frozen=True)
class LabRun:
    """One lab in the GPU check: ``python -m labs.<lab> <args>`` at each world size."""

    lab: str
    args: tuple = ()
    name: str = ""
    timeout_s: float = 150.0

    @property
    def label(self) -> str:
        return self.name or self.lab


#: The registry: every lab the GPU check runs, in order. Sized so that the whole check takes
#: a few minutes on one T4 and far less on an H100.
LABS = [
    LabRun("collectives", ("--max-bytes", str(1 << 26), "--iters", "10")),
    LabRun("ddp", ("--steps", "20")),
    LabRun("ddp", ("--steps", "20", "--allreduce", "builtin"), name="ddp-builtin"),
    LabRun("fsdp", ("--steps", "10")),
    # A model large enough for the GPU to have work to do: MFU and peak memory mean something.
    LabRun("fsdp", ("--steps", "10", "--d-model", "512", "--n-layer", "6", "--n-head", "8", "--block-size", "256",
                    "--batch-per-rank", "8"), name="fsdp-20M"),
    LabRun("tensor_parallel"),
    LabRun("pipeline_parallel"),
    LabRun("grid3d"),
]


def world_sizes(gpus: int) -> list[int]:
    """``min(gpus, 2)`` and 1, without repeats; nothing without a GPU."""
    if gpus < 1:
        return []
    return sorted({min(gpus, 2), 1}, reverse=True)


def figures(report: dict) -> list[dict]:
    """The throughput rows of a lab's report: ``{what, tokens_per_s, mfu, peak_allocated_gib}``
    from ``side_by_side`` (one per strategy) or ``metrics``; the best bus bandwidth per op
    from a collectives ``sweep``."""
    rows = []
    for strategy, row in (report.get("side_by_side") or {}).items():
        rows.append({"what": strategy, "tokens_per_s": row.get("tokens_per_s"), "mfu": row.get("mfu"),
                     "mfu_note": row.get("mfu_note"), "peak_allocated_gib": row.get("peak_allocated_gib")})
    metrics = report.get("metrics") or {}
    if not rows and "tokens_per_s" in metrics:
        rows.append({"what": "", "tokens_per_s": metrics.get("tokens_per_s"), "mfu": metrics.get("mfu"),
                     "mfu_note": metrics.get("mfu_note"), "peak_allocated_gib": metrics.get("peak_allocated_gib")})
    best = {}
    for row in report.get("sweep") or []:
        if row["busbw"] > best.get(row["op"], {"busbw": -1})["busbw"]:
            best[row["op"]] = row
    for op, row in best.items():
        rows.append({"what": f"{op} busbw at {row['bytes']:,} bytes", "busbw_gb_s": row["busbw"] / 1e9})
    return rows


def _fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def markdown(summary: dict) -> str:
    """The summary as Markdown: the environment, then one table of checks and one of figures."""
    env = summary["environment"]
    lines = [f"# GPU check: {env['device']} x {env['gpu_count']}", "",
             f"torch {env['torch']}, CUDA {env['cuda']}, NCCL {env['nccl']}; {summary['started_utc']}; "
             f"{summary['seconds']:.0f} s in all.", "",
             "| lab | ranks | dtype | check | predicted | measured | ok |", "|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        if run.get("error"):
            lines.append(f"| {run['label']} | {run['world_size']} | - | run failed: {run['error']} | - | - | NO |")
            continue
        for c in run["checks"]:
            lines.append(f"| {run['label']} | {run['world_size']} | {run['dtype']} | {c['name']} | "
                         f"{_fmt(c['predicted'], ',.6g')} | {_fmt(c['measured'], ',.6g')} | "
                         f"{'yes' if c['ok'] else 'NO'} |")
    lines += ["", "| lab | ranks | what | tokens/s | MFU | peak allocated (GiB) | bus bandwidth (GB/s) |",
              "|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        for f in run.get("figures", []):
            mfu = f"{100 * f['mfu']:.3g}%" if f.get("mfu") is not None else (f.get("mfu_note") or "-")
            lines.append(f"| {run['label']} | {run['world_size']} | {f['what']} | {_fmt(f.get('tokens_per_s'), ',.0f')} | "
                         f"{mfu if 'busbw_gb_s' not in f else '-'} | {_fmt(f.get('peak_allocated_gib'))} | "
                         f"{_fmt(f.get('busbw_gb_s'))} |")
    return "\n".join(lines) + "\n"


def _environment(torch) -> dict:
    nccl = None
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - a build without NCCL still gets a summary
        pass
    return {"device": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
            "capability": list(torch.cuda.get_device_capability(0)), "torch": torch.__version__,
            "cuda": torch.version.cuda or torch.version.hip, "nccl": nccl}


def _run_one(entry: LabRun, n: int, out: Path, backend: str = "nccl") -> dict:
    report = out / f"{entry.label}-{n}.json"
    cmd = [sys.executable, "-m", f"labs.{entry.lab}", "--nproc", str(n), "--backend", backend,
           "--report", str(report), *entry.args]
    print(f"$ python -m labs.{entry.lab} " + " ".join(cmd[3:]), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    row = {"label": entry.label, "lab": entry.lab, "world_size": n, "command": " ".join(cmd[1:])}
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=entry.timeout_s)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"timed out after {entry.timeout_s:g} s", "seconds": entry.timeout_s}
    row["seconds"] = time.monotonic() - start
    if proc.returncode not in (0, 3) or not report.exists():
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return {**row, "error": f"exit status {proc.returncode}: {last[-1] if last else ''}"}
    data = json.loads(report.read_text(encoding="utf-8"))
    dtype = data.get("config", {}).get("dtype", "fp32")
    return {**row, "dtype": str(dtype).replace("torch.float32", "fp32").replace("torch.bfloat16", "bf16")
            .replace("torch.float16", "fp16"), "backend": data["backend"], "device": data["device"],
            "checks": [{k: c[k] for k in ("name", "predicted", "measured", "ratio", "ok")} for c in data["checks"]],
            "figures": figures(data), "ok": proc.returncode == 0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/gpu-check", help="folder for the reports and the summary")
    parser.add_argument("--only", nargs="*", default=None, help="run only these labs (labels in LABS)")
    parser.add_argument("--cpu-rehearsal", action="store_true",
                        help="run the same pipeline on CPU processes with gloo at world sizes 2 and 1, to test "
                             "it where there is no GPU (the figures are then not GPU figures)")
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {e.label for e in LABS}
    if unknown:
        parser.error(f"--only: no such lab in labs.gpu_check.LABS: {', '.join(sorted(unknown))}")
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0 and not args.cpu_rehearsal:
        print(f"no GPU: torch {torch.__version__} sees no CUDA device, so nothing was run. "
              "On a machine with a GPU this runs every lab with NCCL and writes a summary.", flush=True)
        return 0
    from .launch import check_report_path

    out = Path(args.out)
    check_report_path(out / "summary.json")
    entries = [e for e in LABS if args.only is None or e.label in args.only]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    start = time.monotonic()
    if args.cpu_rehearsal:
        runs = [_run_one(e, n, out, backend="gloo") for e in entries for n in world_sizes(2)]
        environment = {"device": "cpu (rehearsal with gloo, not GPU figures)", "gpu_count": 0,
                       "torch": torch.__version__, "cuda": None, "nccl": None}
    else:
        runs = [_run_one(e, n, out) for e in entries for n in world_sizes(gpus)]
        environment = _environment(torch)
    summary = {"environment": environment, "started_utc": started, "seconds": time.monotonic() - start,
               "runs": runs, "ok": all(r.get("ok") for r in runs)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(markdown(summary), encoding="utf-8")
    print(markdown(summary), flush=True)
    print(f"summary: {out / 'summary.json'} and {out / 'summary.md'}", flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
