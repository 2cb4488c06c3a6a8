"""The sandbox worker: runs one submission's code, confined, and answers the grader's calls.

The grader starts this file as ``python -I -S -B worker.py REQUEST_FD RESPONSE_FD``: isolated
mode (no environment variables, no user site, not even this file's folder on ``sys.path``)
and no ``site`` (so no ``.pth`` file, ``sitecustomize`` or ``usercustomize`` runs). Its
standard output and error are ``/dev/null``; the two pipes are the only channel back.

Order matters. Before any student code exists in this process, :func:`confine` builds the
walls (strongest first, falling back when the platform refuses):

1. ``namespaces``: new PID, mount, network, IPC and UTS namespaces; the root directory
   becomes a small tmpfs holding only read-only bind mounts of the Python standard library,
   the allowed packages (numpy) and the system libraries, plus a writable ``/work`` tmpfs
   holding a copy of the submission. No network interface is up. The process then drops to
   an unprivileged uid (or, where the grader is not root, into a nested user namespace), so
   it cannot undo any of this.
2. ``uid``: the grader is root but namespaces are refused (e.g. a Docker container under its
   default seccomp profile, as on Gradescope): drop to a dedicated unprivileged uid, which
   cannot read a course folder whose mode is 700 and cannot signal the grader.
3. ``rlimits``: neither is possible (a student's laptop): only the resource limits below.

In every mode: resource limits (CPU seconds, address space, processes, file size, open
files, no core dumps); in the two weaker modes, Python-level socket creation is disabled too.

Everything after that is untrusted: student code may rewrite any object in this process. The
grader therefore trusts nothing it says except frames that parse strictly as plain data
(see :mod:`autograde.protocol`), and enforces every timeout from the outside.

This file imports only the standard library until confinement is done, and never imports
the course: it must run where the course is not visible.
"""
from __future__ import annotations

import builtins
import ctypes
import io
import json
import math
import os
import platform
import resource
import shutil
import signal
import struct
import sys
import traceback

HEADER = struct.Struct(">I")
MAX_REQUEST = 16 * 1024 * 1024

# Linux constants (linux/sched.h, linux/mount.h, linux/prctl.h); stable kernel ABI.
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


# ----------------------------------------------------------------------------- framing

def read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int):
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if size > MAX_REQUEST:
        raise EOFError
    return json.loads(read_exact(fd, size), object_hook=untag)


def write_frame(fd: int, obj) -> None:
    data = json.dumps(tag(obj), allow_nan=False, separators=(",", ":")).encode()
    data = HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def tag(value):
    """Non-finite floats travel as ``{"$float": "nan"|"inf"|"-inf"}``: JSON has no literal
    for them, and the grader refuses the non-standard ``NaN``/``Infinity`` tokens."""
    if type(value) is float and not math.isfinite(value):
        return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if type(value) is list:
        return [tag(v) for v in value]
    if type(value) is dict:
        return {k: tag(v) for k, v in value.items()}
    return value


def untag(obj):
    if set(obj) == {"$float"}:
        return float(obj["$float"])
    return obj


# ----------------------------------------------------------------------------- confinement

#: Loaded before dropping to the sandbox uid (mode 2): numpy, what the worker itself needs,
#: and the standard modules exercise code plausibly uses.
PRELOAD = ("numpy", "socket", "math", "cmath", "statistics", "random", "itertools",
           "functools", "collections", "dataclasses", "typing", "fractions", "decimal", "re",
           "json", "time", "copy", "operator", "string", "textwrap", "numbers", "bisect",
           "heapq", "warnings", "enum", "contextlib", "threading", "gc", "inspect",
           "urllib.request", "ctypes")


