"""One command that runs every lab on the GPUs of this machine and writes one summary.

    python -m labs.gpu_check [--out DIR] [--budget SECONDS] [--only LABEL ...]

It needs only torch (a CUDA build, 2.x), numpy and scipy on the path, and Python 3.10 or
newer: no course virtual environment, no network, no build stack, so it runs with the
machine's own torch on Colab, Kaggle, a cluster node or a bare GPU machine (the README of
``labs/reference/`` gives the one command for each).

With ``N >= 1`` CUDA GPUs it runs each lab of :data:`LABS` with NCCL at world size
``min(N, 2)`` and at 1, prints each row as it ends, keeps each run's log and JSON report in
``DIR/runs/``, and rewrites ``DIR/summary.json`` and ``DIR/summary.md`` after every row, so
that a check stopped half-way (or whose labs fail) still leaves its summary. It stops itself
within ``--budget`` seconds: a row whose estimate no longer fits is skipped and listed as such.
Each lab is given a ``--timeout`` shorter than the time the check waits for it, so that a hung
lab (the usual way NCCL fails on a new machine) is stopped by its own launcher, whose report
(every rank's stack and last lines) lands in the row's log.

The summary says what the runs did not exercise: on one GPU every run has world size 1, so
no byte crosses between GPUs and every traffic check is 0 = 0.

Without a GPU it says so and exits 0, having run nothing, unless the driver reports GPUs that
torch cannot use (a CPU build of torch on a GPU machine, a container without the driver's
libraries): that is an error, exit 1. ``--cpu-rehearsal`` runs the same pipeline on CPU
processes with gloo (world sizes 2 and 1; the rows marked ``gpu_only`` are skipped), to test it
where there is no GPU.

Adding a lab is one entry in :data:`LABS`: ``LabRun("tensor_parallel", ("--steps", "10"))``.
A lab whose report holds ``metrics`` (``tokens_per_s``, ``mfu``, ``peak_allocated_gib``) or
``side_by_side`` (the same, per strategy) has them in the table without further code.

Exit status: 0 when every run passed every check (or there is no GPU), 1 when a run failed, a
check failed or the GPUs cannot be used, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from solutions._format import plural

from .launch import REPO_ROOT, take_over_interrupts

__all__ = ["LabRun", "LABS", "world_sizes", "figures", "markdown", "not_exercised", "driver_gpus",
           "usable_gpus", "main"]

#: Seconds the check waits for a lab beyond the lab's own ``--timeout``: time for the lab's
#: launcher to ask its hung ranks for their stacks, kill them and write its report.
KILL_MARGIN_S = 20.0


@dataclass(frozen=True)
class LabRun:
    """One lab in the GPU check: ``python -m labs.<lab> <args>`` at each world size.

    ``estimate_s`` is the expected wall time of one run on one H100-class GPU, start-up
    (torch import, CUDA context, NCCL communicator) included: an estimate, used to skip what
    no longer fits in ``--budget``. ``timeout_s`` is passed to the lab as ``--timeout``.
    ``gpu_only`` rows are left out of ``--cpu-rehearsal`` (too large for a CPU, or a path, like
    fp16 with a gradient scaler, that only means something on a GPU). ``world_sizes`` limits the
    row to those world sizes (default: every one the check runs)."""

    lab: str
    args: tuple = ()
    name: str = ""
    timeout_s: float = 150.0
    estimate_s: float = 15.0
    gpu_only: bool = False
    world_sizes: tuple = ()

    @property
    def label(self) -> str:
        return self.name or self.lab


#: The registry: every lab the GPU check runs, in order, with the estimate per run on one
#: H100-class GPU (sum at world sizes 2 and 1: about 4.5 minutes; see labs/reference/README.md).
LABS = [
    LabRun("collectives", ("--max-bytes", str(1 << 26), "--iters", "10"), estimate_s=15),
    LabRun("ddp", ("--steps", "20"), estimate_s=12),
    LabRun("ddp", ("--steps", "20", "--allreduce", "builtin"), name="ddp-builtin", estimate_s=12),
    # The T4's path: fp16 with a gradient scaler, in DDP and in FSDP2.
    LabRun("ddp", ("--steps", "20", "--dtype", "fp16"), name="ddp-fp16", estimate_s=12, gpu_only=True),
    LabRun("fsdp", ("--steps", "10"), estimate_s=15),
    LabRun("fsdp", ("--steps", "10", "--dtype", "fp16"), name="fsdp-fp16", estimate_s=15, gpu_only=True),
    # A model large enough for the GPU to have work to do: MFU and peak memory mean something.
    LabRun("fsdp", ("--steps", "10", "--d-model", "512", "--n-layer", "6", "--n-head", "8", "--block-size", "256",
                    "--batch-per-rank", "8"), name="fsdp-20M", estimate_s=18, gpu_only=True),
    LabRun("fsdp", ("--steps", "8", "--d-model", "1024", "--n-layer", "12", "--n-head", "16", "--block-size", "512",
                    "--batch-per-rank", "16", "--no-reference"), name="fsdp-150M", estimate_s=30, gpu_only=True,
           timeout_s=240),
    LabRun("tensor_parallel", estimate_s=15),
    LabRun("pipeline_parallel", estimate_s=25),
    LabRun("expert_parallel", estimate_s=15),
    LabRun("grid3d", estimate_s=12),
    # Lab 6 trains its smallest grid afresh (the cached full grid took minutes on CPU).
    LabRun("scaling_law", ("--rerun", "--grid", "tiny", "--fit-top-k", "10", "--bootstrap", "10"),
           name="scaling_law-tiny", estimate_s=30, timeout_s=300, world_sizes=(1,)),
]


def world_sizes(gpus: int) -> list[int]:
    """``min(gpus, 2)`` and 1, without repeats; nothing without a GPU."""
    if gpus < 1:
        return []
    return sorted({min(gpus, 2), 1}, reverse=True)


# --------------------------------------------------------------------------- the machine


def driver_gpus() -> tuple[int, str]:
    """``(count, how)``: the NVIDIA GPUs the driver reports, without torch. ``nvidia-smi -L``
    on the PATH first, else the driver's ``/proc/driver/nvidia/gpus``; ``(0, ...)`` if neither
    shows one."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
            count = sum(line.startswith("GPU ") for line in out.splitlines())
            if count:
                return count, "nvidia-smi -L"
        except (OSError, subprocess.SubprocessError):
            pass
    proc = Path("/proc/driver/nvidia/gpus")
    try:
        count = sum(1 for _ in proc.iterdir())
    except OSError:
        count = 0
    return count, str(proc) if count else "no NVIDIA driver found"


