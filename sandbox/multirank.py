"""Run the ranks of one submission as a group: walled in, watched, and leaving nothing behind.

    result = run_ranks(world_size, program, payloads, limits=Limits())

``program`` (:class:`RankProgram`) is what every rank runs: grader modules given as source,
the submission's code, and an entry function called with a :class:`RankContext`
(``payload``: the bytes the grader sent that rank alone; ``report(dict)``: one JSON message
back; ``checkpoint(label)``: wait for the grader's word). Messages are JSON, never pickles,
bounded in size and number: the grader never unpickles what a submission wrote.

Where the ranks come from:

* ``zygote`` (every submission the grader grades): forked from the *rank zygote*, a process
  started once per grading run that never holds grading state (:mod:`sandbox.ranks`: what
  it builds, and each rank's walls). The program, the submission and each payload go from
  here straight to each rank over its own socket. Each group gets a uid of its own where the
  grader is root (:class:`_UidLease`), so groups cannot signal each other or share process
  limits. A group that hangs or crashes before its ranks have met is started again
  (:data:`RENDEZVOUS_TRIES`): no submission code had run, so it is never the submission's fault.
* ``fork`` (a notebook's self-check, which grades the notebook's own objects): the ranks are
  forked from the calling process, in network and PID namespaces where the kernel allows.

The watchdog sees, through the group's own shared memory, which point-to-point or collective
call each rank is blocked in and since when, so a deadlock is reported as ``rank 1 hung in
recv after 5 s``: a hang is judged by progress, not wall time alone (a rank blocked longer
than ``stall_s`` while no process of the group ran at all). Memory is the proportional set
size summed over every process of the group (read only when the cheap sum of resident sizes,
which is never below it, is over the limit); CPU time is summed over the group too.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from .locks import lock_folder
from .template import TemplateProcess, ZygoteRefused
from .wire import Capture
from .ranks.group import loopback_up, status_view
from .ranks.rank import (MAX_MESSAGE, NOT_A_HANG, OPERATIONS, PROGRAM_PACKAGE, SLOTS, RankContext,  # noqa: F401
                         RankProgram, RankWalls, Tracker, crash_report, load_program, run_rank)

#: The rendezvous port inside a private namespace: the same for every group, which is safe
#: only because each group has a loopback of its own (two groups at once do not collide).
PRIVATE_PORT = 29500
#: What one rank may send back in all (its messages' bytes, and their number): a rank that
#: floods the grader is stopped, not buffered.
MAX_RANK_BYTES = 32 * 1024 * 1024
MAX_RANK_MESSAGES = 20_000
#: The most sockets a rank's first message may name: at 64 ranks, rank 0 holds the store's
#: 64 accepted connections, its 63 gloo connections, its own store client and the listeners.
MAX_RANK_SOCKETS = 256
#: Groups started for one call before the grader gives up on its ranks ever meeting. Nothing
#: of a submission runs before the rendezvous, so a group that stops there is the grader's
#: trouble: on the machine's shared loopback (the uid and rlimits walls) another process can
#: take the store's port between the grader choosing it and rank 0 listening on it.
RENDEZVOUS_TRIES = 3
WORKER = Path(__file__).with_name("rank_worker.py")
START_TIMEOUT = 120.0  # starting Python and importing torch; never the student's fault
ISOLATION_MODES = ("auto", "namespaces", "uid", "rlimits")
UID_BASE, UID_COUNT = 65100, 800  # the groups' uids where the grader is root


@dataclass(frozen=True)
class Limits:
    wall_s: float = 600.0  # the whole group, start to end: a last resort (progress decides first)
    stall_s: float = 5.0  # one rank blocked in one communication call, the group idle meanwhile
    idle_s: float = 10.0  # the group idle (no CPU spent, no thread waiting to run) with no rank waiting for a message
    memory_bytes: int = 4 * 1024**3  # the group's processes together (PSS)
    threads: int = 1  # torch threads per rank: ranks share the machine's cores
    #: once a rank has reported an error, a peer blocked this long is waiting for it (the
    #: error is the cause; waiting the full ``stall_s`` would add nothing)
    stall_after_error_s: float = 1.0
    cpu_s: float = 120.0  # CPU seconds of the group's processes together
    tmp_mb: int = 64  # each rank's /tmp and /dev/shm (namespaces)
    file_mb: int = 32  # the largest file a rank may write
    tasks_per_rank: int = 24  # processes and threads (gloo, the store and torch start about six)


#: A group's walls, strongest first (see :mod:`sandbox.ranks`): its own namespaces; a leased
#: uid in an empty chroot (namespaces refused); rlimits alone; ranks forked from the grader
#: (the in-process mode the engine's own tests use), with or without namespaces.
ISOLATION_ORDER = ("namespaces", "uid", "rlimits", "fork (namespaces)", "fork")


def weaker(a: str | None, b: str | None) -> str | None:
    """The weaker of two groups' walls (None: no group ran yet; an unknown name is weakest)."""
    if not a or not b:
        return a or b
    rank = {mode: k for k, mode in enumerate(ISOLATION_ORDER)}
    return max(a, b, key=lambda mode: rank.get(mode, len(ISOLATION_ORDER)))


