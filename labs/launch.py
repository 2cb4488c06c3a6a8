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
import datetime
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from solutions._format import plural

REPO_ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("auto", "gloo", "nccl")

__all__ = ["choose_backend", "agree_on_backend", "local_rank_from_env", "check_report_path", "cpu_cores",
           "oversubscription_warning", "check_fits_in_memory", "add_common_args", "RankContext", "LabFailed", "run", "main", "run_lab",
           "exit_now", "take_over_interrupts"]


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
        if gpu_count == 0:
            raise ValueError("backend nccl needs CUDA GPUs and none is visible; use --backend gloo "
                             "(CPU processes) or leave --backend out")
        if gpu_count < nproc:
            raise ValueError(
                f"backend nccl needs one CUDA GPU per rank: nproc={nproc} but {plural(gpu_count, 'GPU')} "
                f"{'is' if gpu_count == 1 else 'are'} visible (NCCL cannot place two ranks on one GPU); use --backend gloo or a smaller --nproc"
            )
        return "nccl", f"requested; one rank per GPU on {nproc} of {plural(gpu_count, 'visible CUDA GPU')}"
    if requested == "gloo":
        return "gloo", f"requested; {plural(nproc, 'CPU process', 'CPU processes')}"
    if gpu_count == 0:
        return "gloo", f"no CUDA GPU is visible, so {plural(nproc, 'CPU process', 'CPU processes')} with gloo"
    if gpu_count < nproc:
        return "gloo", (
            f"{plural(gpu_count, 'CUDA GPU')} visible but nproc={nproc}; NCCL needs one GPU per rank, "
            f"so {plural(nproc, 'CPU process', 'CPU processes')} with gloo"
        )
    return "nccl", f"{plural(gpu_count, 'CUDA GPU')} visible: NCCL with one rank per GPU on {nproc} of them"


# --------------------------------------------------------------------------- arguments


def add_common_args(parser: argparse.ArgumentParser, lab: str) -> argparse.ArgumentParser:
    from solutions._validate import terse_argparse_errors

    terse_argparse_errors(parser)  # a typo costs one line, not the usage block
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


#: Where launchers other than torchrun put a rank's index on its node.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def local_rank_from_env(environ=None) -> int | None:
    """This rank's index on its node, from the first of :data:`LOCAL_RANK_VARIABLES` that is
    set, else ``None`` (never the global rank: on two nodes that would name a GPU that is not
    there)."""
    environ = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        if environ.get(name, "") != "":
            value = environ[name]
            if not value.isdigit():
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
            return int(value)
    return None


def agree_on_backend(choices: list[str], reasons: list[str]) -> tuple[str, str]:
    """One backend for every rank of a job whose nodes decided on their own (``choices[r]``
    is rank ``r``'s): NCCL only if every rank can use it, else gloo everywhere. A job that
    mixed the two would hang or fail in its first collective."""
    if not choices:
        raise ValueError("choices must not be empty")
    if all(c == "nccl" for c in choices):
        return "nccl", reasons[0] + "; every node agrees"
    if all(c == "gloo" for c in choices):
        return "gloo", reasons[0]
    k = sum(c == "nccl" for c in choices)
    return "gloo", (f"{k} of {len(choices)} ranks could use NCCL, the others could not: "
                    "every rank uses gloo on CPU, so that the whole job speaks one backend")


