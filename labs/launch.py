"""Start a lab's ranks, watch them, and clean up: the part every lab shares.

``python -m labs.<lab> --nproc N`` runs in one of two roles:

* **launcher** (no ``RANK`` in the environment): picks the backend, opens a rendezvous
  store on a free port, starts ``N`` copies of the same command as separate processes
  (like ``torchrun``; never ``fork``, which breaks in notebooks), streams rank 0's output,
  and waits. If a rank dies, the others get a short grace period to fail on their own, then
  every survivor is asked for a stack dump (``faulthandler`` on ``SIGUSR1``) and killed. The
  error names every rank's fate and shows each one's last lines of output. Nothing is left
  running: each rank is its own process group, is killed as a group, and also dies with its
  parent (``PR_SET_PDEATHSIG`` on Linux).
* **rank** (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set, by this launcher
  or by ``torchrun``): joins the process group, runs the lab's worker, and rank 0 writes the
  JSON report. Under ``torchrun`` the same command therefore runs on several nodes.

Backend choice (``--backend auto``): NCCL with one rank per GPU when at least ``N`` CUDA GPUs
are visible; otherwise gloo on CPU processes. NCCL cannot put two ranks on one GPU, which is
why a Colab notebook with one GPU runs the labs on CPU. Gloo ranks are started with
``CUDA_VISIBLE_DEVICES`` empty, so that nothing in them (FSDP's default device mesh, for one)
picks a GPU by accident.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("auto", "gloo", "nccl")

__all__ = ["choose_backend", "add_common_args", "RankContext", "LabFailed", "run", "main", "run_lab", "exit_now"]


class LabFailed(RuntimeError):
    """A rank failed or the run timed out; the message holds every rank's story."""


# --------------------------------------------------------------------------- backend


