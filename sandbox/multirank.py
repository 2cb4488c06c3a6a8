"""Run the ranks of one submission as a group: its own network and PID namespaces, one
watchdog for time, memory and hung ranks, and nothing left behind.

    result = run_ranks(world_size, rank_main, inputs, limits=Limits())

The grader's process (torch already imported) is the zygote: it forks a *leader*, which
unshares a network namespace (only a loopback, brought up here: no other address exists,
and no other submission's ranks are on it) and a PID namespace, then forks the namespace's
init, which forks the ranks. Every rank joins one gloo group over ``127.0.0.1`` of its own
namespace. Killing the init kills everything in the namespace (kernel rule for PID
namespaces), so a rank that forks, daemonises or sleeps dies with the group.

Each rank runs ``rank_main(rank, world_size, payload, report)`` where ``payload`` is the
bytes the grader sent this rank alone (through its own pipe) and ``report(dict)`` streams a
JSON message back. Messages are JSON, never pickles: the grader never unpickles what a
submission wrote.

The watchdog sees, through shared memory, which point-to-point or collective call each rank
is blocked in and since when, so a deadlock is reported as ``rank 1 hung in recv after 5 s``.
Memory is the proportional set size summed over every process of the group (read only when
the cheap sum of resident sizes, which is never below it, is over the limit).

Where the kernel refuses namespaces (not root, or a container without them), the group runs
unisolated on a free port and ``GroupResult.isolated`` is False; callers decide whether that
is acceptable.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from multiprocessing import Pipe, RawArray
from multiprocessing.connection import wait
import platform

# Imported here, in the grader: a rank that has dropped to an unprivileged uid may not be
# able to read the course's files any more (run_autograder makes them private).
from .confined.kernel import PR_SET_NO_NEW_PRIVS, SetupError, load_libc
from .confined.seccomp import SECCOMP_ARCH, install_seccomp

CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
#: The rendezvous port inside a private namespace: the same for every group, which is safe
#: only because each group has a loopback of its own (two groups at once do not collide).
PRIVATE_PORT = 29500
MAX_MESSAGE = 64 * 1024 * 1024
#: Status slots per rank in shared memory: operation code, start time, finished flag, and
#: the signal that killed it (written by the namespace's init, which reaps the ranks).
SLOTS = 4
OPERATIONS = ("", "send", "recv", "isend wait", "irecv wait", "batch_isend_irecv wait",
              "barrier", "collective", "init_process_group", "collective wait", "checkpoint")
#: Waiting for the grader at a checkpoint is not a hang of the rank's own making.
NOT_A_HANG = {OPERATIONS.index("checkpoint")}


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0  # the whole group, start to end
    stall_s: float = 5.0  # one rank blocked in one communication call
    memory_bytes: int = 4 * 1024**3  # the group's processes together (PSS)
    threads: int = 1  # torch threads per rank: ranks share the machine's cores
    #: once a rank has reported an error, a peer blocked this long is waiting for it (the
    #: error is the cause; waiting the full ``stall_s`` would add nothing)
    stall_after_error_s: float = 1.0


@dataclass(frozen=True)
class RankProgram:
    """What every rank of a group runs: grader modules given as source (``modules``, ``((name,
    source), ...)`` in the order they import each other; loaded as the package
    :data:`PROGRAM_PACKAGE` inside the rank, so they may import one another relatively), the
    function ``entry`` (``"module:function"``) called with a :class:`RankContext`, and the
    student's code: ``sources`` (``[(filename, source)]``, run in the rank) defining
    ``names``. ``local``, for a self-check only, returns ``{name: object}`` from the
    calling process's own objects instead (the ranks are then forked from it)."""

    modules: tuple
    entry: str
    sources: tuple = ()
    names: tuple = ()
    local: object = None
    quiet: bool = True


#: The package a rank's grader modules are loaded as (see :class:`RankProgram`).
PROGRAM_PACKAGE = "_grader"


