"""One rank of a group: the walls it puts up before anything of the grader reaches it, the
rendezvous, and the program it runs (:class:`RankProgram`).

Everything here runs beside student code once the program starts: what a rank reports is a
claim, which the grader checks. Messages are JSON, never pickles, bounded in size; the
grader reads them strictly.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import socket
import sys
import time
import types
from dataclasses import dataclass

from ..confined.kernel import (CLONE_NEWNS, CLONE_NEWUSER, MS_NODEV, MS_NOSUID, PR_SET_DUMPABLE,
                               PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, SetupError, load_libc)
from ..confined.seccomp import SECCOMP_ARCH, install_seccomp

#: Status slots per rank in shared memory: operation code, since when, finished flag, and
#: how it ended (written by the group's init, which reaps the ranks: 1 + a signal, or
#: 1000 + an exit status).
SLOTS = 4
OPERATIONS = ("", "send", "recv", "isend wait", "irecv wait", "batch_isend_irecv wait",
              "barrier", "collective", "init_process_group", "collective wait", "checkpoint")
#: Waiting for the grader at a checkpoint is not a hang of the rank's own making.
NOT_A_HANG = {OPERATIONS.index("checkpoint")}
#: The largest message a rank may send (a rank's claims, JSON).
MAX_MESSAGE = 8 * 1024 * 1024
#: The package a rank's grader modules are loaded as (see :class:`RankProgram`).
PROGRAM_PACKAGE = "_grader"


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

    def setup(self) -> bytes:
        """What a rank forked from the rank zygote receives of the program (JSON)."""
        return json.dumps({"modules": [list(m) for m in self.modules], "entry": self.entry,
                           "sources": [list(u) for u in self.sources], "names": list(self.names)}).encode()

    @classmethod
    def from_setup(cls, data: bytes) -> "RankProgram":
        raw = json.loads(data)
        return cls(modules=tuple(tuple(m) for m in raw["modules"]), entry=raw["entry"],
                   sources=tuple(tuple(u) for u in raw["sources"]), names=tuple(raw["names"]))


class RankContext:
    """What a rank's entry function gets: ``rank``, ``world_size``, ``payload`` (the bytes the
    grader sent this rank alone), ``report(dict)`` (one JSON message back), ``checkpoint``
    and ``student()``, ``{name: object}`` of the submission (LookupError saying why when a
    name is missing)."""

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


# ----------------------------------------------------------------------------- naming a hang

class Tracker:
    """Writes, into the group's shared memory, which blocking call this rank is in and
    since when (what the watchdog names a hang by)."""

    def __init__(self, status, rank):
        self.status, self.base = status, rank * SLOTS

    def enter(self, op: str) -> None:
        self.status[self.base + 1] = time.monotonic()
        self.status[self.base] = OPERATIONS.index(op)

    def leave(self) -> None:
        self.status[self.base] = 0

    def finished(self) -> None:
        self.status[self.base + 2] = 1.0


class TrackedWork:
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


def install_tracking(tracker: Tracker) -> None:
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
                return [TrackedWork(w, tracker, op) for w in out]
            return None if out is None else TrackedWork(out, tracker, op)
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


def install_socket_guard(report) -> None:
    """Record (and refuse) any socket a rank's Python code opens to an address other than
    its own namespace's loopback (the system-call filter refuses new sockets anyway; this
    says where it tried to go)."""
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
        # filter refuses the socket itself (the rank may not create one)
        return real_create_connection(address, *args, **kwargs) if allowed(address) else refuse(address)

    socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = connect, connect_ex, sendto
    socket.create_connection = create_connection


def load_filter() -> bool:
    """The exercises' system-call filter (:mod:`sandbox.confined.seccomp`), loaded once
    gloo's connections are made: no new socket (gloo's stay open), no ``setsid``/``setpgid``,
    record locks, SysV/POSIX IPC, key rings, ptrace, inotify or new namespaces. False if it
    could not be loaded on Linux (the rank then runs no student code); True where there is
    no table for this machine (the other walls still stand)."""
    if not sys.platform.startswith("linux") or platform.machine() not in SECCOMP_ARCH:
        return True
    libc = load_libc()
    try:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        install_seccomp(libc)
    except SetupError:
        return False
    return True


# ----------------------------------------------------------------------------- the walls

@dataclass(frozen=True)
class RankWalls:
    """What a rank forked from the rank zygote puts up before anything of the grader reaches
    it (``mode``: ``namespaces``, ``uid`` or ``rlimits``, see :mod:`sandbox.ranks`): a
    private tmpfs of ``tmp_mb`` on ``/tmp`` and ``/dev/shm`` (namespaces), the uid it drops
    to once the group has met (``uid``; None: it keeps its own, in a nested user namespace
    where it has one), the folder it is jailed in (``jail``, ``uid`` mode) and its
    resource limits."""

    mode: str
    uid: int | None = None
    jail: str | None = None
    cpu_s: int = 120
    address_space_mb: int = 8192
    file_mb: int = 32
    tmp_mb: int = 64
    tasks: int = 64
    open_files: int = 256


def enter_walls(walls: RankWalls, keep_fd: int) -> None:
    """The walls a rank builds before it reads anything from the grader: a session of its
    own, private /tmp and /dev/shm, every descriptor closed but ``keep_fd``, a parent-death
    signal, an empty environment and resource limits."""
    libc = load_libc()
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader
    if walls.mode == "namespaces":
        if libc.unshare(CLONE_NEWNS) != 0:
            raise SetupError("unshare(mount) refused in a rank")
        size = f"size={walls.tmp_mb}m,nr_inodes=4096,mode=1777"
        for point in ("/tmp", "/dev/shm"):
            if libc.mount(b"tmpfs", point.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                          size.encode()) != 0:
                raise SetupError(f"mount {point} in a rank: {os.strerror(ctypes.get_errno())}")
    os.closerange(3, keep_fd)
    os.closerange(keep_fd + 1, 1 << 16)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.environ.clear()
    mb = 1024 * 1024
    limits = [(resource.RLIMIT_CPU, walls.cpu_s), (resource.RLIMIT_AS, walls.address_space_mb * mb),
              (resource.RLIMIT_FSIZE, walls.file_mb * mb), (resource.RLIMIT_NOFILE, walls.open_files),
              (resource.RLIMIT_CORE, 0)]
    if walls.uid is not None and hasattr(resource, "RLIMIT_NPROC"):
        limits.append((resource.RLIMIT_NPROC, walls.tasks))  # counted per uid: the group's own
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the file-size limit a write fails


def drop_privileges(walls: RankWalls) -> None:
    """Once the group has met and the program is loaded: the leased uid (jailed in its own
    folder in ``uid`` mode), or a nested user namespace that removes every capability over
    the group's namespaces; then not dumpable (a peer cannot read this rank's memory)."""
    libc = load_libc()
    if walls.uid is not None:
        if walls.jail:
            os.chroot(walls.jail)
            os.chdir("/")
        os.setgroups([])
        os.setresgid(walls.uid, walls.uid, walls.uid)
        os.setresuid(walls.uid, walls.uid, walls.uid)
        if os.geteuid() == 0 or os.getuid() == 0:
            raise SetupError("could not drop root privileges")
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a change of uid clears it
    elif walls.mode == "namespaces":
        uid, gid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER) != 0:
            raise SetupError("unshare(user) refused in a rank")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


# ----------------------------------------------------------------------------- the rank

def own_tcp_sockets() -> list:
    """This process's TCP sockets (gloo's, the store's) as ``[local port, remote port]``
    (remote 0 for a listening socket): read before any student code runs, so the grader can
    tell whose traffic it sees (``/proc``; empty where there is none). A connection is named
    by both ports because Linux lets connections to different peers share a local port: two
    ranks' gloo connections can leave from the same port."""
    try:
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        sockets = set()
        for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):  # (the store listens on both)
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if len(fields) > 9 and fields[9] in inodes:
                        sockets.add(tuple(int(address.rsplit(":", 1)[1], 16) for address in fields[1:3]))
        return sorted([local, remote] for local, remote in sockets)
    except OSError:
        return []