@dataclass
class GroupResult:
    world_size: int
    messages: list = field(default_factory=list)  # per rank: the dicts it reported
    outcome: str = "ok"  # ok | hung | timeout | memory | crashed | refused
    detail: str = ""
    isolated: bool = False
    isolation: str = ""  # namespaces | uid | rlimits | fork (and whether namespaces held)
    sockets: list = field(default_factory=list)  # outside addresses a rank tried to reach
    wall_s: float = 0.0
    peak_memory_bytes: int = 0  # the largest sample: PSS over the limit's size, else RSS (above PSS)
    cpu_s: float = 0.0
    ports: list = field(default_factory=list)  # per rank: its sockets' local ports, before its code ran (None: never met)
    #: What the ranks sent each other, seen on the group's loopback (None: no capture, the
    #: ranks ran without a network namespace): one entry per checkpoint the grader answered,
    #: ``{"checkpoint": label, "case": ..., "traffic": [per rank: counts]}``, and a last one
    #: ``"end"`` (see :mod:`sandbox.wire`).
    segments: list | None = None
    #: What each rank held, measured from outside (``/proc``) at the checkpoints that asked
    #: for it (``measure="memory"``): ``{"checkpoint", "case", "point", "held": {pid: bytes}}``,
    #: one entry per rank process (its resident anonymous and shared memory, with that of
    #: the processes it started, what their memfds and pipes hold, and the files in its
    #: private ``/tmp`` and ``/dev/shm``).
    memory: list = field(default_factory=list)
    wire_complete: bool = True  # no packet was dropped before the grader read it
    unowned_bytes: int = 0  # bytes on connections no rank owned

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def run_ranks(world_size: int, rank_main, payloads: list[bytes], limits: Limits = Limits(),
              isolate: bool = True, prepare=None, checkpoints=None, mode: str | None = None) -> GroupResult:
    """Run ``rank_main`` (a :class:`RankProgram`, or for tests of the engine itself a function
    ``(rank, world_size, payload, report)``) on ``world_size`` ranks as one group. A program
    without ``local`` objects runs in ranks forked from the rank zygote (``mode="zygote"``);
    anything else in ranks forked from this process (``"fork"``). ``isolate=False`` asks for
    no namespaces (the ``rlimits`` walls). ``prepare()`` (fork mode) runs in each rank before
    it drops its privileges. ``checkpoints``: an object with ``arrive(rank, message) ->
    {rank: answer}`` and ``finished(rank) -> {rank: answer}`` deciding when ranks waiting at a
    checkpoint go on (default: at once, "go"); where it has ``settles(message) -> bool`` and
    that says so, the traffic is cut at that checkpoint only once the group has gone idle
    (:func:`_settle`)."""
    if not 1 <= world_size <= 64 or len(payloads) != world_size:
        raise ValueError(f"world_size must be 1..64 with one payload per rank, got {world_size}")
    zygote_mode = isinstance(rank_main, RankProgram) and rank_main.local is None
    if (mode or ("zygote" if zygote_mode else "fork")) == "zygote":
        for _ in range(RENDEZVOUS_TRIES):
            result = _run_zygote(world_size, rank_main, payloads, limits, isolate, checkpoints)
            if not stopped_before_meeting(result):
                return result
        raise RuntimeError(f"the ranks could not meet at the rendezvous in {RENDEZVOUS_TRIES} tries "
                           f"({result.outcome}: {result.detail})")
    return _run_forked(world_size, rank_main, payloads, limits, isolate, prepare, checkpoints)


def stopped_before_meeting(result: GroupResult) -> bool:
    """Whether a group hung or crashed before every rank had met the others (each rank's first
    message, its sockets, comes right after the rendezvous and before any submission code)."""
    met = len(result.ports) == result.world_size and None not in result.ports
    return result.outcome in ("hung", "crashed") and not met


# ----------------------------------------------------------------------------- the rank zygote