def usable_gpus(torch) -> tuple[int, str]:
    """``(count, problem)``: the CUDA GPUs torch can use, and why none when that is 0."""
    if not (torch.version.cuda or torch.version.hip):
        return 0, f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)"
    try:
        count = torch.cuda.device_count()
        if count:
            torch.cuda.init()
        return count, "" if count else "torch.cuda.device_count() is 0"
    except Exception as exc:  # noqa: BLE001 - CUDA that cannot start: say why, in one line
        return 0, f"CUDA cannot start: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"


def _environment(torch, gpus: int) -> dict:
    """The device and versions, each read on its own: a CUDA that cannot start loses one field,
    never the summary."""
    env = {"gpu_count": gpus, "torch": torch.__version__, "cuda": torch.version.cuda or torch.version.hip,
           "python": sys.version.split()[0]}

    def read(key, fn):
        try:
            env[key] = fn()
        except Exception as exc:  # noqa: BLE001
            env[key] = None
            env.setdefault("errors", []).append(f"{key}: {exc}")

    read("device", lambda: torch.cuda.get_device_name(0))
    read("capability", lambda: list(torch.cuda.get_device_capability(0)))

    def nccl():
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)

    read("nccl", nccl)
    return env


# --------------------------------------------------------------------------- the summary


def figures(report: dict) -> list[dict]:
    """The throughput rows of a lab's report: ``{what, tokens_per_s, mfu, peak_allocated_gib}``
    from ``side_by_side`` (one per strategy) or ``metrics``; the best bus bandwidth per op
    from a collectives ``sweep`` (none at world size 1, where nothing crosses between ranks)."""
    rows = []
    keys = ("tokens_per_s", "mfu", "mfu_note", "peak_allocated_gib", "baseline_allocated_gib")
    for strategy, row in (report.get("side_by_side") or {}).items():
        rows.append({"what": strategy, **{k: row.get(k) for k in keys}})
    metrics = report.get("metrics") or {}
    if not rows and "tokens_per_s" in metrics:
        rows.append({"what": "", **{k: metrics.get(k) for k in keys}})
    if report.get("world_size", 2) > 1:
        best = {}
        for row in report.get("sweep") or []:
            if row["busbw"] > best.get(row["op"], {"busbw": -1})["busbw"]:
                best[row["op"]] = row
        for op, row in best.items():
            rows.append({"what": f"{op} busbw at {row['bytes']:,} bytes", "busbw_gb_s": row["busbw"] / 1e9})
    return rows