def run_rank(rank: int, world_size: int, conn, tracker: Tracker, port: int, threads: int, program: RankProgram,
             payload: bytes, drop) -> None:
    """A rank once its first walls stand: meet the group (gloo over ``127.0.0.1:port``),
    report its sockets' ports, load the program, drop its privileges (``drop()``), load the
    system-call filter and run the program's entry."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)

    def report(message: dict) -> None:
        data = json.dumps(message).encode()
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too large")
        conn.send_bytes(data)

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
    # gloo on the loopback alone, and the store without libuv: libuv's server loop opens an
    # io_uring instance, which would outlive the rendezvous and submit operations (a socket,
    # an open) that the system-call filter never sees.
    os.environ.update(GLOO_SOCKET_IFNAME="lo", USE_LIBUV="0")
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    finally:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        os.environ.pop("USE_LIBUV", None)
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    tracker.leave()
    report({"ports": own_tcp_sockets()})
    loaded = load_program(program.modules)
    for module in loaded.values():
        if callable(getattr(module, "warm", None)):
            module.warm()
    import encodings.idna  # noqa: F401  (socket's host names; lazily imported otherwise)
    drop()
    install_tracking(tracker)
    install_socket_guard(report)
    if not load_filter():
        report({"crash": "the system-call filter could not be loaded"})
        return
    module, function = program.entry.split(":")
    getattr(loaded[module], function)(RankContext(rank, world_size, payload, report, program, checkpoint))


def crash_report(conn, exc: BaseException) -> None:
    """The one line a rank sends when it stops on an exception."""
    try:
        conn.send_bytes(json.dumps({"crash": f"{type(exc).__name__}: {exc}"[:500]}).encode())
    except Exception:  # noqa: BLE001
        pass
