"""The sandbox: a template process (the *zygote*) and the workers it forks, one per submission.

The grader starts this file once as ``python -I -S -B worker.py --zygote FD``: isolated mode
(no environment variables, no user site, not even this file's folder on ``sys.path``) and no
``site`` (so no ``.pth`` file, ``sitecustomize`` or ``usercustomize`` runs); FD is a Unix
socket to the grader. Standard output and error are ``/dev/null``.

The zygote pays once for what every worker needs (the confined file system, Python's start,
importing numpy), then never runs student code: for each submission it forks a worker, which
adds the per-submission walls and serves the grader's requests over two pipes. A fork costs
milliseconds where starting Python and numpy costs a few hundred. Every worker starts from
the same pristine zygote, so nothing one submission does can reach the next.

The walls, strongest first (``auto`` takes the first the platform allows):

1. ``namespaces``. The zygote enters a new mount namespace whose root is a small tmpfs
   holding only read-only bind mounts of the Python standard library (its
   ``site-packages``, and the system's Python packages under ``/usr``, covered by empty
   folders), the allowed packages (numpy) and the system libraries (``/usr``, ``/lib*``):
   no course files, no tests, no solutions, no home folders exist there. Each worker then
   gets new PID, mount, network, IPC and UTS namespaces (no network interface is up; no
   other process is visible or can be signalled), a fresh writable ``/sandbox`` tmpfs
   holding only a copy of the submission, and drops to an unprivileged uid (or, where the
   grader is not root, into a nested user namespace), so it cannot undo any of this. PID 1
   of the namespace is a small trusted init that never runs student code: the zygote kills
   it (it cannot leave the process group it shares with its parent, and its parent-death
   signal survives because it never changes uid), and the kernel then kills every process
   in the namespace, whatever it did to escape (``setsid``, ignored signals, double forks).
2. ``uid``. The grader is root but namespaces are refused (a Docker container under its
   default seccomp profile, as on Gradescope): each worker drops to its own unprivileged
   uid, which cannot signal the grader or other workers, after a ``chroot`` into its own
   folder: no ``/proc`` (the grader's command line names the class folder), no classmates'
   files, no shared ``/tmp``. Modules are preloaded, since nothing else is importable
   there. The grader kills everything that runs as that uid when the worker ends, and
   hands the uid to another submission only once nothing runs as it.
3. ``rlimits``. Neither is possible (a student's laptop): only the limits below.

In every mode: resource limits (CPU seconds, address space, processes, file size, open
files, no core dumps), no PATH, and in the two weaker modes Python-level sockets disabled.
On Linux a seccomp filter (:data:`SECCOMP_DENY`) refuses the system calls that would let a
worker leave its process group or reach another sandbox through the kernel (record locks,
sockets, SysV and POSIX IPC, key rings), so that in the modes without a PID namespace the
process group the zygote kills holds everything the worker started. The zygote is a child
subreaper: orphans of a killed worker are reaped at once.

Everything after that is untrusted: student code may rewrite any object in its worker. The
grader trusts nothing it says except frames that parse strictly as plain data (see
:mod:`autograde.protocol`), and enforces every timeout from the outside.

This file imports only the standard library until the walls stand, and never imports the
course: it must run where the course is not visible.
"""
from __future__ import annotations

import builtins
import contextlib
import ctypes
import glob
import io
import json
import math
import os
import platform
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types

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
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 38, 22
PR_SET_CHILD_SUBREAPER = 36
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


def send_message(sock, obj, fds=()) -> None:
    """One control message (grader <-> zygote): a length-prefixed JSON frame on a Unix
    stream socket, with file descriptors attached to its first byte."""
    data = json.dumps(obj).encode()
    data = HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    sock.sendall(data[sent:])


def recv_message(sock, max_fds: int = 0):
    """(object, file descriptors); (None, []) when the other end has closed."""
    head, fds = b"", []
    while len(head) < HEADER.size:
        if max_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(sock, HEADER.size - len(head), max_fds)
        else:
            chunk = sock.recv(HEADER.size - len(head))
        if not chunk:
            return None, fds
        head += chunk
    (size,) = HEADER.unpack(head)
    if size > MAX_REQUEST:
        return None, fds
    data = b""
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), list(fds)


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