def not_exercised(summary: dict) -> list[str]:
    """What the runs of ``summary`` did not test, in words (empty when they tested it all)."""
    runs = summary["runs"]
    ran = [r for r in runs if not r.get("skipped")]
    gaps = []
    if ran and all(r["world_size"] == 1 for r in ran):
        gaps.append("communication between GPUs: every run had world size 1 (one GPU), so no collective moved a "
                    "byte between ranks, every traffic check compared 0 with 0, and no bus bandwidth was measured")
    for r in runs:
        if r.get("skipped"):
            gaps.append(f"{r['label']} at world size {r['world_size']}: skipped ({r['skipped']})")
    if summary["environment"].get("gpu_count", 0) == 0:
        gaps.append("the GPU itself: a CPU rehearsal with gloo (the rows marked gpu_only were left out)")
    return gaps


def _fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def markdown(summary: dict) -> str:
    """The summary as Markdown: the environment, then one table of checks, one of figures, and
    what was not exercised."""
    env = summary["environment"]
    lines = [f"# GPU check: {env.get('device') or 'unknown device'} x {env.get('gpu_count', 0)}", "",
             f"torch {env.get('torch')}, CUDA {env.get('cuda')}, NCCL {env.get('nccl')}; {summary['started_utc']}; "
             f"{summary['seconds']:.0f} s in all.", ""]
    if summary.get("status"):
        lines += [f"**{summary['status']}**", ""]
    lines += ["| lab | ranks | dtype | check | predicted | measured | ok |", "|---|---|---|---|---|---|---|"]
    for run in summary["runs"]:
        if run.get("skipped"):
            lines.append(f"| {run['label']} | {run['world_size']} | - | skipped: {run['skipped']} | - | - | - |")
            continue
        if run.get("error"):
            lines.append(f"| {run['label']} | {run['world_size']} | - | run failed: {run['error']} (log: "
                         f"{run.get('log', '-')}) | - | - | NO |")
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
    gaps = not_exercised(summary)
    if gaps:
        lines += ["", "## Not exercised", ""] + [f"- {g}" for g in gaps]
    return "\n".join(lines) + "\n"


def _write(out: Path, summary: dict) -> None:
    for name, text in (("summary.json", json.dumps(summary, indent=2) + "\n"), ("summary.md", markdown(summary))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)  # a reader never sees half a summary


# --------------------------------------------------------------------------- one run


def _dtype(data: dict) -> str:
    dtype = str(data.get("config", {}).get("dtype", "fp32"))
    return dtype.replace("torch.float32", "fp32").replace("torch.bfloat16", "bf16").replace("torch.float16", "fp16")