def _agree_across_nodes(args, rank: int, world: int):
    """Under torchrun (or another launcher that sets the env:// variables): join the job's
    store, publish this node's backend choice, and take the common one."""
    import torch
    from torch.distributed.rendezvous import rendezvous

    # NVML counts GPUs without initialising CUDA, so that a gloo rank can still hide them.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    gpus = torch.cuda.device_count()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    try:
        mine, reason = choose_backend(args.backend, local_world, gpus)
    except ValueError as exc:
        mine, reason = "error", str(exc)
    try:
        store, _, _ = next(rendezvous("env://", rank, world, timeout=datetime.timedelta(seconds=args.timeout)))
    except RuntimeError as exc:  # torch's DistNetworkError or DistStoreError: a port in use, no rank 0
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LabFailed(f"rank {rank}: cannot join the job's store at {os.environ.get('MASTER_ADDR')}:"
                        f"{os.environ.get('MASTER_PORT')} ({first[:200]})") from None
    store.set(f"labs/backend/{rank}", f"{mine}|{reason}")
    published = [store.get(f"labs/backend/{r}").decode().split("|", 1) for r in range(world)]
    errors = [(r, why) for r, (c, why) in enumerate(published) if c == "error"]
    if errors:
        r, why = errors[0]
        raise ValueError(f"rank {r}: {why}")
    backend, reason = agree_on_backend([c for c, _ in published], [why for _, why in published])
    return store, backend, reason