class SetupError(Exception):
    """The sandbox could not be built as asked."""


#: Imported by the zygote, so that every worker has them at no cost (and, in the ``uid``
#: mode, has them at all if the interpreter's own folders are unreadable to its uid).
PRELOAD = ("numpy", "numpy.linalg", "numpy.random", "numpy.fft", "numpy.polynomial", "math",
           "cmath", "statistics", "random", "itertools", "functools", "collections",
           "dataclasses", "typing", "fractions", "decimal", "re", "json", "time", "copy",
           "operator", "string", "textwrap", "numbers", "bisect", "heapq", "warnings", "enum",
           "contextlib", "threading", "gc", "inspect", "urllib.request", "encodings.idna",
           "ctypes.util", "datetime", "pprint", "array", "csv", "logging", "numpy.testing")


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


def _map_ids(uid: int, gid: int, proc=None) -> None:
    """Map this process's own uid/gid into its new user namespace (no other ids exist).
    ``proc``: a file descriptor of a proc file system, where /proc is not mounted."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        if proc is None:
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        else:
            fd = os.open(f"self/{name}", os.O_WRONLY, dir_fd=proc)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def stdlib_dirs() -> list:
    """The interpreter's own import folders (standard library, lib-dynload), as computed at
    start-up under ``-I -S``: no site-packages among them."""
    return [p for p in sys.path if p and os.path.isdir(p)]


def build_root(cfg) -> list:
    """Mode 1, zygote part: pivot into a root that holds only what running Python and numpy
    needs. Returns the ``sys.path`` to use inside it."""
    libc = _libc()
    if os.geteuid() != 0:  # unprivileged: a user namespace first, to be allowed the rest
        uid, gid = os.geteuid(), os.getegid()
        _check(libc.unshare(CLONE_NEWUSER), "unshare(user)")
        _map_ids(uid, gid)
    _check(libc.unshare(CLONE_NEWNS), "unshare(mount)")
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
    mounts = {f"/py/lib{i}": p for i, p in enumerate(stdlib_dirs())}
    for name, source in cfg["packages"].items():
        mounts["/py/site/" + name] = source
    for target, source in mounts.items():
        os.makedirs(root + target, exist_ok=True)
        _bind_readonly(libc, source, root + target)
    # Third-party packages are not the standard library: the interpreter's own folder holds
    # the base installation's (pytest, IPython...), and /usr holds the system's (Debian's
    # python3-yaml...). Cover each with an empty, read-only folder: numpy is the only one.
    hidden = [f"{target}/{extra}" for target, source in mounts.items()
              if target.startswith("/py/lib") for extra in ("site-packages", "dist-packages")
              if os.path.isdir(os.path.join(source, extra))]
    hidden += [p for pattern in ("/usr/lib/python3*/*-packages", "/usr/lib64/python3*/*-packages",
                                 "/usr/local/lib/python3*/*-packages")
               for p in glob.glob(pattern) if os.path.isdir(root + p)]
    for folder in hidden:
        _mount(libc, "tmpfs", root + folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
               "size=4k,nr_inodes=2,mode=555")
    os.makedirs(root + "/dev")
    for dev in ("null", "zero", "urandom"):
        open(root + "/dev/" + dev, "w").close()
        _mount(libc, "/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)
    os.makedirs(root + "/sandbox")  # each worker mounts its own tmpfs here
    if not cfg["switch_uid"]:  # workers will need it to map ids (see enter_worker)
        HOST_PROC[0] = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    os.makedirs(root + "/old")
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(libc.syscall(number, b".", b"old"), "pivot_root")
    _check(libc.umount2(b"/old", MNT_DETACH), "umount old root")
    os.rmdir("/old")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/")
    # Packages imported before the pivot (encodings, json, ctypes...) still look for their
    # submodules under the host's paths, which no longer exist: point them at the mounts.
    moves = sorted(((source.rstrip("/") + "/", target + "/") for target, source in mounts.items()),
                   key=lambda pair: -len(pair[0]))
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if type(search) is list:
            for i, entry in enumerate(search):
                for old, new in moves:
                    if (entry + "/").startswith(old):
                        search[i] = new + entry[len(old):]
                        break
    return [t for t in mounts if t.startswith("/py/lib")] + ["/py/site"]


def prepare_zygote(cfg) -> str:
    """Build what all workers share; return the mode reached."""
    wanted = cfg["isolation"]
    mode = None
    if wanted in ("auto", "namespaces") and sys.platform.startswith("linux"):
        try:
            sys.path[:] = build_root(cfg)
            mode = "namespaces"
        except (SetupError, OSError, AttributeError) as exc:
            # Maybe half-built: the grader starts a new zygote without namespaces.
            raise SetupError(f"namespace sandbox: {exc}") from None
    if mode is None:
        sys.path[:] = stdlib_dirs() + [cfg["lib_dir"]]
        if wanted in ("auto", "fallback", "uid") and cfg["switch_uid"]:
            mode = "uid"
        elif wanted in ("auto", "fallback", "rlimits"):
            mode = "rlimits"
        else:
            raise SetupError(f"isolation {wanted!r} is not available here")
    # Where the worker's uid may be unable to read the interpreter's folders (mode 2),
    # import now what it may need; otherwise numpy alone, and the rest on demand.
    for name in PRELOAD if mode == "uid" else ("numpy",):
        try:
            __import__(name)
        except ImportError:
            pass
    if "numpy" not in sys.modules:
        raise SetupError("numpy cannot be imported in the sandbox")
    return mode


#: Which optional walls this worker got (reported in its greeting).
WALLS = {"seccomp": False, "chroot": False}
#: A handle on the host's /proc, kept by the zygote only where workers need it.
HOST_PROC = [None]


def _close_host_proc() -> None:
    if HOST_PROC[0] is not None:
        os.close(HOST_PROC[0])
        HOST_PROC[0] = None


def _drop_to(sandbox_uid: int) -> None:
    os.setgroups([])
    os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
    os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SetupError("could not drop root privileges")


def _copy_submission(fd: int, name: str, limit: int) -> None:
    """The submission's bytes, from the file descriptor the grader passed, into the cwd."""
    with os.fdopen(fd, "rb") as source:
        data = source.read(limit + 1)
    if len(data) <= limit:
        with open(os.path.basename(name) or "submission", "wb") as f:
            f.write(data)