class RankZygote(TemplateProcess):
    """The grader's handle on the rank zygote (:mod:`sandbox.ranks`): started on first use,
    one per grading process and isolation mode, shared by every grading thread (a lock
    serialises requests), stopped at exit (its socket closing stops it and its groups)."""

    what = "the rank zygote"
    child = "a group"
    start_timeout = START_TIMEOUT

    def __init__(self, wanted: str):
        from .ranks.root import package_paths

        self.make_dir("autograde-ranks-")
        env = {"PATH": "", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
        self.switch_uid = _can_switch_uid()
        config = {"isolation": wanted, "packages": package_paths(), "root_dir": str(self.dir / "root"),
                  "switch_uid": self.switch_uid}
        self.launch(WORKER, env, config)

    def kill(self, pid: int) -> None:
        with contextlib.suppress(RuntimeError):
            self._ask({"op": "kill", "pid": pid})


_zygotes: dict = {}
_zygotes_lock = threading.Lock()
_namespaces_refused: list = []


def rank_zygote(isolate: bool = True) -> RankZygote:
    """The shared, ready rank zygote; ``auto`` falls back for good to ``uid``/``rlimits`` when
    the kernel refuses namespaces (``isolate=False``: ``rlimits`` walls, no namespaces)."""
    wanted = os.environ.get("AUTOGRADE_RANK_ISOLATION", "auto") if isolate else "rlimits"
    if wanted not in ISOLATION_MODES:
        raise ValueError(f"AUTOGRADE_RANK_ISOLATION must be one of {ISOLATION_MODES}, got {wanted!r}")
    with _zygotes_lock:
        if wanted == "auto" and _namespaces_refused:
            wanted = "fallback"
        zygote = _zygotes.get(wanted)
        if zygote is not None and zygote.isolation is not None and zygote.alive:
            return zygote
        try:
            zygote = (zygote if zygote is not None and zygote.isolation is None and zygote.alive
                      else RankZygote(wanted)).wait_ready()
        except ZygoteRefused as exc:
            if wanted != "auto" or "namespace" not in str(exc):
                raise RuntimeError(f"the rank sandbox could not be built: {exc}") from None
            _namespaces_refused.append(str(exc))
            wanted = "fallback"
            zygote = RankZygote(wanted).wait_ready()
        _zygotes[wanted] = zygote
        return zygote


def prestart(isolate: bool = True) -> None:
    """Launch the rank zygote now (it imports torch on another core while the grader reads
    the submission); errors surface at the first real use."""
    wanted = os.environ.get("AUTOGRADE_RANK_ISOLATION", "auto") if isolate else "rlimits"
    with _zygotes_lock:
        key = "fallback" if wanted == "auto" and _namespaces_refused else wanted
        if key not in _zygotes:
            with contextlib.suppress(Exception):
                _zygotes[key] = RankZygote(key)


def stop_zygotes() -> None:
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


import atexit  # noqa: E402

atexit.register(stop_zygotes)

_switch_uid: list = []


def _can_switch_uid() -> bool:
    """Whether a child of this process may take another uid (root on the host, not root of
    a user namespace that maps no other uid)."""
    if not _switch_uid:
        ok = hasattr(os, "geteuid") and os.geteuid() == 0
        if ok:
            probe = subprocess.run([sys.executable, "-I", "-S", "-c",
                                    f"import os; os.setgroups([]); os.setresgid(*[{UID_BASE}] * 3); "
                                    f"os.setresuid(*[{UID_BASE}] * 3)"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env={})
            ok = probe.returncode == 0
        _switch_uid.append(ok)
    return _switch_uid[0]


class _UidLease:
    """A uid no other group on this machine uses right now (a lock file per uid), handed
    out only once no process runs as it; everything running as it is killed on release."""

    def __init__(self):
        folder = lock_folder("autograde-rank-uids")  # one per machine, whatever tempfile.tempdir a run set
        start = (os.getpid() * 7 + threading.get_ident()) % UID_COUNT
        for i in range(UID_COUNT):
            uid = UID_BASE + (start + i) % UID_COUNT
            fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if _processes_of(uid):
                _kill_uid(uid)
                if _processes_of(uid):
                    os.close(fd)
                    continue
            self.uid, self._fd = uid, fd
            return
        raise RuntimeError("no free uid for a group of ranks")

    def release(self) -> None:
        _kill_uid(self.uid)
        os.close(self._fd)


def _processes_of(uid: int) -> list:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read(2048).split(b"\n") if b":" in line)
            if str(uid).encode() in fields.get(b"Uid", b"").split()[:3] and fields.get(b"State", b"").split()[:1] != [b"Z"]:
                found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid``, from a process of that uid (``kill(-1)`` reaches
    exactly them), until none is left (at most 2 s)."""
    deadline = time.monotonic() + 2
    while _processes_of(uid) and time.monotonic() < deadline:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.005)


class _Cgroup:
    """A control group per group of ranks, where the machine lets the grader make one (cgroup
    v1's ``cpu``, ``pids`` and ``memory`` controllers, or v2's unified hierarchy): an equal
    share of the processors whatever the number of threads its ranks start (a classmate
    graded at the same time who spins forty threads takes one group's share, not forty),
    a cap on its tasks and on its memory. Best effort: where none can be made, the rlimits
    and the watchdog are the bounds."""

    ROOT = Path("/sys/fs/cgroup")

    def __init__(self, limits: Limits, world_size: int):
        self.dirs = []
        name = f"autograde-ranks/{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        settings = {"cpu": {"cpu.shares": "1024"},
                    "pids": {"pids.max": str(limits.tasks_per_rank * world_size + 8)},
                    "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)}}
        if (self.ROOT / "cgroup.controllers").exists():  # v2: one hierarchy
            settings = {"": {"cpu.weight": "100", "pids.max": settings["pids"]["pids.max"],
                             "memory.max": str(limits.memory_bytes)}}
        for controller, values in settings.items():
            folder = self.ROOT / controller / name if controller else self.ROOT / name
            try:
                folder.mkdir(parents=True)
                self.dirs.append(folder)
                for key, value in values.items():
                    with contextlib.suppress(OSError):
                        (folder / key).write_text(value)
            except OSError:
                continue

    def add(self, pid: int) -> None:
        for folder in self.dirs:
            with contextlib.suppress(OSError):
                (folder / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for folder in self.dirs:
            for _ in range(50):  # empty once the group's processes are reaped
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)


def _run_zygote(world_size, program, payloads, limits, isolate, checkpoints) -> GroupResult:
    zygote = rank_zygote(isolate)
    mode = zygote.isolation
    lease = _UidLease() if zygote.switch_uid else None
    jail = tempfile.mkdtemp(prefix="autograde-jail-") if mode == "uid" else None
    if jail:
        os.chmod(jail, 0o555)
    walls = RankWalls(mode=mode, uid=lease.uid if lease else None, jail=jail, cpu_s=int(limits.cpu_s) + 5,
                      file_mb=limits.file_mb, tmp_mb=limits.tmp_mb, tasks=limits.tasks_per_rank * world_size)
    port = PRIVATE_PORT if mode == "namespaces" else _free_port()
    job = {"world_size": world_size, "walls": asdict(walls), "port": port, "threads": limits.threads}
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(world_size)]
    status_fd = os.memfd_create("rank-status", os.MFD_CLOEXEC)
    os.ftruncate(status_fd, SLOTS * world_size * 8)
    status = status_view(status_fd, world_size)
    channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    result = GroupResult(world_size, messages=[[] for _ in range(world_size)],
                         isolated=mode == "namespaces", isolation=mode)
    leader = capture = None
    conns = []
    cgroup = _Cgroup(limits, world_size)
    try:
        leader = zygote.spawn(job, [b.fileno() for _, b in pairs] + [status_fd, theirs.fileno()])
        for _, b in pairs:
            b.close()
        theirs.close()
        os.close(status_fd)
        status_fd = None
        cgroup.add(leader)  # before its first fork: everything the group starts is in it
        channel.sendall(b"go")
        channel.settimeout(START_TIMEOUT)
        line, fds, _, _ = socket.recv_fds(channel, 4096, 1)
        hello = json.loads(line) if line else {"fatal": "the group's leader stopped"}
        if "init" not in hello:
            for fd in fds:
                os.close(fd)
            result.outcome, result.detail = "refused", f"the group could not be started: {hello.get('fatal')}"
            return result
        if fds:
            capture = Capture(socket.socket(fileno=fds[0]), world_size, port, shared=mode != "namespaces")
        conns = [Connection(a.detach()) for a, _ in pairs]
        setup = program.setup()
        for conn, data in zip(conns, payloads):
            conn.send_bytes(setup)
            conn.send_bytes(data)
        _watch(result, conns, status, limits, checkpoints, lambda: _descendants(leader), capture,
               ranks=lambda: _rank_trees(leader, depth=2))  # leader -> init -> ranks
    finally:
        if capture is not None:
            capture.close()
        if leader is not None:
            zygote.kill(leader)
        cgroup.remove()
        if lease is not None:
            lease.release()
        for conn in conns:
            conn.close()
        for a, b in pairs:
            a.close()
            b.close()
        channel.close()
        if status_fd is not None:
            os.close(status_fd)
        with contextlib.suppress(TypeError, ValueError, BufferError):
            status.release()
        if jail:
            os.rmdir(jail)
    return result


# ----------------------------------------------------------------------------- forked from here

def _unshare(flags: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(ctypes.c_int(flags)) == 0


def namespaces_available() -> tuple[bool, str]:
    """Whether this process may give a group its own network and PID namespaces (probed in
    a throwaway child), and why not."""
    pid = os.fork()
    if pid == 0:
        code = 0 if _unshare(0x40000000 | 0x20000000) else 1
        if code == 0:
            try:
                loopback_up()
            except OSError:
                code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code == 0, {0: "", 1: "unshare(CLONE_NEWNET|CLONE_NEWPID) refused (needs root)",
                       2: "cannot bring up the loopback of a new network namespace"}.get(code, "probe failed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forked_rank(rank, world_size, rank_main, conn, status, port, limits, drop_ids, prepare) -> None:
    """The body of one rank forked from this process; never returns. A process the
    student's code forks from it and that returns here ends here too."""
    me, code = os.getpid(), 0
    tracker = Tracker(status, rank)
    try:
        import faulthandler

        faulthandler.disable()  # a rank's crash is reported by the watchdog, not dumped here
        # In a Jupyter kernel sys.stdout/stderr send through the kernel's I/O thread, which a
        # forked rank lacks: each write would wait seconds for it. Write to the fds instead.
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        payload = conn.recv_bytes()

        def drop():
            if prepare is not None:  # imports the grader needs, while the interpreter's files are readable
                prepare()
            if drop_ids:  # after the rendezvous: the ranks need no privilege to compute and send
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)

        if isinstance(rank_main, RankProgram):
            if rank_main.quiet:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                os.close(devnull)
            run_rank(rank, world_size, conn, tracker, port, limits.threads, rank_main, payload, drop)
        else:
            _run_function(rank, world_size, rank_main, conn, tracker, port, limits, payload, drop)
    except BaseException as exc:  # the grader reads why, one line
        code = 1
        if os.getpid() == me:
            crash_report(conn, exc)
    finally:
        if os.getpid() == me:  # only the rank itself says it has finished
            tracker.finished()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(code)


def _run_function(rank, world_size, rank_main, conn, tracker, port, limits, payload, drop) -> None:
    """A plain ``rank_main(rank, world_size, payload, report)`` (the engine's own tests)."""
    import torch
    import torch.distributed as dist

    from .ranks.rank import install_socket_guard, install_tracking, load_filter

    torch.set_num_threads(limits.threads)

    def report(message: dict) -> None:
        data = json.dumps(message).encode()
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too large")
        conn.send_bytes(data)

    tracker.enter("init_process_group")
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tracker.leave()
    import encodings.idna  # noqa: F401
    drop()
    install_tracking(tracker)
    install_socket_guard(report)
    if not load_filter():
        report({"crash": "the system-call filter could not be loaded"})
        return
    rank_main(rank, world_size, payload, report)


def _forked_init(world_size, rank_main, children, status, port, limits, drop_ids, prepare) -> None:
    """PID 1 of the group's namespace: forks the ranks, reaps whatever exits."""
    ranks = {}
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            _forked_rank(rank, world_size, rank_main, children[rank], status, port, limits, drop_ids, prepare)
        ranks[pid] = rank
    while True:  # reap ranks and anything re-parented to us, until the grader kills us
        try:
            pid, wstatus = os.wait()
            if pid in ranks:  # how it ended: 1 + its signal, or 1000 + its exit code
                status[ranks[pid] * SLOTS + 3] = (1 + os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus)
                                                  else 1000 + os.WEXITSTATUS(wstatus))
        except ChildProcessError:
            time.sleep(0.05)
        except BaseException:
            os._exit(0)


