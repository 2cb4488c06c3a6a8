"""The walls around a worker: file system, namespaces, ids and resource limits.

The zygote builds what every worker shares (:func:`prepare_zygote`: in the ``namespaces``
mode a root holding only the standard library, numpy and the system libraries); each forked
worker then adds its own walls (:func:`enter_worker`: namespaces or a chroot, an
unprivileged uid, resource limits, the seccomp filter of :mod:`.seccomp`). The modes are
described in :mod:`sandbox.confined`.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import platform
import resource
import select
import signal
import socket
import sys

from .frames import HEADER
from .kernel import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER,
                     CLONE_NEWUTS, MNT_DETACH, MS_BIND, MS_NODEV, MS_NOSUID, MS_PRIVATE,
                     MS_RDONLY, MS_REC, MS_REMOUNT, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS,
                     PR_SET_PDEATHSIG, SYS_PIVOT_ROOT, SetupError, check, load_libc)
from .seccomp import install_seccomp

#: Imported by the zygote, so that every worker has them at no cost (and, in the ``uid``
#: mode, has them at all if the interpreter's own folders are unreadable to its uid).
PRELOAD = ("numpy", "numpy.linalg", "numpy.random", "numpy.fft", "numpy.polynomial", "math",
           "cmath", "statistics", "random", "itertools", "functools", "collections",
           "dataclasses", "typing", "fractions", "decimal", "re", "json", "time", "copy",
           "operator", "string", "textwrap", "numbers", "bisect", "heapq", "warnings", "enum",
           "contextlib", "threading", "gc", "inspect", "urllib.request", "encodings.idna",
           "ctypes.util", "datetime", "pprint", "array", "csv", "logging", "numpy.testing")



def _mount(libc, source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
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
    libc = load_libc()
    if os.geteuid() != 0:  # unprivileged: a user namespace first, to be allowed the rest
        uid, gid = os.geteuid(), os.getegid()
        check(libc.unshare(CLONE_NEWUSER), "unshare(user)")
        _map_ids(uid, gid)
    check(libc.unshare(CLONE_NEWNS), "unshare(mount)")
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
    hide_other_packages(libc, root, mounts)  # numpy is the only third-party package here
    device_nodes(libc, root)
    os.makedirs(root + "/sandbox")  # each worker mounts its own tmpfs here
    if not cfg["switch_uid"]:  # workers will need it to map ids (see enter_worker)
        HOST_PROC[0] = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    pivot_into(libc, root)
    return remap_imported_packages(mounts)


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
        libc = load_libc()
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
    libc = load_libc() if sys.platform.startswith("linux") else None
    os.setsid()  # its own process group: the zygote kills the whole group
    if mode == "namespaces":
        check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
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
        check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
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
            check(libc.unshare(CLONE_NEWUSER), "unshare(user, nested)")
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


def block_sockets() -> None:
    """Where no network namespace is available: refuse Python-level socket creation. (Code
    can still reach the C library through ctypes; only the namespace mode closes that.)"""

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the grading sandbox")

    socket.socket = refuse  # type: ignore[assignment]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.socketpair = refuse  # type: ignore[assignment]


def hide_other_packages(libc, root: str, mounts: dict) -> None:
    """Third-party packages are not the standard library: the interpreter's own folder holds
    the base installation's (pytest, IPython...), and /usr holds the system's (Debian's
    python3-yaml...). Cover each with an empty, read-only folder under ``root``."""
    hidden = [f"{target}/{extra}" for target, source in mounts.items()
              if target.startswith("/py/lib") for extra in ("site-packages", "dist-packages")
              if os.path.isdir(os.path.join(source, extra))]
    hidden += [p for pattern in ("/usr/lib/python3*/*-packages", "/usr/lib64/python3*/*-packages",
                                 "/usr/local/lib/python3*/*-packages")
               for p in glob.glob(pattern) if os.path.isdir(root + p)]
    for folder in hidden:
        _mount(libc, "tmpfs", root + folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
               "size=4k,nr_inodes=2,mode=555")


def device_nodes(libc, root: str) -> None:
    """``/dev/null``, ``/dev/zero`` and ``/dev/urandom`` under ``root``, bound from the host's."""
    os.makedirs(root + "/dev")
    for dev in ("null", "zero", "urandom"):
        open(root + "/dev/" + dev, "w").close()
        _mount(libc, "/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)


def pivot_into(libc, root: str) -> None:
    """Make ``root`` the file system's root (pivot_root), drop the old one and remount the new
    one read-only."""
    os.makedirs(root + "/old")
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown syscall number on {platform.machine()}")
    check(libc.syscall(number, b".", b"old"), "pivot_root")
    check(libc.umount2(b"/old", MNT_DETACH), "umount old root")
    os.rmdir("/old")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/")


def remap_imported_packages(mounts: dict) -> list:
    """After the pivot: point the packages already imported (encodings, json, ctypes...),
    which still look for their submodules under the host's paths, at the mounts; the new
    ``sys.path``: the standard library's mounts and ``/py/site``."""
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
