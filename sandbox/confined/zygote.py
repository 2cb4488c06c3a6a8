"""The zygote's process lifecycle: it builds the shared walls once, then forks one worker
per submission on the grader's request, kills it (its whole process group) when asked,
and reaps every process it or its orphans leave.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time

from .frames import greet, recv_message, send_message, write_frame
from .isolation import enter_worker, prepare_zygote
from .kernel import PR_SET_CHILD_SUBREAPER, load_libc
from .runtime import install_runtime, serve

def spawn(mode: str, runtime, job, fds, control) -> int:
    """Fork one worker; the zygote returns its pid at once."""
    request_fd, response_fd, submission_fd = fds
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})  # blocked while forking
        control.close()  # a worker must not be able to ask for more workers
        job["request_fd"], job["response_fd"] = request_fd, response_fd
        enter_worker(mode, job, submission_fd)
    except BaseException as exc:
        try:
            write_frame(response_fd, {"op": "fatal", "message": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(3)
    try:
        serve(runtime, job, mode)
    except BaseException:
        # Student code (a thread, a signal handler) can break the serving loop itself; the
        # grader sees the pipe close and treats the call as a crash.
        pass
    os._exit(4)


def zygote(control_fd: int) -> None:
    control, mode, runtime = greet(control_fd, lambda cfg: (prepare_zygote(cfg), install_runtime(cfg)))
    statuses: dict = {}  # reaped workers: pid -> wait status, until the grader asks
    workers: set = set()  # pids of the workers forked and not yet reported
    # Orphans of a worker (its children, once it is killed) come to the zygote instead of
    # the machine's init, which may be slow to reap them: they are reaped here at once.
    try:
        load_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def reap(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in workers:  # an orphan's status interests no one
                statuses[pid] = status

    def kill(pid: int, grace: float):
        """Kill a worker's process group, unless it was already reaped (then its pid might
        belong to someone else by now); return its exit code (negative: a signal). With a
        ``grace`` period, a worker that is already on its way out gets to finish, so that
        its own exit status is the one reported."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            until = time.monotonic() + grace
            while pid not in statuses and time.monotonic() < until:
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    statuses[pid] = status
                else:
                    time.sleep(0.005)
            if pid not in statuses:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    statuses[pid] = os.waitpid(pid, 0)[1]
                except ChildProcessError:
                    pass
            status = statuses.pop(pid, None)
            workers.discard(pid)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        return None if status is None else os.waitstatus_to_exitcode(status)

    signal.signal(signal.SIGCHLD, reap)
    while True:
        try:
            message, fds = recv_message(control, max_fds=4)
        except (OSError, ValueError):
            message = None
        if message is None:  # the grader is gone (even SIGKILLed): its workers go with it
            for pid in list(workers):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            os._exit(0)
        if message["op"] == "spawn" and len(fds) == 3:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            try:
                reply = {"pid": spawn(mode, runtime, message["job"], fds, control)}
                workers.add(reply["pid"])
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        elif message["op"] == "kill":
            reply = {"status": kill(int(message["pid"]), min(float(message.get("grace", 0)), 2.0))}
        else:
            reply = {"error": "bad request"}
        for fd in fds:
            os.close(fd)
        send_message(control, reply)