def _run_forked(world_size, rank_main, payloads, limits, isolate, prepare, checkpoints) -> GroupResult:
    """Ranks forked from this process (a self-check): see the module."""
    from multiprocessing import Pipe
    import struct

    result = GroupResult(world_size, messages=[[] for _ in range(world_size)])
    isolated = isolate and namespaces_available()[0]
    port = PRIVATE_PORT if isolated else _free_port()
    memory = mmap.mmap(-1, SLOTS * world_size * 8)  # this group's alone (anonymous, shared)
    status = memoryview(memory).cast("d")
    pipes = [Pipe(duplex=True) for _ in range(world_size)]
    ready_r, ready_w = os.pipe()
    leader = os.fork()
    if leader == 0:
        try:
            os.close(ready_r)
            for ours, _ in pipes:
                ours.close()
            if isolated and not _unshare(0x40000000 | 0x20000000):
                os._exit(3)
            if isolated:
                loopback_up()
            init = os.fork()
            if init == 0:
                _forked_init(world_size, rank_main, [theirs for _, theirs in pipes], status, port, limits,
                             drop_ids=isolated and os.geteuid() == 0, prepare=prepare)
            os.write(ready_w, struct.pack("q", init))
            os.waitpid(init, 0)
        finally:
            os._exit(0)
    os.close(ready_w)
    for _, theirs in pipes:
        theirs.close()
    raw = os.read(ready_r, 8)
    init_pid = struct.unpack("q", raw)[0] if len(raw) == 8 else 0
    os.close(ready_r)
    result.isolated, result.isolation = isolated, "fork" + (" (namespaces)" if isolated else "")
    conns = [ours for ours, _ in pipes]
    for conn, data in zip(conns, payloads):
        conn.send_bytes(data)
    try:
        _watch(result, conns, status, limits, checkpoints, lambda: _descendants(init_pid),
               ranks=lambda: _rank_trees(init_pid, depth=1))
    finally:
        _kill_forked(init_pid, leader, isolated)
        for conn in conns:
            conn.close()
        with contextlib.suppress(BufferError):
            status.release()
    return result