def _last_lines(path: Path, n: int = 8) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("error:")]
    if errors:  # the lab's own one-line verdict
        return errors[0][len("error:"):].strip()
    raised = [ln for ln in lines if re.match(r"[\w.]+(Error|Exception|Interrupt): ", ln)]
    return raised[-1] if raised else " | ".join(lines[-n:])[-400:]


def _run_one(entry: LabRun, n: int, out: Path, backend: str, timeout_s: float) -> dict:
    """Run one lab at world size ``n``; its output goes to ``out/runs/<label>-<n>.log``."""
    runs = out / "runs"
    report, log = runs / f"{entry.label}-{n}.json", runs / f"{entry.label}-{n}.log"
    cmd = [sys.executable, "-m", f"labs.{entry.lab}", "--nproc", str(n), "--backend", backend,
           "--report", str(report), "--timeout", f"{timeout_s:g}", *entry.args]
    if entry.lab == "scaling_law":  # never overwrite the course's cached grid
        cmd += ["--cache", str(runs / f"{entry.label}-{n}-grid.json")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    row = {"label": entry.label, "lab": entry.lab, "world_size": n, "command": " ".join(cmd[1:]),
           "log": str(log.relative_to(out))}
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ python " + " ".join(cmd[1:]) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s + KILL_MARGIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {**row, "seconds": time.monotonic() - start,
                    "error": f"no answer {timeout_s + KILL_MARGIN_S:g} s after start (killed)"}
        finally:
            if proc.poll() is None:  # Ctrl-C: the lab's ranks die with their launcher
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    row["seconds"] = time.monotonic() - start
    if proc.returncode not in (0, 3) or not report.exists():
        return {**row, "error": f"exit status {proc.returncode}: {_last_lines(log)}"}
    data = json.loads(report.read_text(encoding="utf-8"))
    return {**row, "dtype": _dtype(data), "backend": data["backend"], "device": data["device"],
            "checks": [{k: c[k] for k in ("name", "predicted", "measured", "ratio", "ok")} for c in data["checks"]],
            "figures": figures(data), "ok": proc.returncode == 0, "report": str(report.relative_to(out))}


def _say(start: float, text: str) -> None:
    print(f"[{time.monotonic() - start:4.0f}s] {text}", flush=True)


# --------------------------------------------------------------------------- the command


def _parse(argv):
    from solutions._validate import terse_argparse_errors

    parser = terse_argparse_errors(
        argparse.ArgumentParser(prog="python -m labs.gpu_check", description=__doc__.splitlines()[0]))
    parser.add_argument("--out", default="reports/gpu-check", help="folder for the summary and runs/ (logs, reports)")
    parser.add_argument("--only", nargs="+", default=None, metavar="LABEL", help="run only these rows of LABS")
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds the whole check may take; rows that no longer fit are skipped (default 540)")
    parser.add_argument("--cpu-rehearsal", action="store_true",
                        help="run the same pipeline on CPU processes with gloo at world sizes 2 and 1, to test it "
                             "where there is no GPU (the figures are then not GPU figures)")
    args = parser.parse_args(argv)
    labels = [e.label for e in LABS]
    unknown = sorted(set(args.only or ()) - set(labels))
    if unknown:
        parser.error(f"--only: no such row in labs.gpu_check.LABS: {', '.join(unknown)} (rows: {', '.join(labels)})")
    if not 0 < args.budget < float("inf"):
        parser.error(f"--budget must be > 0 seconds, got {args.budget:g}")
    return parser, args


def _writable(out: Path) -> str | None:
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return f"--out {out}: cannot write there ({exc.strerror or exc})"
    return None