class RankContext:
    """What a rank's entry function gets: ``rank``, ``world_size``, ``payload`` (the bytes the
    grader sent this rank alone), ``report(dict)`` (one JSON message back) and ``student()``,
    ``{name: object}`` of the submission (LookupError saying why when a name is missing)."""

    def __init__(self, rank, world_size, payload, report, program, checkpoint=None):
        self.rank, self.world_size, self.payload, self.report = rank, world_size, payload, report
        self._program = program
        self._checkpoint = checkpoint

    def checkpoint(self, label: str, **info) -> str:
        """Tell the grader this rank has reached ``label`` (with ``info``, plain data) and
        wait for its answer (``"go"``, ``"stop"``...): the grader decides when the ranks go
        on (see ``run_ranks``' ``checkpoints``)."""
        return self._checkpoint(dict(info, checkpoint=str(label)))

    def student(self) -> dict:
        program = self._program
        if program.local is not None:
            return dict(program.local())
        loader = sys.modules[f"{PROGRAM_PACKAGE}.rank_common"]
        return loader.load_names([tuple(u) for u in program.sources], program.names)


def load_program(modules) -> dict:
    """Load ``modules`` (``((name, source), ...)``) as :data:`PROGRAM_PACKAGE`'s submodules,
    in order; ``{name: module}``."""
    import types

    package = types.ModuleType(PROGRAM_PACKAGE)
    package.__path__ = []
    package.__package__ = PROGRAM_PACKAGE
    sys.modules[PROGRAM_PACKAGE] = package
    loaded = {}
    for name, source in modules:
        module = types.ModuleType(f"{PROGRAM_PACKAGE}.{name}")
        module.__package__ = PROGRAM_PACKAGE
        module.__file__ = f"<{PROGRAM_PACKAGE}/{name}.py>"
        sys.modules[module.__name__] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        setattr(package, name, module)
        loaded[name] = module
    return loaded


def program_main(program: RankProgram):
    """The ``rank_main(rank, world_size, payload, report, checkpoint)`` that runs ``program``;
    its ``prepare()`` loads the program's modules and runs their ``warm()`` (each module's
    imports and first uses, while the rank may still read the interpreter's files)."""
    loaded = {}

    def prepare():
        loaded.update(load_program(program.modules))
        for module in loaded.values():
            if callable(getattr(module, "warm", None)):
                module.warm()

    def main(rank, world_size, payload, report, checkpoint):
        if program.quiet:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.close(devnull)
        if not loaded:
            prepare()
        module, function = program.entry.split(":")
        getattr(loaded[module], function)(RankContext(rank, world_size, payload, report, program, checkpoint))
    main.takes_checkpoint = True
    main.prepare = prepare
    return main


@dataclass
class GroupResult:
    world_size: int
    messages: list = field(default_factory=list)  # per rank: the dicts it reported
    outcome: str = "ok"  # ok | hung | timeout | memory | crashed | refused
    detail: str = ""
    isolated: bool = False
    sockets: list = field(default_factory=list)  # outside addresses a rank tried to reach
    wall_s: float = 0.0
    peak_memory_bytes: int = 0  # the largest sample: PSS over the limit's size, else RSS (above PSS)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


# ----------------------------------------------------------------------------- isolation