def _kill_forked(init_pid: int, leader: int, isolated: bool) -> None:
    """Kill everything a forked group started. In a PID namespace, killing its init is
    enough: the kernel kills the rest. Without one, kill each descendant (collected first)."""
    victims = [init_pid] if isolated else (_descendants(init_pid)[::-1] if init_pid > 0 else [])
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(leader, os.WNOHANG)[0] == leader:
                return
        except ChildProcessError:
            return
        time.sleep(0.002)
    try:
        os.kill(leader, signal.SIGKILL)
        os.waitpid(leader, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


# ----------------------------------------------------------------------------- the watchdog

def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _rank_trees(root: int, depth: int) -> list[list[int]]:
    """Each rank's processes (the rank first), the ranks being ``root``'s descendants at
    ``depth``."""
    level = [root]
    for _ in range(depth):
        level = [c for p in level for c in _children(p)]
    return [_descendants(rank) for rank in level]


def _held(tree: list[int], private_tmp: bool) -> int:
    """Bytes a rank holds, read from outside: the resident anonymous and shared memory of its
    processes (``/proc/PID/status``: RssAnon, RssShmem; pages a process forked from it shares
    count twice), what its open memfds and pipes hold (:func:`_held_by_descriptors`: memory
    no mapping shows) and, with ``private_tmp`` (``namespaces`` mode: each rank has its own
    tmpfs), what the files in its ``/tmp`` and ``/dev/shm`` take."""
    total = _held_by_descriptors(tree)
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    seen = set()
    for folder in ("tmp", "dev/shm") if private_tmp else ():
        try:
            fs = os.statvfs(f"/proc/{tree[0]}/root/{folder}")
            key = (fs.f_fsid, fs.f_blocks)
            if key not in seen and fs.f_blocks:
                seen.add(key)
                total += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
        except (OSError, IndexError):
            continue
    return total


def _held_by_descriptors(tree: list[int]) -> int:
    """Bytes held behind the open file descriptors of the processes ``tree``, each file once:
    a memfd's allocated blocks, and the bytes waiting unread in a pipe (read from outside with
    ``FIONREAD`` on the pipe opened afresh through ``/proc``: nothing is consumed). Neither
    shows in a process's resident memory unless mapped, so state written to a memfd or left
    in a pipe between steps would otherwise be held unseen. Descriptors the grader may not
    inspect are skipped."""
    import array
    import termios

    total, seen = 0, set()
    for pid in tree:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not target.startswith(("/memfd:", "pipe:")):
                    continue
                st = os.stat(path)
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                if target.startswith("/memfd:"):
                    total += st.st_blocks * 512
                    continue
                reopened = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    waiting = array.array("i", [0])
                    fcntl.ioctl(reopened, termios.FIONREAD, waiting)
                    total += max(0, waiting[0])
                finally:
                    os.close(reopened)
            except OSError:
                continue
    return total


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
#: CPU seconds a stuck group may still spend per rank and per second of the window judged
#: (gloo's event loops and the ranks' harness threads wake up now and then: four idle ranks
#: were measured at 0.10 CPU s in 10 s, 0.0025 a rank-second); a rank that computes, even on a
#: loaded machine, spends about 1 a second, or waits to run. (A fixed 0.1 s, right for two
#: ranks over 5 s, was at the edge for four over 10 s: a rank asleep there went unnoticed
#: until the wall limit.)
IDLE_CPU_S_PER_RANK_S = 0.01
#: At a checkpoint that settles: how long the group must spend no CPU, no thread runnable,
#: before the grader cuts its traffic, and the most it waits for that (then it cuts anyway).
SETTLE_IDLE_S, SETTLE_MAX_S = 0.05, 2.0


def _rss(pid: int) -> int:
    """Resident set size from ``/proc/PID/statm`` (cheap: a counter). Never less than the
    proportional set size, so a group whose RSS sum is under the limit is under it in PSS."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


#: Threads whose being runnable is no sign of work waiting for a core: gloo's event loop
#: (one a rank) wakes now and then while its group waits, and with eight ranks one of them was
#: seen runnable in two samples in a row every few seconds, so a group whose ranks all slept was
#: never idle. (A thread a rank names so is only judged by the CPU it spends: no way to look busy.)
EVENT_LOOP_THREADS = (b"gloo_tcp_loop",)


def _activity(pids, event_loops: bool = True) -> tuple[float, set]:
    """``(CPU seconds, runnable threads)`` of the processes ``pids``, from ``/proc``: what
    tells a slow group (busy, or waiting for a core) from a stuck one. ``event_loops=False``
    leaves the event-loop threads (:data:`EVENT_LOOP_THREADS`) out of the runnable ones, as
    the judgement of a stuck group does; a checkpoint that settles counts them (one may be
    about to send a collective's bytes)."""
    cpu, runnable = 0.0, set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / TICKS
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                    head, _, rest = f.read().rpartition(b")")
                    if rest.split()[:1] == [b"R"] and (event_loops or head.partition(b"(")[2] not in EVENT_LOOP_THREADS):
                        runnable.add(int(task))
        except (OSError, ValueError, IndexError):
            pass
    return cpu, runnable


def _settle(capture, group) -> None:
    """Every rank waits at a checkpoint: read the capture until the group has spent no CPU
    and had no thread runnable for :data:`SETTLE_IDLE_S` (or :data:`SETTLE_MAX_S` has
    passed). A collective started asynchronously before the checkpoint is sent by a
    background thread (gloo's worker), which on a loaded machine may not have run yet when
    the main threads arrive: cut at once, its bytes would fall after the checkpoint. The
    ranks themselves cannot wait for it: a student's thread could run in that wait."""
    start = last = time.monotonic()
    before = _activity(group())[0]
    while True:
        time.sleep(0.01)
        now = time.monotonic()
        capture.drain()
        cpu, runnable = _activity(group())
        if runnable or cpu > before:
            before, last = cpu, now
        if now - last >= SETTLE_IDLE_S or now - start >= SETTLE_MAX_S:
            return


def _hang(status, world_size, stall_s, now) -> str | None:
    blocked = [(now - status[r * SLOTS + 1], r, OPERATIONS[int(status[r * SLOTS])])
               for r in range(world_size) if status[r * SLOTS] and not status[r * SLOTS + 2]
               and int(status[r * SLOTS]) not in NOT_A_HANG]
    blocked = [b for b in blocked if b[0] > stall_s]
    if not blocked:
        return None
    # The longest-blocked rank; among equals (a deadlock blocks all at once) the lowest
    # rank that is not rank 0, whose peer is usually the one that never sent.
    seconds, rank, op = max(blocked, key=lambda b: (round(b[0]), -b[1]))
    return f"rank {rank} hung in {op} after {stall_s:g} s"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _answer(conns, answers: dict, open_conns) -> None:
    """Send each waiting rank its checkpoint answer (a rank already gone is skipped)."""
    for r, word in (answers or {}).items():
        conn = conns[r]
        if conn in open_conns:
            try:
                conn.send_bytes(str(word).encode()[:64])
            except (OSError, ValueError):
                pass


def _watch(result: GroupResult, conns, status, limits: Limits, checkpoints, group, capture=None,
           ranks=None) -> None:
    """Read the ranks' messages and watch the group until every rank has finished, or it
    hangs, runs out of time, CPU or memory, or a rank dies (``group()``: its processes).
    With a ``capture`` (:class:`sandbox.wire.Capture`), the ranks' traffic is cut at every
    checkpoint answered into ``result.segments``. ``ranks()``: each rank's processes (for
    the memory a checkpoint asks to measure)."""
    if capture is not None:
        result.segments = []
    try:
        _watch_loop(result, conns, status, limits, checkpoints, group, capture, ranks)
    finally:
        if capture is not None:
            result.segments.append({"checkpoint": "end", "traffic": capture.take()})
            result.unowned_bytes = capture.finish()
            result.wire_complete = capture.dropped() == 0


def _watch_loop(result: GroupResult, conns, status, limits: Limits, checkpoints, group, capture, ranks) -> None:
    world_size = result.world_size
    start = time.monotonic()
    open_conns = {conn: rank for rank, conn in enumerate(conns)}
    sent = [[0, 0] for _ in range(world_size)]  # per rank: bytes, messages
    next_sample, errored, done_ranks, was_runnable = 0.0, None, set(), set()
    samples = []  # (when, the group's CPU seconds, a thread runnable since the sample before)
    while True:
        now = time.monotonic()
        for conn in wait(list(open_conns), timeout=0.05):
            rank = open_conns[conn]
            try:
                data = conn.recv_bytes(MAX_MESSAGE)
            except (EOFError, OSError):
                del open_conns[conn]
                continue
            sent[rank][0] += len(data)
            sent[rank][1] += 1
            if sent[rank][0] > MAX_RANK_BYTES or sent[rank][1] > MAX_RANK_MESSAGES:
                result.outcome = "crashed"
                result.detail = (f"rank {rank} sent the grader more than {MAX_RANK_BYTES // 2**20} MB or "
                                 f"{MAX_RANK_MESSAGES:,} messages")
                return
            try:
                message = json.loads(data)
            except ValueError:
                message = {"crash": "a message that is not JSON"}
            if not isinstance(message, dict):
                message = {"crash": "a message that is not a JSON object"}
            if "ports" in message and not result.ports:
                result.ports = [None] * world_size
            if "ports" in message and sent[rank][1] == 1:  # its first message, before its code ran
                ports = message["ports"]
                sockets = [tuple(p) for p in ports if isinstance(p, list) and len(p) == 2
                           and all(isinstance(x, int) for x in p)][:MAX_RANK_SOCKETS] if isinstance(ports, list) else []
                result.ports[rank] = sorted({local for local, _ in sockets})
                if capture is not None:
                    capture.learn(rank, sockets)
                    if None not in result.ports:  # every rank has met: the store's work is done
                        capture.drain()
                        capture.store_open = True
                continue
            if "socket" in message:
                result.sockets.append(f"rank {rank}: {str(message['socket'])[:200]}")
            if "checkpoint" in message:
                answers = checkpoints.arrive(rank, message) if checkpoints else {rank: "go"}
                if answers and capture is not None:  # what was sent up to here, before anyone goes on
                    if getattr(checkpoints, "settles", None) and checkpoints.settles(message):
                        _settle(capture, group)
                    point = message.get("point")
                    result.segments.append({"checkpoint": str(message["checkpoint"])[:40], "case": message.get("case"),
                                            "point": point if isinstance(point, (int, str, list)) else None,
                                            "ranks": sorted(answers), "traffic": capture.take()})
                if answers and ranks is not None and message.get("measure") == "memory":
                    point = message.get("point")
                    result.memory.append({"checkpoint": str(message["checkpoint"])[:40], "case": message.get("case"),
                                          "point": point if isinstance(point, (int, str)) else None,
                                          "held": {tree[0]: _held(tree, result.isolation == "namespaces")
                                                   for tree in ranks() if tree}})
                _answer(conns, answers, open_conns)
                if checkpoints is None or not getattr(checkpoints, "record", False):
                    continue
            result.messages[rank].append(message)
            if "error" in message and errored is None:
                errored = now
        # A rank sets its finished flag after its last message: once all are set, what is
        # still in the sockets is read, and the group is done.
        if all(status[r * SLOTS + 2] for r in range(world_size)):
            if not wait(list(open_conns), timeout=0.02):
                break
            continue
        def drained(r) -> bool:  # nothing of rank r's left to read
            return conns[r] not in open_conns or not wait([conns[r]], timeout=0)

        if checkpoints is not None:
            for r in range(world_size):
                if status[r * SLOTS + 2] and r not in done_ranks and drained(r):
                    done_ranks.add(r)
                    _answer(conns, checkpoints.finished(r), open_conns)
        ended = [r for r in range(world_size) if status[r * SLOTS + 3] and not status[r * SLOTS + 2]]
        if ended and drained(ended[0]):
            r = ended[0]  # gone without saying it had finished: killed, or os._exit
            op = OPERATIONS[int(status[r * SLOTS])]
            how = int(status[r * SLOTS + 3])
            result.outcome = "crashed"
            result.detail = (f"rank {r} was killed by {_signal_name(how - 1)}" if how < 1000 else
                             f"rank {r} exited with status {how - 1000} (sys.exit or os._exit?)")
            result.detail += f" in {op}" if op else ""
            break
        if capture is not None:
            capture.drain()  # (the socket's buffer is large, but not endless)
        if now >= next_sample:
            next_sample = now + 0.2
            pids = group()
            cpu, runnable = _activity(pids, event_loops=False)
            result.cpu_s = cpu
            # Progress: CPU time spent (more than an idle event loop spends), or a thread
            # runnable in two samples running (waiting for a core on a loaded machine).
            samples.append((now, cpu, bool(runnable & was_runnable)))
            was_runnable = runnable
            while len(samples) > 2 and samples[1][0] < now - max(limits.stall_s, limits.idle_s):
                samples.pop(0)
            if cpu > limits.cpu_s:
                result.outcome = "timeout"
                result.detail = f"the ranks used more than {limits.cpu_s:g} CPU seconds"
                break
            # PSS counts a page shared by k processes as 1/k in each (torch's libraries, the
            # pages the ranks inherit), but reading smaps_rollup walks every mapping (~45 ms
            # for a process with torch loaded): read only when the RSS sum is over the limit.
            used = sum(_rss(p) for p in pids)
            if used > limits.memory_bytes:
                used = sum(_pss(p) for p in pids)
            result.peak_memory_bytes = max(result.peak_memory_bytes, used)
            if used > limits.memory_bytes:
                result.outcome = "memory"
                result.detail = (f"the ranks together used {used / 2**30:.2f} GiB, more than "
                                 f"the limit of {limits.memory_bytes / 2**30:.2f} GiB")
                break
        def idle_for(seconds) -> bool:  # the group spent almost no CPU and no thread waited to run
            window = [s for s in samples if s[0] >= now - seconds - 0.25]
            return (len(window) > 1 and window[0][0] <= now - seconds + 0.25
                    and window[-1][1] - window[0][1] < IDLE_CPU_S_PER_RANK_S * world_size * seconds
                    and not any(s[2] for s in window))

        if checkpoints is not None and hasattr(checkpoints, "tick"):  # a policy that waits for progress
            _answer(conns, checkpoints.tick(now, idle_for), open_conns)

        hang = _hang(status, world_size, limits.stall_s, now) if idle_for(limits.stall_s) else None
        if hang is None and errored is not None and now - errored > limits.stall_after_error_s:
            hang = _hang(status, world_size, limits.stall_after_error_s, now)
        if hang:
            result.outcome, result.detail = "hung", hang
            break
        asleep = [r for r in range(world_size) if not status[r * SLOTS + 2] and not status[r * SLOTS]]
        if asleep and now - start > limits.idle_s and idle_for(limits.idle_s):
            result.outcome = "timeout"  # neither computing nor waiting for a message: sleeping
            result.detail = (f"rank {asleep[0]} did nothing for {limits.idle_s:g} s (no CPU, not waiting for a "
                             "message: a sleep?)")
            break
        if now - start > limits.wall_s:
            running = [r for r in range(world_size) if not status[r * SLOTS + 2]]
            result.outcome = "timeout"
            result.detail = f"rank {running[0] if running else 0} did not finish within {limits.wall_s:g} s"
            break
    if result.ok:
        crashes = [(r, m["crash"]) for r, ms in enumerate(result.messages) for m in ms if "crash" in m]
        if crashes:
            result.outcome = "crashed"
            result.detail = f"rank {crashes[0][0]} stopped: {str(crashes[0][1])[:300]}"
    result.wall_s = time.monotonic() - start