def main(argv=None) -> int:
    take_over_interrupts()  # Ctrl-C (or SIGTERM) stops the check and still writes its summary
    parser, args = _parse(argv)
    try:
        import torch
    except ImportError:
        print("error: torch is not installed: the GPU check needs torch (a CUDA build), numpy and scipy", file=sys.stderr)
        return 1
    gpus, problem = usable_gpus(torch)
    if gpus == 0 and not args.cpu_rehearsal:
        seen, how = driver_gpus()
        if seen:
            print(f"error: the driver reports {plural(seen, 'NVIDIA GPU')} ({how}) but torch cannot use {'it' if seen == 1 else 'them'}: {problem}; "
                  "install a CUDA build of torch (or run where the driver's libraries are visible)", file=sys.stderr)
            return 1
        print(f"no GPU: torch {torch.__version__} sees no CUDA device, so nothing was run. "
              "On a machine with a GPU this runs every lab with NCCL and writes a summary.", flush=True)
        return 0
    out = Path(args.out)
    problem = _writable(out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    start = time.monotonic()
    if args.cpu_rehearsal:
        backend, sizes = "gloo", world_sizes(2)
        environment = {"device": "cpu (rehearsal with gloo, not GPU figures)", "gpu_count": 0,
                       "torch": torch.__version__, "cuda": None, "nccl": None, "python": sys.version.split()[0]}
    else:
        backend, sizes = "nccl", world_sizes(gpus)
        environment = _environment(torch, gpus)
    _say(start, f"{environment.get('device')} x {gpus}, torch {environment['torch']}; budget {args.budget:g} s")
    entries = [e for e in LABS if args.only is None or e.label in args.only]
    plan = [(e, n) for e in entries for n in sizes if not e.world_sizes or n in e.world_sizes]
    summary = {"environment": environment, "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "seconds": 0.0, "budget_s": args.budget, "runs": [], "ok": False, "status": "running"}
    interrupted = False
    try:
        for entry, n in plan:
            left = args.budget - (time.monotonic() - start)
            if args.cpu_rehearsal and entry.gpu_only:
                run = {"label": entry.label, "lab": entry.lab, "world_size": n, "skipped": "GPU only"}
            elif left < entry.estimate_s + KILL_MARGIN_S:
                run = {"label": entry.label, "lab": entry.lab, "world_size": n,
                       "skipped": f"budget: {max(left, 0):.0f} s left, the row needs about {entry.estimate_s:g} s"}
            else:
                lab_timeout = max(10.0, min(entry.timeout_s, left - KILL_MARGIN_S))
                run = _run_one(entry, n, out, backend, lab_timeout)
            summary["runs"].append(run)
            summary["seconds"] = time.monotonic() - start
            _write(out, summary)
            _say(start, _row_line(run))
    except KeyboardInterrupt:
        interrupted = True
    ran = [r for r in summary["runs"] if not r.get("skipped")]
    summary["ok"] = bool(ran) and all(r.get("ok") for r in ran) and not interrupted
    failed = [r for r in ran if not r.get("ok")]
    summary["status"] = ("interrupted" if interrupted else
                         f"{len(failed)} of {plural(len(ran), 'run')} failed" if failed else _all_passed(len(ran)))
    summary["seconds"] = time.monotonic() - start
    _write(out, summary)
    print(markdown(summary), flush=True)
    print(f"summary: {out / 'summary.json'} and {out / 'summary.md'}; logs in {out / 'runs'}", flush=True)
    return 0 if summary["ok"] else 1


def _all_passed(n: int) -> str:
    """``'the 1 run passed'``, ``'all 12 runs passed'``."""
    return "the 1 run passed" if n == 1 else f"all {plural(n, 'run')} passed"


def _row_line(run: dict) -> str:
    name = f"{run['label']} x{run['world_size']}"
    if run.get("skipped"):
        return f"{name}: skipped ({run['skipped']})"
    if run.get("error"):
        return f"{name}: FAILED in {run['seconds']:.0f} s: {run['error']} (log: {run['log']})"
    bad = [c["name"] for c in run["checks"] if not c["ok"]]
    verdict = f"{len(bad)} of {len(run['checks'])} checks failed ({bad[0]}...)" if bad else \
        f"ok, {len(run['checks'])} checks"
    return f"{name}: {verdict} in {run['seconds']:.0f} s ({run['dtype']})"


if __name__ == "__main__":
    sys.exit(main())
