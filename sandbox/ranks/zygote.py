"""The rank zygote's life: build the shared walls, import torch, then fork one group leader
per request of the grader, kill a group when asked, and reap everything (see
:mod:`sandbox.ranks`)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from ..confined.frames import greet, recv_message, send_message
from ..confined.kernel import PR_SET_CHILD_SUBREAPER, load_libc
from .group import leader
from .root import build_root

MODES = ("namespaces", "uid", "rlimits")


def prepare(cfg: dict) -> str:
    """Build what every group shares and import torch; return the mode reached. A
    ``namespaces`` failure is fatal here (the root may be half-built): the grader then
    starts another zygote without it."""
    wanted = cfg["isolation"]
    mode = None
    if wanted in ("auto", "namespaces") and sys.platform.startswith("linux"):
        try:
            sys.path[:] = build_root(cfg["root_dir"], cfg["packages"])
            mode = "namespaces"
        except (OSError, AttributeError, Exception) as exc:  # noqa: BLE001
            raise RuntimeError(f"namespace sandbox: {exc}") from None
    if mode is None:
        sys.path[:] = [p for p in sys.path if p] + sorted({os.path.dirname(p) for p in cfg["packages"].values()})
        mode = "uid" if wanted in ("auto", "fallback", "uid") and cfg["switch_uid"] else "rlimits"
    warm(full=mode == "uid")
    return mode


def warm(full: bool) -> None:
    """Import torch and run what every rank runs (each first use imports modules). With
    ``full`` (a jailed rank reads no file at all) also torch's lazily imported compiler."""
    import torch
    import torch.distributed as dist  # noqa: F401
    import torch.distributed.distributed_c10d  # noqa: F401
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401

    import numpy  # noqa: F401

    torch.set_num_threads(1)
    x = torch.ones(2, 4, 2, 8, requires_grad=True)
    F.scaled_dot_product_attention(x, x, x, is_causal=True).sum().backward()
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    out = model(torch.ones(2, 4))
    out.backward(torch.ones_like(out))  # an explicit gradient imports torch.fx's shape machinery
    opt.step()
    if full:
        import cProfile  # noqa: F401
        import torch._dynamo  # noqa: F401


def kill_uid(uid: int, seconds: float = 2.0) -> None:
    """SIGKILL every process of ``uid`` from a process of that uid (``kill(-1)`` reaches
    exactly them), again until none is left or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
                os._exit(0)
            except ProcessLookupError:
                os._exit(1)  # none left
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return
        time.sleep(0.002)


def spawn(mode: str, job: dict, fds: list, control) -> int:
    """Fork a group's leader; the zygote returns its pid at once and keeps none of ``fds``."""
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        control.close()  # a group must not be able to ask for more groups
    except BaseException:
        os._exit(3)
    leader(mode, job, fds)


def zygote(control_fd: int) -> None:
    control, mode, _ = greet(control_fd, lambda cfg: (prepare(cfg), None))
    statuses, leaders, uids = {}, set(), {}  # uids: leader -> the uid its ranks run as
    with contextlib.suppress(OSError, AttributeError):
        load_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come here, reaped at once

    def reap(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in leaders:
                statuses[pid] = status

    def kill(pid: int) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            if pid in leaders and pid not in statuses:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    statuses[pid] = os.waitpid(pid, 0)[1]
            statuses.pop(pid, None)
            leaders.discard(pid)
            uids.pop(pid, None)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})

    signal.signal(signal.SIGCHLD, reap)
    while True:
        try:
            message, fds = recv_message(control, max_fds=72)
        except (OSError, ValueError):
            message, fds = None, []
        if message is None:  # the grader is gone (even SIGKILLed): its groups go with it
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for pid in list(leaders):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            for uid in set(uids.values()):  # without a PID namespace: whatever runs as its uid
                kill_uid(uid)
            time.sleep(0.05)
            os._exit(0)
        reply = {"error": "bad request"}
        if message.get("op") == "spawn" and len(fds) == message["job"]["world_size"] + 2:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            try:
                pid = spawn(mode, message["job"], fds, control)
                leaders.add(pid)
                if message["job"]["walls"].get("uid") is not None:
                    uids[pid] = message["job"]["walls"]["uid"]
                reply = {"pid": pid}
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        elif message.get("op") == "kill":
            kill(int(message["pid"]))
            reply = {"killed": True}
        for fd in fds:
            os.close(fd)
        send_message(control, reply)