def _unshare(flags: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(ctypes.c_int(flags)) == 0


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def namespaces_available() -> tuple[bool, str]:
    """Whether this process may give a group its own network and PID namespaces (probed in
    a throwaway child), and why not."""
    pid = os.fork()
    if pid == 0:
        code = 0 if _unshare(CLONE_NEWNET | CLONE_NEWPID) else 1
        if code == 0:
            try:
                _loopback_up()
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


# ----------------------------------------------------------------------------- inside a rank

class _Tracker:
    """Writes, into shared memory, which blocking call this rank is in and since when."""

    def __init__(self, status, rank):
        self.status, self.base = status, rank * SLOTS

    def enter(self, op: str) -> None:
        self.status[self.base + 1] = time.monotonic()
        self.status[self.base] = OPERATIONS.index(op)

    def leave(self) -> None:
        self.status[self.base] = 0


class _TrackedWork:
    def __init__(self, work, tracker, op):
        self._work, self._tracker, self._op = work, tracker, op

    def wait(self, *args, **kwargs):
        self._tracker.enter(self._op)
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            self._tracker.leave()

    def __getattr__(self, name):
        return getattr(self._work, name)


def _install_tracking(tracker: _Tracker) -> None:
    """Wrap torch.distributed's blocking entry points so the watchdog can name a hang."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def blocking(fn, op):
        def wrapped(*args, **kwargs):
            tracker.enter(op)
            try:
                return fn(*args, **kwargs)
            finally:
                tracker.leave()
        return wrapped

    def returning_work(fn, op):
        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            if isinstance(out, list):
                return [_TrackedWork(w, tracker, op) for w in out]
            return None if out is None else _TrackedWork(out, tracker, op)
        return wrapped

    patched = {"send": blocking(dist.send, "send"), "recv": blocking(dist.recv, "recv"),
               "isend": returning_work(dist.isend, "isend wait"),
               "irecv": returning_work(dist.irecv, "irecv wait"),
               "batch_isend_irecv": returning_work(dist.batch_isend_irecv, "batch_isend_irecv wait"),
               "barrier": blocking(dist.barrier, "barrier")}
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter", "all_to_all",
                 "all_to_all_single", "all_gather_single", "reduce_scatter_single"):
        fn = getattr(dist, name, None)
        if fn is not None:  # async_op=True returns a work: its wait() is watched too
            patched[name] = returning_work(blocking(fn, "collective"), "collective wait")
    for name, fn in patched.items():  # torch.distributed's names; c10d's own stay real
        setattr(dist, name, fn)
    # P2POp keeps a reference to the function it is given and checks it against isend/irecv.
    original_p2p = dist.P2POp.__new__

    def p2p_new(cls, op, *args, **kwargs):
        op = {patched["isend"]: c10d.isend, patched["irecv"]: c10d.irecv}.get(op, op)
        return original_p2p(cls, op, *args, **kwargs)
    dist.P2POp.__new__ = staticmethod(p2p_new)
    original_init = dist.P2POp.__init__

    def p2p_init(self, op, *args, **kwargs):
        op = {patched["isend"]: c10d.isend, patched["irecv"]: c10d.irecv}.get(op, op)
        original_init(self, op, *args, **kwargs)
    dist.P2POp.__init__ = p2p_init


def _install_socket_guard(report) -> None:
    """Record (and refuse) any socket a rank's Python code opens to an address other than
    its own namespace's loopback. gloo's own connections are made in C++ and pass here
    unseen; inside the private namespace nothing else is reachable anyway."""
    real_connect, real_connect_ex, real_sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto

    def allowed(address) -> bool:
        if isinstance(address, tuple) and address:
            return str(address[0]) in ("127.0.0.1", "localhost", "::1")
        return False  # unix sockets and the like: not a rank-to-rank channel

    def refuse(address):
        report({"socket": repr(address)[:200]})
        raise PermissionError(f"grading: a connection to {address!r} is not allowed")

    def connect(self, address):
        return real_connect(self, address) if allowed(address) else refuse(address)

    def connect_ex(self, address):
        return real_connect_ex(self, address) if allowed(address) else refuse(address)

    def sendto(self, data, *args):
        address = args[-1]
        return real_sendto(self, data, *args) if allowed(address) else refuse(address)

    real_create_connection = socket.create_connection

    def create_connection(address, *args, **kwargs):  # reports the address before the
        # filter refuses the socket itself (the rank may not create one: see _install_seccomp)
        return real_create_connection(address, *args, **kwargs) if allowed(address) else refuse(address)

    socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = connect, connect_ex, sendto
    socket.create_connection = create_connection


def _install_seccomp() -> bool:
    """The exercises' system-call filter (:mod:`sandbox.confined.seccomp`), loaded once
    gloo's connections are made: no new socket (gloo's stay open), no ``setsid``/``setpgid``,
    record locks, SysV/POSIX IPC, key rings, ptrace, inotify or new namespaces. False if it
    could not be loaded on Linux (the rank then runs no student code); True where there is
    no table for this machine (the namespaces still stand)."""
    if not sys.platform.startswith("linux"):
        return True
    if platform.machine() not in SECCOMP_ARCH:
        return True
    libc = load_libc()
    try:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        install_seccomp(libc)
    except SetupError:
        return False
    return True


def _rank(rank, world_size, rank_main, conn, status, port, limits, drop_ids, prepare) -> None:
    """The body of one rank process; never returns. A process the student's code forks
    from it and that returns here ends here too, without speaking for the rank."""
    code, me = 0, os.getpid()
    try:
        import faulthandler

        faulthandler.disable()  # a rank's crash is reported by the watchdog, not dumped here
        # In a Jupyter kernel sys.stdout/stderr send through the kernel's I/O thread, which a
        # forked rank lacks: each write would wait seconds for it. Write to the fds instead.
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        import torch
        import torch.distributed as dist

        torch.set_num_threads(limits.threads)

        def report(message: dict) -> None:
            data = json.dumps(message).encode()
            if len(data) > MAX_MESSAGE:
                raise ValueError("message too large")
            conn.send_bytes(data)

        payload = conn.recv_bytes()
        tracker = _Tracker(status, rank)

        def checkpoint(message: dict) -> str:
            report(message)
            tracker.enter("checkpoint")
            try:
                return conn.recv_bytes(1024).decode()
            finally:
                tracker.leave()
        tracker.enter("init_process_group")
        # c10d warns that a private namespace's loopback has no host name: not the student's
        # concern, so the rendezvous runs with this rank's stderr sent to /dev/null.
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=world_size)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
        tracker.leave()
        if prepare is not None:  # imports the grader needs, while the interpreter's files are readable
            prepare()
        import encodings.idna  # noqa: F401  (socket's host names; lazily imported otherwise)
        if drop_ids:  # after the rendezvous: the ranks need no privilege to compute and send
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        _install_tracking(tracker)
        _install_socket_guard(report)
        walls = _install_seccomp()
        if not walls:
            report({"crash": "the system-call filter could not be loaded"})
        elif getattr(rank_main, "takes_checkpoint", False):
            rank_main(rank, world_size, payload, report, checkpoint)
        else:
            rank_main(rank, world_size, payload, report)
    except BaseException as exc:  # the grader reads why, one line
        code = 1
        try:
            if os.getpid() == me:
                conn.send_bytes(json.dumps({"crash": f"{type(exc).__name__}: {exc}"[:500]}).encode())
        except Exception:
            pass
    finally:
        if os.getpid() == me:  # only the rank itself says it has finished
            status[rank * SLOTS + 2] = 1.0
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


def _init(world_size, rank_main, children, status, port, limits, drop_ids, prepare) -> None:
    """PID 1 of the group's namespace: forks the ranks, reaps whatever exits."""
    ranks = {}
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            _rank(rank, world_size, rank_main, children[rank], status, port, limits, drop_ids, prepare)
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