def _mirror_exit(status: int) -> None:
    """Exit the way a child with wait status ``status`` did (by the same signal, or with
    the same code), so that the grader sees the worker's own end."""
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _namespace_init(worker_pid: int, report_fd: int) -> None:
    """PID 1 of a worker's namespace: never runs student code. It reaps orphans until the
    worker itself exits, reports the worker's wait status to its parent, and exits: the
    kernel then kills every process left in the namespace, whatever they did (left the
    process group, ignored signals, dropped to another uid). Processes inside the namespace
    cannot signal it (an init ignores signals it has no handler for) nor trace it (it is
    not dumpable), and it dies with its parent (its parent-death signal survives because
    it never changes uid)."""
    try:
        libc = _libc()
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(5)
        except InterruptedError:
            continue
        if pid == worker_pid:
            try:
                os.write(report_fd, HEADER.pack(status & 0xFFFFFFFF))
            finally:
                os._exit(0)


def enter_worker(mode: str, job, submission_fd: int) -> None:
    """Per-worker walls, in the forked child; returns in the process that serves.

    In the namespaces mode there are three processes: this one (outside the new PID
    namespace; it waits and exits the way the worker did, so the grader sees one process
    that lives and dies with the worker), PID 1 of the namespace (:func:`_namespace_init`,
    trusted) and the worker, PID 2, which runs the student's code. The zygote kills the
    first two as a process group; when PID 1 dies, the kernel kills the whole namespace.
    In the other modes this process is the worker, and the process group the best there is:
    seccomp keeps the worker and its children from leaving it, and in the ``uid`` mode the
    grader also kills everything that runs as the sandbox's uid.
    """
    libc = _libc() if sys.platform.startswith("linux") else None
    os.setsid()  # its own process group: the zygote kills the whole group
    if mode == "namespaces":
        _check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid:
            _close_host_proc()
            for fd in (job["request_fd"], job["response_fd"], submission_fd, report_w):
                os.close(fd)
            _, status = os.waitpid(pid, 0)
            report = b""
            with contextlib.suppress(OSError):
                report = os.read(report_r, HEADER.size)
            if len(report) == HEADER.size and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                (status,) = HEADER.unpack(report)
            _mirror_exit(status)
        # PID 1 of the new namespace. Dies with the process outside if that is killed.
        os.close(report_r)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        poller = select.poll()  # (its parent is outside the namespace: getppid() says 0)
        poller.register(report_w, select.POLLOUT)
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
            os._exit(1)  # the parent died before the death signal was armed
        _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
               "unshare(mount, net, ipc, uts)")
        switch = job["switch_uid"]
        owner = job["sandbox_uid"] if switch else os.geteuid()
        group = job["sandbox_uid"] if switch else os.getegid()
        _mount(libc, "tmpfs", "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={job['work_mb']}m,nr_inodes=4096,mode=700,uid={owner},gid={group}")
        worker_pid = os.fork()
        if worker_pid:
            _close_host_proc()
            for fd in (job["request_fd"], job["response_fd"], submission_fd):
                os.close(fd)
            _namespace_init(worker_pid, report_w)
        # The worker, PID 2.
        os.close(report_w)
        os.chdir("/sandbox")
        if switch:
            _drop_to(job["sandbox_uid"])
        else:
            # Cannot change uid (not root, or root of a user namespace that maps no other
            # uid): a nested user namespace removes every capability over the mount
            # namespace, so none of the walls can be remounted or undone.
            uid, gid = os.geteuid(), os.getegid()
            # Mapping ids needs a proc file system, which the sandbox's tree does not have:
            # the zygote kept a handle on the host's (closed right after, so student code
            # never sees it).
            _check(libc.unshare(CLONE_NEWUSER), "unshare(user, nested)")
            _map_ids(uid, gid, HOST_PROC[0])
        sys.path.append("/sandbox")
    else:
        os.chdir(job["work_dir"])
        if mode == "uid" and job["switch_uid"]:
            # Its own folder becomes its whole file system: no /proc (the grader's command
            # line names the class folder), no classmates' files, no shared /tmp. Every
            # module it may use was imported by the zygote (PRELOAD).
            try:
                os.chroot(job["work_dir"])
                os.chdir("/")
                WALLS["chroot"] = True
            except OSError:
                pass  # no CAP_SYS_CHROOT: the uid and the folder's mode are all there is
            _drop_to(job["sandbox_uid"])
        sys.path.append(os.getcwd())
    _close_host_proc()
    _copy_submission(submission_fd, job["submission_name"], job["work_mb"] * 1024 * 1024 // 4)
    os.environ["HOME"] = os.environ["TMPDIR"] = os.getcwd()
    if libc is not None:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    set_limits(job)
    if libc is not None:
        try:
            install_seccomp(libc)
            WALLS["seccomp"] = True
        except SetupError:
            pass  # an architecture without a table here: the other walls still stand
    if mode != "namespaces":
        block_sockets()


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


# System calls a worker never needs and that would let it reach beyond its own lifetime or
# into another sandbox (seccomp, Linux's system-call filter; numbers from the kernel's
# syscall tables). Refused with EPERM, so Python raises PermissionError:
#   setsid, setpgid: leaving the process group the zygote kills (the modes without a PID
#       namespace rely on it);
#   flock and fcntl's record locks: byte-range locks are kernel state on files every sandbox
#       can open (the standard library), a channel that survives file permissions;
#   socket, socketpair: abstract Unix sockets reach across sandboxes without a network
#       namespace; no worker needs a socket (the grader talks over inherited pipes);
#   SysV IPC, POSIX message queues, key rings: kernel objects that outlive the process (a
#       uid's key ring outlives all its processes, and uids are reused by later sandboxes);
#   ptrace, process_vm_*, perf_event_open, userfaultfd, bpf, io_uring, unshare, setns:
#       inspection and kernel interfaces nothing here needs.
SECCOMP_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SECCOMP_DENY = {
    "x86_64": {"setsid": 112, "setpgid": 109, "flock": 73, "socket": 41, "socketpair": 53,
               "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240, "ptrace": 101,
               "process_vm_readv": 310, "process_vm_writev": 311, "add_key": 248,
               "request_key": 249, "keyctl": 250, "perf_event_open": 298, "userfaultfd": 323,
               "bpf": 321, "io_uring_setup": 425, "unshare": 272, "setns": 308},
    "aarch64": {"setsid": 157, "setpgid": 154, "flock": 32, "socket": 198, "socketpair": 199,
                "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "ptrace": 117,
                "process_vm_readv": 270, "process_vm_writev": 271, "add_key": 217,
                "request_key": 218, "keyctl": 219, "perf_event_open": 241, "userfaultfd": 282,
                "bpf": 280, "io_uring_setup": 425, "unshare": 97, "setns": 268},
}
SECCOMP_FCNTL = {"x86_64": 72, "aarch64": 25}
#: F_GETLK, F_SETLK, F_SETLKW and their open-file-description forms.
FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)