def choose_backend(requested: str, nproc: int, gpu_count: int) -> tuple[str, str]:
    """``(backend, reason)`` for ``--backend requested`` with ``nproc`` ranks and
    ``gpu_count`` visible CUDA GPUs. Raises ``ValueError`` for impossible requests."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {requested!r}")
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    if requested == "nccl":
        if gpu_count < nproc:
            raise ValueError(
                f"backend nccl needs one CUDA GPU per rank: nproc={nproc} but {gpu_count} GPU(s) "
                "are visible (NCCL cannot place two ranks on one GPU); use --backend gloo or a smaller --nproc"
            )
        return "nccl", f"requested; one rank per GPU on {nproc} of {gpu_count} visible CUDA GPU(s)"
    if requested == "gloo":
        return "gloo", f"requested; {nproc} CPU process(es)"
    if gpu_count == 0:
        return "gloo", f"no CUDA GPU is visible, so {nproc} CPU process(es) with gloo"
    if gpu_count < nproc:
        return "gloo", (
            f"{gpu_count} CUDA GPU(s) visible but nproc={nproc}; NCCL needs one GPU per rank, "
            f"so {nproc} CPU process(es) with gloo"
        )
    return "nccl", f"{gpu_count} CUDA GPU(s) visible: NCCL with one rank per GPU on {nproc} of them"


# --------------------------------------------------------------------------- arguments


def add_common_args(parser: argparse.ArgumentParser, lab: str) -> argparse.ArgumentParser:
    g = parser.add_argument_group("launch")
    g.add_argument("--nproc", type=int, default=None,
                   help="number of ranks to start (under torchrun: taken from WORLD_SIZE)")
    g.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="auto: NCCL with one rank per GPU if enough GPUs are visible, else gloo on CPU")
    g.add_argument("--report", default=f"reports/lab-{lab}.json", help="where rank 0 writes the JSON report")
    g.add_argument("--timeout", type=float, default=600.0,
                   help="seconds before the whole run is stopped (also the process-group timeout)")
    g.add_argument("--grace", type=float, default=10.0,
                   help="seconds the other ranks get to fail on their own after one rank dies")
    g.add_argument("--fail-rank", type=int, default=None, help="debug: this rank fails at --fail-at-step")
    g.add_argument("--fail-at-step", type=int, default=0, help="debug: the step at which --fail-rank fails")
    g.add_argument("--fail-mode", choices=("kill", "raise", "hang"), default="kill",
                   help="debug: 'kill' sends SIGKILL to the rank itself, 'raise' raises an exception, "
                        "'hang' makes it stop responding (the others then wait until --timeout)")
    return parser


# --------------------------------------------------------------------------- rank side


@dataclass
class RankContext:
    """What a worker needs to know about its place in the run."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    backend_reason: str
    device: object  # torch.device
    fail_rank: int | None = None
    fail_at_step: int = 0
    fail_mode: str = "kill"
    extras: dict = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, *args) -> None:
        """Print on rank 0 only (the launcher streams rank 0's output)."""
        if self.is_main:
            print(*args, flush=True)

    def maybe_fail(self, step: int) -> None:
        """Debug hook: make ``--fail-rank`` die at ``--fail-at-step`` (a crash, not a clean exit)."""
        if self.fail_rank == self.rank and step == self.fail_at_step:
            if self.fail_mode == "kill":
                print(f"rank {self.rank}: killing itself at step {step} (--fail-rank)", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fail_mode == "hang":
                print(f"rank {self.rank}: hanging at step {step} (--fail-rank)", flush=True)
                while True:
                    time.sleep(1)
            raise RuntimeError(f"rank {self.rank}: injected failure at step {step} (--fail-rank)")


def _in_rank_environment() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _run_rank(lab: str, args, worker) -> int:
    import datetime
    import faulthandler

    import torch
    import torch.distributed as dist

    faulthandler.enable()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if args.nproc is not None and args.nproc != world:
        raise ValueError(f"--nproc {args.nproc} disagrees with WORLD_SIZE={world} set by the launcher")
    backend = os.environ.get("LABS_BACKEND")
    reason = os.environ.get("LABS_BACKEND_REASON", "")
    if backend is None:  # started by torchrun: decide here, per node
        gpus = torch.cuda.device_count()
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        backend, reason = choose_backend(args.backend, local_world, gpus)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    init = dict(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    if backend == "nccl":
        init["device_id"] = device  # bind the communicator to this rank's GPU at once
    dist.init_process_group(**init)
    ctx = RankContext(rank, world, local_rank, backend, reason, device,
                      args.fail_rank, args.fail_at_step, args.fail_mode)
    try:
        result = worker(ctx, args)
    except BaseException:
        # Print the traceback and leave at once: a clean shutdown could wait forever on
        # peers that are themselves stuck, and the launcher stops them anyway.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    try:
        if ctx.is_main:
            from .report import format_checks, write_report

            report = {
                "lab": lab,
                "torch": torch.__version__,
                "backend": backend,
                "backend_reason": reason,
                "world_size": world,
                "device": _device_name(device),
                **result,
            }
            write_report(report, args.report)
            if "LABS_LAUNCHER_PID" not in os.environ:  # torchrun: nobody else will print it
                print(format_checks(report), flush=True)
                print(f"report: {args.report}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_now(0)


def exit_now(code: int) -> None:
    """Flush and leave without the interpreter's teardown, which takes seconds with torch
    loaded on a small machine. Only for a process whose work is done (files closed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


# --------------------------------------------------------------------------- launcher side


def _describe(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _launch(lab: str, argv: list[str], nproc: int, backend: str, reason: str, args, echo=print) -> None:
    import datetime

    import torch.distributed as dist

    # The launcher holds the rendezvous store, bound to port 0 so the OS picks a free port:
    # no fixed port to collide with another run (EADDRINUSE), and no race between picking a
    # port and binding it. Ranks connect to it as clients, as under torchrun's agent.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=args.timeout))
    env = dict(os.environ)
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "LABS_BACKEND": backend,
        "LABS_BACKEND_REASON": reason,
        "LABS_LAUNCHER_PID": str(os.getpid()),
        "OMP_NUM_THREADS": "1",  # one thread per rank: N ranks share the cores
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    })
    if backend == "gloo":
        env["CUDA_VISIBLE_DEVICES"] = ""
    logdir = Path(tempfile.mkdtemp(prefix=f"lab-{lab}-"))
    procs: list[subprocess.Popen] = []
    files = []
    start = time.monotonic()
    try:
        for rank in range(nproc):
            out = open(logdir / f"rank{rank}.out", "wb")
            err = open(logdir / f"rank{rank}.err", "wb")
            files += [out, err]
            procs.append(subprocess.Popen(
                [sys.executable, "-m", f"labs.{lab}", *argv],
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
            ))
        streamed = 0
        first_failure = None
        stopped_by = None
        while True:
            time.sleep(0.1)
            streamed = _stream(logdir / "rank0.out", streamed, echo)
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if first_failure is None and any(c not in (None, 0) for c in codes):
                first_failure = now
            if all(c is not None for c in codes):
                break
            if first_failure is not None and now - first_failure > args.grace:
                stopped_by = f"stopped {args.grace:g} s after the first rank failed"
                break
            if now - start > args.timeout:
                stopped_by = f"timed out after {args.timeout:g} s"
                break
        stopped = set()
        if stopped_by:
            alive = [p for p in procs if p.poll() is None]
            stopped = {procs.index(p) for p in alive}
            for p in alive:  # ask for a stack dump, so a hung rank shows where it hangs
                _kill_group(p, signal.SIGUSR1)
            if alive:
                time.sleep(1.0)
            for p in alive:
                _kill_group(p)
        for p in procs:
            p.wait()
        _stream(logdir / "rank0.out", streamed, echo)
        codes = [p.returncode for p in procs]
        if stopped_by or any(codes):
            elapsed = time.monotonic() - start
            failed = [r for r, c in enumerate(codes) if c != 0]
            lines = [f"lab {lab} failed after {elapsed:.1f} s ({stopped_by or 'a rank failed'}): "
                     + "; ".join(f"rank {r} {_describe(codes[r])}" for r in failed)]
            for r in range(nproc):
                story = _tail(logdir / f"rank{r}.err") or _tail(logdir / f"rank{r}.out", 5)
                if r in stopped:
                    story += "\n(stopped by the launcher; above, where it was when asked for its stack)"
                elif codes[r] == -signal.SIGKILL:
                    story += "\n(killed by SIGKILL: a process killed this way cannot print a traceback)"
                lines.append(f"--- rank {r} ({_describe(codes[r])}):\n{story}")
            raise LabFailed("\n".join(lines))
    finally:
        for p in procs:
            if p.poll() is None:  # only on the way out of an exception (e.g. Ctrl-C)
                _kill_group(p)
                p.wait()
        for f in files:
            f.close()
        for child in logdir.iterdir():
            child.unlink()
        logdir.rmdir()
        del store


def _stream(path: Path, pos: int, echo) -> int:
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except OSError:
        return pos
    # Only whole lines, so that a line is never split across two polls.
    end = data.rfind(b"\n") + 1
    if end:
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            echo(line)
    return pos + end


def run(lab: str, parser: argparse.ArgumentParser, worker, argv: list[str] | None = None) -> dict | None:
    """Run lab ``lab`` (module ``labs.<lab>``) with ``argv``: as a rank when the environment
    says so, else as the launcher. The launcher returns the report (a dict); raises
    ``LabFailed`` when a rank fails and ``ValueError`` for impossible arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if _in_rank_environment():
        _run_rank(lab, args, worker)
        return None
    if args.nproc is None:
        raise ValueError("--nproc is required (the number of ranks to start)")
    if args.nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, got {args.nproc}")
    if args.timeout <= 0 or args.grace < 0:
        raise ValueError(f"--timeout must be > 0 and --grace >= 0, got {args.timeout}, {args.grace}")
    if args.fail_rank is not None and not 0 <= args.fail_rank < args.nproc:
        raise ValueError(f"--fail-rank must be a rank in 0..{args.nproc - 1}, got {args.fail_rank}")
    import torch

    gpus = torch.cuda.device_count()
    backend, reason = choose_backend(args.backend, args.nproc, gpus)
    print(f"backend: {backend} ({reason})", flush=True)
    report_path = Path(args.report)
    if report_path.exists():
        report_path.unlink()  # never mistake an old report for this run's
    _launch(lab, argv, args.nproc, backend, reason, args, echo=lambda line: print(line, flush=True))
    from .report import format_checks, read_report

    report = read_report(report_path)
    print(format_checks(report), flush=True)
    print(f"report: {args.report}", flush=True)
    return report


def main(lab: str, parser: argparse.ArgumentParser, worker, argv: list[str] | None = None) -> int:
    """Command-line entry: exit status 0 when every check passed, 3 when a check failed,
    1 when a rank failed or the run timed out, 2 for bad arguments."""
    try:
        report = run(lab, parser, worker, argv)
    except LabFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except ValueError as exc:
        if _in_rank_environment():
            raise
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if report is None:  # a rank
        return 0
    from .report import all_ok

    if not all_ok(report):
        print("some checks failed (ok = NO above)", flush=True)
        return 3
    return 0


# --------------------------------------------------------------------------- notebooks


def run_lab(lab: str, *args: str, timeout: float | None = None) -> dict:
    """Run ``python -m labs.<lab> *args`` exactly as from a shell, print its output as it
    comes, and return the report. For notebooks: the ranks are separate processes, so a cell
    can run a lab again and again. Raises ``RuntimeError`` with the error output if the lab
    fails (a failed check is not a failure here: it is in the report)."""
    args = [str(a) for a in args]
    report = "reports/lab-%s.json" % lab
    if "--report" in args:
        report = args[args.index("--report") + 1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", f"labs.{lab}", *args]
    print("$ python -m labs.%s %s" % (lab, shlex.join(args)), flush=True)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            for line in proc.stdout:
                print(line, end="", flush=True)
            proc.wait(timeout=timeout)
        except BaseException:
            proc.kill()  # the lab's ranks die with it (PR_SET_PDEATHSIG)
            proc.wait()
            raise
        if proc.returncode not in (0, 3):
            err.seek(0)
            message = err.read().decode("utf-8", errors="replace")
            raise RuntimeError(f"labs.{lab} exited with status {proc.returncode}:\n{message}")
    return json.loads(Path(report).read_text(encoding="utf-8"))