class SetupError(Exception):
    """The sandbox could not be built as asked."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    for name in ("unshare", "mount", "umount2", "prctl", "syscall"):
        getattr(libc, name)  # AttributeError where the platform lacks it (not Linux)
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _mount(libc, source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _bind_readonly(libc, source: str, target: str) -> None:
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _map_ids(pid: str, uid: int, gid: int) -> None:
    """Map this process's own uid/gid into its new user namespace (no other ids exist)."""
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def stdlib_dirs() -> list:
    """The interpreter's own import folders (standard library, lib-dynload), as computed at
    start-up under ``-I -S``: no site-packages among them."""
    return [p for p in sys.path if p and os.path.isdir(p)]


def namespace_mounts(cfg) -> dict:
    """Inside the new root: ``/py/lib0``, ``/py/lib1``... for the standard library and
    ``/py/site/<name>`` for each allowed package, and nothing else of the host's Python."""
    mounts = {f"/py/lib{i}": p for i, p in enumerate(stdlib_dirs())}
    for name, source in cfg["packages"].items():
        mounts["/py/site/" + name] = source
    return mounts


def namespace_path(cfg) -> list:
    return [t for t in cfg["_mounts"] if t.startswith("/py/lib")] + ["/py/site", "/work"]


def enter_namespaces(cfg) -> None:
    """Mode 1. Returns in a child process that is PID 1 of a new PID namespace; the original
    process stays behind, waits for it and exits with its status (see the module docstring).
    """
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        # Unprivileged: a user namespace first, to be allowed the rest.
        _check(libc.unshare(CLONE_NEWUSER), "unshare(user)")
        _map_ids("self", uid, gid)
    _check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
    # A sandbox that cannot be built must not be half-built: probe before forking.
    pid = os.fork()
    if pid:
        for fd in (cfg["request_fd"], cfg["response_fd"]):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):  # die the same way, so the grader sees the signal
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    # Child: PID 1 of the new namespace. If the grader kills our parent, we die, and with us
    # every process in the namespace, including any that called setsid() to escape a kill.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
           "unshare(mount, net, ipc, uts)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    root = cfg["root_dir"]
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=256,mode=755")
    # System libraries (numpy's extension modules link against libstdc++ etc.).
    for top in ("/usr", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            os.makedirs(root + top)
            _bind_readonly(libc, top, root + top)
    for target, source in cfg["_mounts"].items():  # stdlib and allowed packages
        os.makedirs(root + target, exist_ok=True)
        _bind_readonly(libc, source, root + target)
    os.makedirs(root + "/dev")
    for dev in ("null", "zero", "urandom"):
        open(root + "/dev/" + dev, "w").close()
        _mount(libc, "/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)
    work_uid = cfg["sandbox_uid"] if uid == 0 else uid
    work_gid = cfg["sandbox_uid"] if uid == 0 else gid
    os.makedirs(root + "/work")
    _mount(libc, "tmpfs", root + "/work", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={cfg['work_mb']}m,nr_inodes=4096,mode=700,uid={work_uid},gid={work_gid}")
    copy = cfg.get("submission_copy")
    if copy and os.path.getsize(copy) <= cfg["work_mb"] * 1024 * 1024 // 4:
        shutil.copyfile(copy, root + "/work/" + os.path.basename(copy))
    os.makedirs(root + "/old")
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(libc.syscall(number, b".", b"old"), "pivot_root")
    _check(libc.umount2(b"/old", MNT_DETACH), "umount old root")
    os.rmdir("/old")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/work")
    if uid == 0:
        _drop_to(cfg["sandbox_uid"])
    else:
        # Cannot change uid: a nested user namespace removes every capability over the
        # mount namespace built above, so none of it can be remounted or undone.
        _check(libc.unshare(CLONE_NEWUSER), "unshare(user, nested)")
        _map_ids("self", uid, gid)


def _drop_to(sandbox_uid: int) -> None:
    os.setgroups([])
    os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
    os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SetupError("could not drop root privileges")


def set_limits(cfg) -> None:
    mb = 1024 * 1024
    limits = [
        (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
        (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, cfg["file_mb"] * mb),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ]
    if hasattr(resource, "RLIMIT_NPROC"):
        limits.append((resource.RLIMIT_NPROC, cfg["max_processes"]))
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            # macOS refuses some (e.g. RLIMIT_AS); a student's laptop is not hostile.
            pass
    # Writing past the file-size limit should fail that write, not kill the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def block_sockets() -> None:
    """Where no network namespace is available: refuse Python-level socket creation. (Code
    can still reach the C library through ctypes; only the namespace mode closes that.)"""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the grading sandbox")

    socket.socket = refuse  # type: ignore[assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.socketpair = refuse  # type: ignore[assignment]


def confine(cfg) -> str:
    """Build the walls; return the mode reached ("namespaces", "uid" or "rlimits")."""
    wanted = cfg["isolation"]
    cfg["_mounts"] = namespace_mounts(cfg)  # computed while the host's folders are visible
    mode = None
    if wanted in ("auto", "namespaces") and sys.platform.startswith("linux"):
        try:
            enter_namespaces(cfg)
            mode = "namespaces"
        except (SetupError, OSError, AttributeError) as exc:
            if wanted == "namespaces" or os.getpid() == 1:
                # Failed after the fork, half-built: do not fall back silently.
                raise SetupError(f"namespace sandbox: {exc}") from None
    if mode is None:
        # Outside the namespaces the real standard library and numpy stay where they are.
        sys.path[:] = stdlib_dirs() + cfg["fallback_path"]
        os.chdir(cfg["work_dir"])
        if wanted in ("auto", "fallback", "uid") and os.geteuid() == 0:
            # Import while the interpreter's own folders are surely readable: after the drop
            # they may not be (a Python installed under /root), and then only modules
            # already loaded can be imported.
            for name in PRELOAD:
                try:
                    __import__(name)
                except ImportError:
                    pass
            _drop_to(cfg["sandbox_uid"])
            mode = "uid"
        elif wanted in ("auto", "fallback", "rlimits"):
            mode = "rlimits"
        else:
            raise SetupError(f"isolation {wanted!r} is not available here")
    else:
        sys.path[:] = namespace_path(cfg)
    try:
        _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except AttributeError:
        pass
    set_limits(cfg)
    if mode != "namespaces":
        block_sockets()
    return mode


# ----------------------------------------------------------------------------- serving

class CappedOutput(io.TextIOBase):
    """Where the student's ``print`` goes: counted, kept up to a few kilobytes, never sent
    on the protocol channel (printed text is never evidence of anything)."""

    def __init__(self, cap: int = 4096):
        self.cap, self.kept, self.total = cap, [], 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        if self.total < self.cap:
            self.kept.append(text[: self.cap - self.total])
        self.total += len(text)
        return len(text)


def builtin_exception_name(exc: BaseException) -> str:
    """The most derived built-in exception class of ``exc`` (a student's
    ``class BadInput(ValueError)`` reports ``ValueError``)."""
    try:
        for klass in type(exc).__mro__:
            if getattr(builtins, getattr(klass, "__name__", ""), None) is klass:
                return klass.__name__
    except Exception:
        pass
    return "Exception"


def describe(exc: BaseException, filenames) -> dict:
    """A student-facing description of an exception raised by their code."""
    try:
        name = str(type(exc).__name__)
    except Exception:
        name = "Exception"
    try:
        text = str(exc)
    except BaseException:
        text = ""
    text = text.strip().replace("\n", " ")
    if len(text) > 300:
        text = text[:300] + "..."
    where = None
    try:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename in filenames:
                where = {"file": frame.filename, "line": frame.lineno}
    except Exception:
        pass
    return {"exception": name, "exception_type": builtin_exception_name(exc),
            "message": text, "where": where}


def to_argument(value, np):
    """JSON argument -> what the student's function receives: lists become float arrays."""
    if type(value) is list:
        return np.asarray(value, dtype=np.float64)
    return value


def serve(cfg, request_fd: int, response_fd: int, mode: str) -> None:
    import numpy as np

    plain = {"__name__": "autograde_plain"}
    exec(compile(cfg["plain_source"], "plain.py", "exec"), plain)
    to_plain, NotPlainData = plain["to_plain"], plain["NotPlainData"]

    # A stand-in for plotting libraries: a cell that draws a figure beside an exercise runs,
    # draws nothing, and the exercise is still graded.
    class Silent:
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return self

        def __call__(self, *args, **kwargs):
            return self

        def __getitem__(self, key):
            return self

        def __iter__(self):
            return iter(())

    class Pyplot(Silent):
        def subplots(self, *args, **kwargs):
            return self, self

    silent, pyplot = Silent(), Pyplot()
    import types
    for name in cfg["stub_modules"]:
        module = types.ModuleType(name)
        module.__getattr__ = lambda attr, _p=pyplot if name.endswith("pyplot") else silent: _p  # noqa: E731
        sys.modules[name] = module

    namespace = {"__name__": "submission", "__builtins__": builtins,
                 "__file__": "/work/" + cfg["submission_name"]}
    sys.argv = [namespace["__file__"]]  # no host paths, no pipe numbers handed out
    output = CappedOutput()
    sys.stdout = sys.stderr = output
    filenames = set()
    server = os.getpid()
    write_frame(response_fd, {"op": "ready", "isolation": mode,
                              "numpy": np.__version__, "python": platform.python_version()})
    while True:
        try:
            request = read_frame(request_fd)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        reply = {"id": request.get("id")}
        if request.get("op") == "exec":
            filenames.add(request["filename"])
            try:
                code = compile(request["source"], request["filename"], "exec", dont_inherit=True)
                exec(code, namespace)
                reply["ok"] = True
            except BaseException as exc:  # SystemExit, KeyboardInterrupt... cost one unit
                reply.update(ok=False, **describe(exc, filenames))
        elif request.get("op") == "call":
            name = request["function"]
            function = namespace.get(name)
            if not callable(function):
                reply.update(ok=False, missing=True,
                             message="not defined" if function is None else "not a function")
            else:
                try:
                    args = [to_argument(a, np) for a in request["args"]]
                    value = function(*args)
                except BaseException as exc:
                    reply.update(ok=False, **describe(exc, filenames))
                else:
                    try:
                        reply.update(ok=True, value=to_plain(value))
                    except NotPlainData as exc:
                        hint = " (did you forget `return`?)" if value is None else ""
                        reply.update(ok=False, not_plain=True, message=str(exc) + hint)
                    except BaseException as exc:
                        reply.update(ok=False, not_plain=True,
                                     message="returned a value that could not be read: "
                                     + describe(exc, filenames)["exception"])
        else:
            reply.update(ok=False, message="unknown request")
        if os.getpid() != server:
            # A process the student's code forked has returned into this loop: it must not
            # answer (or read) the grader's requests.
            os._exit(0)
        try:
            write_frame(response_fd, reply)
        except (ValueError, TypeError, RecursionError):
            write_frame(response_fd, {"id": reply["id"], "ok": False, "not_plain": True,
                                      "message": "returned a value that cannot be sent back"})


def main(argv) -> None:
    request_fd, response_fd = int(argv[1]), int(argv[2])
    cfg = read_frame(request_fd)
    cfg["request_fd"], cfg["response_fd"] = request_fd, response_fd
    try:
        mode = confine(cfg)
    except Exception as exc:  # report why, instead of dying silently
        write_frame(response_fd, {"op": "fatal", "message": f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    try:
        serve(cfg, request_fd, response_fd, mode)
    except BaseException:
        # Student code (a thread, a signal handler) can break the serving loop itself; the
        # grader sees the pipe close and treats the call as a crash.
        os._exit(4)


if __name__ == "__main__":
    main(sys.argv)