def _run_rank(lab: str, args, worker, validate=None) -> int:
    import faulthandler

    faulthandler.enable()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        if args.nproc is not None and args.nproc != world:
            raise ValueError(f"--nproc {args.nproc} disagrees with WORLD_SIZE={world} set by the launcher")
        if validate is not None:  # under torchrun nobody validated before the ranks started
            validate(args, world)
    except ValueError as exc:
        if rank == 0:  # one line for the job, not one traceback per rank
            print(f"error: {exc}", file=sys.stderr, flush=True)
        exit_now(2)
    backend = os.environ.get("LABS_BACKEND")
    reason = os.environ.get("LABS_BACKEND_REASON", "")
    store = None
    if backend is None:  # torchrun or another launcher: the nodes must agree on one backend
        store, backend, reason = _agree_across_nodes(args, rank, world)
    if backend == "gloo":
        # Hide the GPUs from a CPU rank (works while CUDA is not initialised), so that
        # nothing in it (FSDP's default device, a stray .cuda()) picks one by accident.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    import torch.distributed as dist

    local_rank = local_rank_from_env()
    if backend == "nccl":
        if local_rank is None:
            raise ValueError("backend nccl needs this rank's index on its node to pick its GPU: set LOCAL_RANK "
                             f"(torchrun does), or one of {', '.join(LOCAL_RANK_VARIABLES[1:])}")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        local_rank = local_rank if local_rank is not None else 0
        device = torch.device("cpu")
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    init = dict(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    if store is not None:
        init.update(store=store, rank=rank, world_size=world)
    if backend == "nccl":
        init["device_id"] = device  # bind the communicator to this rank's GPU at once
    dist.init_process_group(**init)
    ctx = RankContext(rank, world, local_rank, backend, reason, device,
                      args.fail_rank, args.fail_at_step, args.fail_mode)
    status = 0
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
        # Every rank's view of the run, so that a report shows that all ranks (on every node)
        # ran the same backend.
        ranks = [None] * world
        dist.all_gather_object(ranks, {"rank": rank, "local_rank": local_rank, "backend": backend,
                                       "host": socket.gethostname(), "device": str(device)})
        if ctx.is_main:
            from .report import format_checks, write_report

            report = {
                "lab": lab,
                "torch": torch.__version__,
                "backend": backend,
                "backend_reason": reason,
                "world_size": world,
                "device": _device_name(device),
                "ranks": ranks,
                **result,
            }
            try:
                write_report(report, args.report)
            except OSError as exc:
                print(f"error: --report {args.report}: cannot write the report ({exc.strerror or exc})",
                      file=sys.stderr, flush=True)
                exit_now(1)
            if "LABS_LAUNCHER_PID" not in os.environ:  # torchrun: nobody else will print it
                print(format_checks(report), flush=True)
                print(f"report: {args.report}", flush=True)
                status = rank_exit_status(report)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    exit_now(status)


def rank_exit_status(report: dict) -> int:
    """Rank 0's exit status under torchrun (no launcher of ours reads the report): 3 when a
    check failed, so that torchrun, and a Slurm job around it, end as failed rather than
    COMPLETED; 0 otherwise."""
    from .report import all_ok

    return 0 if all_ok(report) else 3


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


def _fate(returncode: int | None, stopped: bool) -> str:
    """:func:`_describe`, except for a rank the launcher stopped before it had set up its
    stack dump (``SIGUSR1``'s default action then ends it): it was still starting up."""
    if stopped and returncode == -signal.SIGUSR1:
        return "stopped while still starting up"
    return _describe(returncode)


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
            fates = {}
            for r in failed:
                fates.setdefault(_fate(codes[r], r in stopped), []).append(r)
            lines = [f"lab {lab} failed after {elapsed:.1f} s ({stopped_by or 'a rank failed'}): "
                     + "; ".join(f"{_ranks(rs)} {fate}" for fate, rs in fates.items())]
            entries = []
            for r in range(nproc):
                story = _tail(logdir / f"rank{r}.err") or _tail(logdir / f"rank{r}.out", 5)
                if r in stopped and codes[r] == -signal.SIGUSR1:
                    story += ("\n(stopped by the launcher while still starting up, before it could show its stack; "
                              "starting a rank takes seconds: a larger --timeout may help)")
                elif r in stopped:
                    story += "\n(stopped by the launcher; above, where it was when asked for its stack)"
                elif codes[r] == -signal.SIGKILL:
                    story += "\n(killed by SIGKILL: a process killed this way cannot print a traceback)"
                entries.append((r, _fate(codes[r], r in stopped), story))
            lines += [f"--- {_ranks(rs)} ({fate}):\n{story}" for rs, fate, story in group_stories(entries)]
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


def group_stories(entries: list[tuple[int, str, str]]) -> list[tuple[list[int], str, str]]:
    """``(ranks, fate, story)`` for ``(rank, fate, story)`` entries: ranks whose fate and story
    agree up to rank numbers and peer addresses are told once (a 99-rank timeout is one
    story, not 99), with the first such rank's story."""
    groups: dict[tuple, list] = {}
    for rank, fate, story in entries:
        key = (fate, re.sub(r"\brank \d+|\[[\w.:]+\]:\d+", "#", story))
        groups.setdefault(key, []).append((rank, story))
    return [([r for r, _ in told], fate, told[0][1]) for (fate, _), told in groups.items()]


def _ranks(ranks: list[int]) -> str:
    """'rank 3', 'ranks 0-2, 5'."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


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


def check_report_path(report) -> Path:
    """``Path(report)`` if a report can be written there, before any rank starts; else a
    one-line ``ValueError`` (a folder, an unwritable folder, a parent that is a file)."""
    path = Path(report)
    if str(report) == "":
        raise ValueError("--report needs a file name, e.g. reports/lab.json")
    if path.is_dir():
        raise ValueError(f"--report {report!s}: is a folder; give a file name, e.g. {path / 'lab.json'}")
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"--report {report!s}: {above} is a file, not a folder")
    if path.exists() or path.is_symlink():
        # The launcher deletes an old report before the run: never a device, a pipe or a
        # file that is not a lab report (a typo such as --report labs/ddp.py).
        if not path.is_file():
            raise ValueError(f"--report {report!s}: exists and is not a regular file; give a new file name")
        try:
            old = path.read_text(encoding="utf-8")
            ok = old.strip() == "" or "lab" in json.loads(old)
        except (OSError, UnicodeDecodeError, ValueError, TypeError):
            ok = False
        if not ok:
            raise ValueError(f"--report {report!s}: exists and is not a lab report; refusing to overwrite it")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise ValueError(f"--report {report!s}: cannot write in {parent}/ ({exc.strerror or exc})") from None
    return path


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def oversubscription_warning(nproc: int, cores: int) -> str | None:
    """What to tell a learner who starts more CPU ranks than there are cores, else ``None``."""
    if nproc <= cores:
        return None
    return (f"--nproc {nproc} starts {nproc} CPU processes on {plural(cores, 'core')}: they take turns, so the run is "
            f"about {nproc / cores:.0f}x slower than it needs to be and its timings say little; "
            f"--nproc {cores} or fewer is the most this machine runs at full speed")


#: The longest --timeout / --grace accepted, in seconds (30 days; ``timedelta`` and the
#: store's millisecond timeout overflow far beyond it, and no lab needs longer).
MAX_TIMEOUT = 30 * 86400.0
#: Memory one CPU rank takes before the lab allocates anything (torch and gloo loaded).
RANK_MEMORY = 300 * 2**20


def available_memory() -> int | None:
    """Bytes of memory available to new processes (``MemAvailable``), else ``None``."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def ranks_that_fit(available: int | None) -> int | float:
    """How many CPU ranks of :data:`RANK_MEMORY` fit in ``available`` bytes (at least 1;
    unlimited when the available memory is unknown)."""
    if available is None:
        return math.inf
    return max(1, available // RANK_MEMORY)


def check_fits_in_memory(bytes_per_rank: float, nproc: int, what: str, backend: str = "auto") -> None:
    """A one-line ``ValueError`` before any rank starts when ``nproc`` CPU ranks of
    ``bytes_per_rank`` (plus :data:`RANK_MEMORY` each) cannot fit in this machine's available
    memory: such a run would die in an allocation, or swap, and measure nothing. Skipped inside
    a rank (the other ranks already use memory) and when the ranks will run on GPUs."""
    if _in_rank_environment() or backend == "nccl":
        return
    if backend == "auto":
        import torch

        if torch.cuda.device_count() >= nproc:
            return
    available = available_memory()
    need = nproc * (bytes_per_rank + RANK_MEMORY)
    if available is not None and need > available:
        raise ValueError(f"{what} needs about {need / 2**30:.1f} GiB for {plural(nproc, 'CPU rank')}, but this machine has "
                         f"{available / 2**30:.1f} GiB available: this run cannot be done here; make it smaller")


def run(lab: str, parser: argparse.ArgumentParser, worker, argv: list[str] | None = None,
        validate=None) -> dict | None:
    """Run lab ``lab`` (module ``labs.<lab>``) with ``argv``: as a rank when the environment
    says so, else as the launcher. The launcher returns the report (a dict); raises
    ``LabFailed`` when a rank fails and ``ValueError`` for impossible arguments.

    ``validate(args, world_size)`` raises ``ValueError`` for arguments the lab cannot run
    with (a degree that does not divide, ``--steps 0``): the launcher calls it before any rank
    starts, so a typo costs one line and no process (on GPUs: no CUDA context, no NCCL
    communicator per rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if _in_rank_environment():
        _run_rank(lab, args, worker, validate)
        return None
    if args.nproc is None:
        raise ValueError("--nproc is required (the number of ranks to start)")
    if args.nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, got {args.nproc}")
    if not (0 < args.timeout <= MAX_TIMEOUT and 0 <= args.grace <= MAX_TIMEOUT):
        raise ValueError(f"--timeout must be in (0, {MAX_TIMEOUT:g}] s and --grace in [0, {MAX_TIMEOUT:g}] s, "
                         f"got {args.timeout:g}, {args.grace:g}")
    seed = getattr(args, "seed", None)
    if seed is not None and not 0 <= seed < 2**32:  # torch's and numpy's generators both take these
        raise ValueError(f"--seed must be an integer in 0..{2**32 - 1}, got {seed}")
    if args.fail_rank is not None and not 0 <= args.fail_rank < args.nproc:
        raise ValueError(f"--fail-rank must be a rank in 0..{args.nproc - 1}, got {args.fail_rank}")
    if validate is not None:
        validate(args, args.nproc)
    report_path = check_report_path(args.report)
    import torch

    gpus = torch.cuda.device_count()
    backend, reason = choose_backend(args.backend, args.nproc, gpus)
    print(f"backend: {backend} ({reason})", flush=True)
    if backend == "gloo":
        room = ranks_that_fit(available_memory())
        if args.nproc > room:
            raise ValueError(f"--nproc {args.nproc} starts {args.nproc} CPU processes of about "
                             f"{RANK_MEMORY / 2**30:.1f} GiB each (torch alone), but this machine has room for "
                             f"about {room}: this run cannot be done here; use a smaller --nproc")
        warning = oversubscription_warning(args.nproc, cpu_cores())
        if warning:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
    if report_path.exists():
        report_path.unlink()  # never mistake an old report for this run's
    _launch(lab, argv, args.nproc, backend, reason, args, echo=lambda line: print(line, flush=True))
    from .report import format_checks, read_report

    report = read_report(report_path)
    print(format_checks(report), flush=True)
    print(f"report: {args.report}", flush=True)
    return report


def take_over_interrupts() -> None:
    """The launcher's signals: Ctrl-C raises ``KeyboardInterrupt`` again (``labs/__init__``
    answered it in one line while torch was being imported), and SIGTERM (``timeout``, a job
    scheduler) does the same, so that either stops every rank and removes their logs. Every
    ``python -m labs.<program>`` that handles ``KeyboardInterrupt`` calls it first."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: the caller's own handlers stay
        pass


def main(lab: str, parser: argparse.ArgumentParser, worker, argv: list[str] | None = None, validate=None) -> int:
    """Command-line entry: exit status 0 when every check passed, 3 when a check failed,
    1 when a rank failed or the run timed out, 2 for bad arguments (also under torchrun)."""
    if not _in_rank_environment():
        take_over_interrupts()
    try:
        report = run(lab, parser, worker, argv, validate)
    except KeyboardInterrupt:
        if _in_rank_environment():
            raise
        # _launch's cleanup has already killed every rank's process group.
        print(f"\ninterrupted: lab {lab} stopped, every rank it started was killed", file=sys.stderr, flush=True)
        return 130
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


def _stop_launcher(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a lab started by :func:`run_lab` as Ctrl-C would (its launcher kills the ranks and
    removes their logs), and kill it if it has not finished within ``grace`` seconds (its
    ranks die with it: PR_SET_PDEATHSIG)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def run_lab(lab: str, *args: str, timeout: float | None = None) -> dict:
    """Run ``python -m labs.<lab> *args`` exactly as from a shell, print its output as it
    comes, and return the report. For notebooks: the ranks are separate processes, so a cell
    can run a lab again and again. Raises ``RuntimeError`` with the error output if the lab
    fails (a failed check is not a failure here: it is in the report)."""
    args = [str(a) for a in args]
    report = "reports/lab-%s.json" % lab
    if "--report" in args:
        if args.index("--report") + 1 == len(args):
            raise ValueError("--report needs a path after it")
        report = args[args.index("--report") + 1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", f"labs.{lab}", *args]
    print("$ python -m labs.%s %s" % (lab, shlex.join(args)), flush=True)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        echo = threading.Thread(target=lambda: [print(line, end="", flush=True) for line in proc.stdout],
                                daemon=True)
        echo.start()
        try:
            proc.wait(timeout=timeout)
        except BaseException as exc:
            _stop_launcher(proc)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise RuntimeError(f"labs.{lab} did not finish within {timeout:g} s: stopped, with its ranks") from None
            raise
        finally:
            echo.join(timeout=5)
        if proc.returncode not in (0, 3):
            err.seek(0)
            message = err.read().decode("utf-8", errors="replace")
            raise RuntimeError(f"labs.{lab} exited with status {proc.returncode}:\n{message}")
    return json.loads(Path(report).read_text(encoding="utf-8"))
