"""A group of ranks, forked from the rank zygote: its *leader* (which gives the group its
namespaces) and its *init* (PID 1 of the group, which forks the ranks and reaps them; no
student code ever runs in either). See :mod:`sandbox.ranks`."""
from __future__ import annotations

import ctypes
import fcntl
import json
import mmap
import os
import signal
import socket
import struct
from multiprocessing.connection import Connection

from ..confined.kernel import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUTS, MS_NODEV,
                               MS_NOSUID, PR_SET_DUMPABLE, PR_SET_PDEATHSIG, SetupError, load_libc)
from .rank import SLOTS, RankProgram, RankWalls, Tracker, crash_report, drop_privileges, enter_walls, run_rank

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
MS_NOEXEC = 8
#: Every namespace a group gets of its own (the mount namespace for its /proc).
GROUP_NAMESPACES = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS


def loopback_up() -> None:
    """Bring up ``lo`` in this (new) network namespace: the group's only interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def open_capture() -> socket.socket:
    """A packet socket on this network namespace's loopback (the leader opens it in the
    group's namespace before any rank starts, and hands it to the grader: see
    :mod:`sandbox.wire`)."""
    capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
    capture.bind(("lo", 0))
    for option, size in ((33, 64 << 20), (socket.SO_RCVBUF, 64 << 20)):  # SO_RCVBUFFORCE, else the capped one
        try:
            capture.setsockopt(socket.SOL_SOCKET, option, size)
            break
        except OSError:
            continue
    return capture


def status_view(fd: int, world_size: int):
    """The group's status slots (doubles) in the shared memory behind ``fd``."""
    memory = mmap.mmap(fd, SLOTS * world_size * 8)
    return memoryview(memory).cast("d")


def leader(mode: str, job: dict, fds: list) -> None:
    """The group's leader; never returns. ``fds``: each rank's socket to the grader, the
    status memory, and the leader's own channel to the grader (it writes the init's pid)."""
    n = job["world_size"]
    rank_fds, status_fd, channel = fds[:n], fds[n], fds[n + 1]
    code = 0
    try:
        libc = load_libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the zygote
        if os.read(channel, 2) != b"go":  # the grader has put it in the group's cgroup, if any
            raise SetupError("the grader did not answer")
        capture = None
        if mode == "namespaces":
            if libc.unshare(GROUP_NAMESPACES) != 0:
                raise SetupError(f"unshare(group namespaces): {os.strerror(ctypes.get_errno())}")
            loopback_up()
            capture = open_capture()  # before any rank exists: none can reach it
        elif mode == "uid":  # the machine's loopback, shared: the grader keeps the group's ports only
            try:
                capture = open_capture()
            except OSError:
                capture = None  # no CAP_NET_RAW: the ranks' own counts only
        init = os.fork()
        if init == 0:
            os.close(channel)
            if capture is not None:
                capture.close()
            group_init(mode, job, rank_fds, status_fd)
        hello = json.dumps({"init": init, "capture": capture is not None}).encode() + b"\n"
        with socket.socket(fileno=os.dup(channel)) as sock:
            socket.send_fds(sock, [hello], [capture.fileno()] if capture is not None else [])
        if capture is not None:
            capture.close()
        os.close(channel)
        for fd in rank_fds + [status_fd]:
            os.close(fd)
        os.waitpid(init, 0)
    except BaseException as exc:  # noqa: BLE001 - said to the grader, then gone
        code = 3
        try:
            os.write(channel, json.dumps({"fatal": f"{type(exc).__name__}: {exc}"[:300]}).encode() + b"\n")
        except OSError:
            pass
    os._exit(code)


def group_init(mode: str, job: dict, rank_fds: list, status_fd: int) -> None:
    """PID 1 of the group (in ``namespaces`` mode): mounts the group's /proc, forks the
    ranks, reaps them (and whatever is re-parented to it) and writes how each ended; exits
    once every rank has, and the kernel then kills whatever is left in the group."""
    try:
        libc = load_libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if mode == "namespaces":
            if libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) != 0:
                raise SetupError(f"mount /proc: {os.strerror(ctypes.get_errno())}")
        status = status_view(status_fd, job["world_size"])
        ranks = {}
        for rank, fd in enumerate(rank_fds):
            pid = os.fork()
            if pid == 0:
                zygote_rank(rank, mode, job, fd, status)
            ranks[pid] = rank
        for fd in rank_fds + [status_fd]:
            os.close(fd)
        left = set(ranks)
        while left:
            try:
                pid, wstatus = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid in ranks:  # how it ended: 1 + its signal, or 1000 + its exit status
                status[ranks[pid] * SLOTS + 3] = (1 + os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus)
                                                  else 1000 + os.WEXITSTATUS(wstatus))
                left.discard(pid)
    finally:
        os._exit(0)


def zygote_rank(rank: int, mode: str, job: dict, fd: int, status) -> None:
    """A rank forked from the group's init: its walls first (:func:`.rank.enter_walls`), then
    the program and its payload from the grader, then :func:`.rank.run_rank`; never returns.
    A process the student's code forks and that returns here ends here too."""
    me, code = os.getpid(), 0
    conn = None
    tracker = Tracker(status, rank)
    try:
        walls = RankWalls(**job["walls"])
        enter_walls(walls, fd)
        conn = Connection(fd)
        program = RankProgram.from_setup(conn.recv_bytes())
        payload = conn.recv_bytes()
        run_rank(rank, job["world_size"], conn, tracker, job["port"], job["threads"], program, payload,
                 lambda: drop_privileges(walls))
    except BaseException as exc:  # noqa: BLE001 - the grader reads why, one line
        code = 1
        if os.getpid() == me and conn is not None:
            crash_report(conn, exc)
    finally:
        if os.getpid() == me:  # only the rank itself says it has finished
            tracker.finished()
        os._exit(code)