def seccomp_program(machine: str) -> bytes:
    """A classic-BPF seccomp filter refusing :data:`SECCOMP_DENY` and fcntl's lock commands
    (``struct sock_filter`` entries; see Documentation/userspace-api/seccomp_filter.rst).
    Any other architecture (a 32-bit call on x86_64) or an x32 system call is killed."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    deny = sorted(SECCOMP_DENY[machine].values())
    n, m = len(deny), len(FCNTL_LOCKS)
    refuse = 6 + n + 3 + m + 1  # index of the final "return EPERM"
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, SECCOMP_ARCH[machine]), (ret, 0, 0, kill),
            (ld_abs, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, kill)]
    for number in deny:
        prog.append((jeq, refuse - len(prog) - 1, 0, number))
    prog += [(jeq, 1, 0, SECCOMP_FCNTL[machine]), (ret, 0, 0, allow),
             (ld_abs, 0, 0, 24)]  # fcntl: the low 32 bits of args[1] (little-endian)
    for cmd in FCNTL_LOCKS:
        prog.append((jeq, refuse - len(prog) - 1, 0, cmd))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    assert len(prog) == refuse + 1
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def install_seccomp(libc) -> None:
    """Load :func:`seccomp_program` into this process (no new privileges must be set)."""
    machine = platform.machine()
    if machine not in SECCOMP_ARCH or sys.byteorder != "little":
        raise SetupError(f"seccomp: no system call table for {machine}")
    code = seccomp_program(machine)
    filters = ctypes.create_string_buffer(code, len(code))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = Program(len(code) // 8, ctypes.addressof(filters))
    _check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(program), 0, 0), "seccomp")


def block_sockets() -> None:
    """Where no network namespace is available: refuse Python-level socket creation. (Code
    can still reach the C library through ctypes; only the namespace mode closes that.)"""

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the grading sandbox")

    socket.socket = refuse  # type: ignore[assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.socketpair = refuse  # type: ignore[assignment]


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


def install_runtime(cfg) -> dict:
    """What every worker's serving loop needs, built once in the zygote: numpy, the
    plain-data converter, and stand-ins for plotting libraries."""
    import numpy as np

    plain = {"__name__": "autograde_plain"}
    exec(compile(cfg["plain_source"], "plain.py", "exec"), plain)

    # A cell that draws a figure beside an exercise runs, draws nothing, and the exercise
    # is still graded.
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

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    silent = Silent()

    def subplots(nrows=1, ncols=1, *args, squeeze=True, **kwargs):
        """Like matplotlib's: (figure, axes), axes shaped (nrows, ncols) and squeezed."""
        axes = np.empty((int(nrows), int(ncols)), dtype=object)
        axes.fill(silent)
        if squeeze:
            axes = axes.item() if axes.size == 1 else axes.reshape(-1) if 1 in axes.shape else axes
        return silent, axes

    for name in cfg["stub_modules"]:
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so "import matplotlib.pyplot" works
        module.__getattr__ = lambda attr: subplots if attr == "subplots" else silent
        sys.modules[name] = module
    for name in cfg["stub_modules"]:
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, sys.modules[name])
    return {"np": np, "to_plain": plain["to_plain"], "NotPlainData": plain["NotPlainData"]}