# ----------------------------------------------------------------------------- the grader's side

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


def _rss(pid: int) -> int:
    """Resident set size from ``/proc/PID/statm`` (cheap: a counter). Never less than the
    proportional set size, so a group whose RSS sum is under the limit is under it in PSS."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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


def run_ranks(world_size: int, rank_main, payloads: list[bytes], limits: Limits = Limits(),
              isolate: bool = True, prepare=None, checkpoints=None) -> GroupResult:
    """Run ``rank_main`` on ``world_size`` ranks as one isolated group (see the module).
    ``prepare()`` runs in each rank before it drops to an unprivileged uid (imports that
    need the interpreter's folders, which that uid may not read). ``checkpoints``: an
    object with ``arrive(rank, message) -> {rank: answer}`` and ``finished(rank) -> {rank:
    answer}`` deciding when ranks waiting at a checkpoint go on (default: at once, "go")."""
    if not 1 <= world_size <= 64 or len(payloads) != world_size:
        raise ValueError(f"world_size must be 1..64 with one payload per rank, got {world_size}")
    if isinstance(rank_main, RankProgram):
        rank_main = program_main(rank_main)
        prepare = rank_main.prepare
    result = GroupResult(world_size, messages=[[] for _ in range(world_size)])
    isolated = isolate and namespaces_available()[0]
    port = PRIVATE_PORT if isolated else _free_port()
    status = RawArray("d", SLOTS * world_size)
    pipes = [Pipe(duplex=True) for _ in range(world_size)]
    ready_r, ready_w = os.pipe()
    start = time.monotonic()
    leader = os.fork()
    if leader == 0:
        try:
            os.close(ready_r)
            for ours, _ in pipes:
                ours.close()
            if isolated and not _unshare(CLONE_NEWNET | CLONE_NEWPID):
                os._exit(3)
            if isolated:
                _loopback_up()
            init = os.fork()
            if init == 0:
                _init(world_size, rank_main, [theirs for _, theirs in pipes], status, port, limits,
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
    result.isolated = isolated
    conns = [ours for ours, _ in pipes]
    for conn, payload in zip(conns, payloads):
        conn.send_bytes(payload)
    open_conns = {conn: rank for rank, conn in enumerate(conns)}
    next_memory = 0.0
    errored = None  # when a rank first reported an error
    done_ranks = set()  # ranks whose end the checkpoints object has been told of
    try:
        while True:
            now = time.monotonic()
            for conn in wait(list(open_conns), timeout=0.05):
                rank = open_conns[conn]
                try:
                    data = conn.recv_bytes(MAX_MESSAGE)
                except (EOFError, OSError):
                    del open_conns[conn]
                    continue
                try:
                    message = json.loads(data)
                except ValueError:
                    message = {"crash": "a message that is not JSON"}
                if not isinstance(message, dict):
                    message = {"crash": "a message that is not a JSON object"}
                if "socket" in message:
                    result.sockets.append(f"rank {rank}: {message['socket']}")
                if "checkpoint" in message:
                    answers = checkpoints.arrive(rank, message) if checkpoints else {rank: "go"}
                    _answer(conns, answers, open_conns)
                    if checkpoints is None or not getattr(checkpoints, "record", False):
                        continue
                result.messages[rank].append(message)
                if "error" in message and errored is None:
                    errored = now
            # A rank sets its finished flag after its last message: once all are set, what
            # is still in the pipes is read, and the group is done. (The pipes never reach
            # end-of-file while the namespace's init holds their other ends.)
            if all(status[r * SLOTS + 2] for r in range(world_size)):
                if not wait(list(open_conns), timeout=0.02):
                    break
                continue
            if checkpoints is not None:
                for r in range(world_size):
                    if status[r * SLOTS + 2] and r not in done_ranks and not wait([conns[r]], timeout=0):
                        done_ranks.add(r)
                        _answer(conns, checkpoints.finished(r), open_conns)
            ended = [r for r in range(world_size) if status[r * SLOTS + 3] and not status[r * SLOTS + 2]]
            if ended and not wait([conns[ended[0]]], timeout=0):
                r = ended[0]  # gone without saying it had finished: killed, or os._exit
                op = OPERATIONS[int(status[r * SLOTS])]
                how = int(status[r * SLOTS + 3])
                result.outcome = "crashed"
                result.detail = (f"rank {r} was killed by {_signal_name(how - 1)}" if how < 1000 else
                                 f"rank {r} exited with status {how - 1000} (sys.exit or os._exit?)")
                result.detail += f" in {op}" if op else ""
                break
            hang = _hang(status, world_size, limits.stall_s, now)
            if hang is None and errored is not None and now - errored > limits.stall_after_error_s:
                hang = _hang(status, world_size, limits.stall_after_error_s, now)
            if hang:
                result.outcome, result.detail = "hung", hang
                break
            if now - start > limits.wall_s:
                running = [r for r in range(world_size) if not status[r * SLOTS + 2]]
                result.outcome = "timeout"
                result.detail = (f"rank {running[0] if running else 0} did not finish within "
                                 f"{limits.wall_s:g} s")
                break
            if now >= next_memory:
                # PSS counts a page shared by k processes as 1/k in each (torch's libraries,
                # the pages the ranks inherit from the grader), but reading smaps_rollup walks
                # every mapping (~45 ms for a process with torch loaded): read only when the
                # RSS sum, an upper bound, is over the limit.
                group = _descendants(init_pid)
                used = sum(_rss(p) for p in group)
                if used > limits.memory_bytes:
                    used = sum(_pss(p) for p in group)
                result.peak_memory_bytes = max(result.peak_memory_bytes, used)
                if used > limits.memory_bytes:
                    result.outcome = "memory"
                    result.detail = (f"the ranks together used {used / 2**30:.2f} GiB, more than "
                                     f"the limit of {limits.memory_bytes / 2**30:.2f} GiB")
                    break
                next_memory = now + 0.2
    finally:
        _kill_group(init_pid, leader, isolated)
        for conn in conns:
            conn.close()
    if result.ok:
        crashes = [(r, m["crash"]) for r, ms in enumerate(result.messages) for m in ms if "crash" in m]
        if crashes:
            result.outcome = "crashed"
            result.detail = f"rank {crashes[0][0]} stopped: {crashes[0][1]}"
    result.wall_s = time.monotonic() - start
    return result


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


def _kill_group(init_pid: int, leader: int, isolated: bool) -> None:
    """Kill everything the group started. In a PID namespace, killing its init is enough:
    the kernel kills the rest, and the dying init waits for them, so the leader's reaping of
    the init means the namespace is empty. Without one, kill each descendant (a rank that
    escaped with setsid is still a descendant until its parent dies: collect them first)."""
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
