"""The C library and the Linux ABI constants the sandbox uses (linux/sched.h, linux/mount.h,
linux/prctl.h; stable kernel ABI), and the one error every wall raises when it cannot be
built."""
from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
PR_SET_CHILD_SUBREAPER = 36
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


class SetupError(Exception):
    """The sandbox could not be built as asked."""


def load_libc():
    library = ctypes.CDLL(None, use_errno=True)
    for name in ("unshare", "mount", "umount2", "prctl", "syscall"):
        getattr(library, name)  # AttributeError where the platform lacks it (not Linux)
    return library


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def die_with_starter(control) -> None:
    """While a template process starts (it imports torch: a second or more), die with the
    grader that started it: a template reads its socket, and so learns the grader is gone,
    only once it is ready. Set the parent-death signal, then look once at ``control`` (the
    grader may have died before the signal was set: its end of the socket is then closed).
    :func:`outlive_starter` lifts it when the template listens."""
    import signal

    load_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if _starter_gone(control):
        os._exit(0)


def _starter_gone(control) -> bool:
    """Whether the grader's end of ``control`` is closed (the grader is gone)."""
    import select

    poller = select.poll()
    poller.register(control, select.POLLRDHUP)
    return any(events & (select.POLLRDHUP | select.POLLHUP) for _, events in poller.poll(0))


def outlive_starter(control) -> None:
    """Lift :func:`die_with_starter`'s signal: the kernel sends it when the *thread* that
    started the template ends, and a grading thread may end while the template serves
    others; from now on the socket closing is what stops the template. Called before the
    template says it is ready (the thread waiting for that word may end at once, and the
    signal must be gone by then); a grader that died meanwhile is seen on the socket."""
    load_libc().prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
    if _starter_gone(control):
        os._exit(0)