def compile_unit(source: str, filename: str, line: int):
    """Compile a unit whose first line is line ``line`` of the student's file, so that
    tracebacks give the file's own line numbers (the grader sends the unit unpadded: padding
    would cost the square of a long file's line count). A code object's line table is
    relative to its first line, so moving the first lines moves every line."""
    code = compile(source, filename, "exec", dont_inherit=True)
    return _shift_lines(code, line - 1) if type(line) is int and line > 1 else code


def _shift_lines(code, by: int):
    consts = tuple(_shift_lines(c, by) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_firstlineno=code.co_firstlineno + by, co_consts=consts)


def serve(runtime, job, mode: str) -> None:
    """Answer the grader's requests until it closes the pipe."""
    request_fd, response_fd = job["request_fd"], job["response_fd"]
    np, to_plain, NotPlainData = runtime["np"], runtime["to_plain"], runtime["NotPlainData"]
    namespace = {"__name__": "submission", "__builtins__": builtins,
                 "__file__": os.path.join(os.getcwd(), job["submission_name"]),
                 # The notebook's check cells call self_check(...); here it does nothing.
                 "self_check": lambda *args, **kwargs: None}
    sys.argv = [namespace["__file__"]]  # no host paths, no pipe numbers handed out
    output = CappedOutput()
    sys.stdout = sys.stderr = output
    exit_now = os._exit  # student code may replace os._exit; the loop keeps the real one
    filenames = set()
    server = os.getpid()
    write_frame(response_fd, {"op": "ready", "isolation": mode, "walls": dict(WALLS),
                              "numpy": np.__version__, "python": platform.python_version()})
    while True:
        try:
            request = read_frame(request_fd)
        except (EOFError, OSError, ValueError):
            exit_now(0)
        reply = {"id": request.get("id")}
        if request.get("op") == "exec":
            filenames.add(request["filename"])
            try:
                code = compile_unit(request["source"], request["filename"], request.get("line", 1))
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
            exit_now(0)
        try:
            write_frame(response_fd, reply)
        except (ValueError, TypeError, RecursionError):
            write_frame(response_fd, {"id": reply["id"], "ok": False, "not_plain": True,
                                      "message": "returned a value that cannot be sent back"})


# ----------------------------------------------------------------------------- zygote

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
    control = socket.socket(fileno=control_fd)
    cfg, _ = recv_message(control)
    if cfg is None:
        os._exit(0)
    try:
        mode = prepare_zygote(cfg)
        runtime = install_runtime(cfg)
    except Exception as exc:
        send_message(control, {"op": "fatal", "message": f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    send_message(control, {"op": "ready", "isolation": mode})
    statuses: dict = {}  # reaped workers: pid -> wait status, until the grader asks
    workers: set = set()  # pids of the workers forked and not yet reported
    # Orphans of a worker (its children, once it is killed) come to the zygote instead of
    # the machine's init, which may be slow to reap them: they are reaped here at once.
    try:
        _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--zygote":
        zygote(int(sys.argv[2]))
    else:
        sys.exit("usage: python -I -S -B worker.py --zygote FD (started by autograde.sandbox)")
