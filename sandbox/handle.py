"""The grader's handle on one submission: a confined worker process and calls as data.

    with Sandbox("alice.ipynb", timeout=10) as sandbox:
        loss = sandbox.call("chinchilla_loss", 175e9, 300e9)   # a float, or SubmissionError

One worker serves every call for one submission, and it is forked in milliseconds from a
*zygote*, a template process started once per grading run that has already built the
confined file system and imported numpy (:class:`Zygote`; starting Python and numpy is
most of the cost, and a process per call would be far slower). The worker runs the
submission's units (cells, or top-level statements of a ``.py``) when the sandbox opens;
then each ``call`` sends a function name and JSON arguments, and gets back plain data or
an error.

What the grader enforces from the outside, because nothing inside the worker can be
trusted once student code has run there (:mod:`sandbox.confined` builds the walls):

* a wall-clock limit on every unit and every call: the worker is killed when it is late;
* a crash, a kill, ``os._exit`` or a malformed frame ends that worker; the next call starts
  a fresh one and replays the units, skipping any unit that itself killed or hung the
  worker, so one bad cell or function costs only itself;
* only strictly parsed plain data comes back (:mod:`sandbox.protocol`);
* a statement or cell too large to send is skipped, with a message, not the whole file;
* where the grader is root, every submission runs as its own leased uid, handed out only
  once no process runs as it (:class:`_UidLease`): nothing one submission leaves behind
  can meet the next.

Alternatives considered: bubblewrap (Flatpak's sandbox) builds similar namespaces, but
starts a program per sandbox; the zygote forks a worker with Python and numpy already
loaded, which is what keeps a cold grading run under half a second. The worker's
namespaces give the guarantee bubblewrap's ``--die-with-parent`` and PID 1 give: its init
dies, and the kernel kills the rest.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import protocol, textsafe
from .submission import MAX_UNIT_CHARS, Submission, Unit, read_submission
from .locks import lock_folder
from .template import TemplateProcess, ZygoteRefused

WORKER = Path(__file__).with_name("worker.py")
PLAIN_SOURCE = Path(__file__).with_name("plain.py").read_text(encoding="utf-8")

#: Packages student code may import besides the standard library.
ALLOWED_PACKAGES = ("numpy",)
#: Replaced by silent stand-ins: plots are not graded, and a plotting line in a cell must not
#: cost the exercise defined in the same cell (coursefig: the course's figure style, which
#: the exercises' plot cells use).
STUB_MODULES = ("matplotlib", "matplotlib.pyplot", "seaborn", "coursefig")
ISOLATION_MODES = ("auto", "namespaces", "uid", "rlimits")
SANDBOX_UID_BASE = 64000  # unprivileged uids for sandboxes when the grader is root
SANDBOX_UID_COUNT = 1000
START_TIMEOUT = 60.0  # starting Python and numpy; never the student's fault
#: A function that hung or killed its worker this many times is not called again: each
#: costs a timeout or a restart, and the other exercises must not pay for them.
STRIKES = 2

_namespaces_refused: str | None = None  # set once the kernel says no; later zygotes skip it


def _submission_error():
    from .plain import SubmissionError

    return SubmissionError


def package_dirs(names=ALLOWED_PACKAGES) -> dict:
    """Folders of the allowed packages, found explicitly (the worker runs without ``site``):
    ``{"numpy": ".../site-packages/numpy", "numpy.libs": ...}``."""
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"package {name!r} is not installed for {sys.executable}")
        folder = Path(list(spec.submodule_search_locations)[0])
        found[name] = str(folder)
        libs = folder.with_name(name + ".libs")  # vendored shared libraries of manylinux wheels
        if libs.is_dir():
            found[libs.name] = str(libs)
    return found


COURSE_ROOT = Path(__file__).resolve().parents[1]


def readable_by_others(path: Path = COURSE_ROOT) -> bool:
    """Whether a process of another, unprivileged uid can read ``path``: every folder on
    the way must be searchable by "others", and the folder itself listable. In the ``uid``
    mode that is what keeps tests and solutions out of a sandbox's reach (``chmod 700``)."""
    path = path.resolve()
    for folder in [*reversed(path.parents), path]:
        try:
            mode = folder.stat().st_mode
        except OSError:
            return False
        if not mode & 0o001:
            return False
    return bool(path.stat().st_mode & 0o004)


def protect_grader_memory() -> None:
    """Make this (grading) process non-dumpable: then a sandbox running under the same uid
    (the weakest isolation mode) cannot read the grader's memory through ``/proc/PID/mem``,
    where expected values live."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass  # not Linux


_switch_uid: bool | None = None


def can_switch_uid() -> bool:
    """Whether this process may give a child another uid: root on the host, not root inside
    a user namespace that maps no other uid (rootless containers)."""
    global _switch_uid
    if _switch_uid is None:
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            _switch_uid = False
        else:
            probe = subprocess.run(
                [sys.executable, "-I", "-S", "-c",
                 f"import os; os.setgroups([]); os.setresgid(*[{SANDBOX_UID_BASE}] * 3); "
                 f"os.setresuid(*[{SANDBOX_UID_BASE}] * 3)"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={})
            _switch_uid = probe.returncode == 0
    return _switch_uid


def processes_of(uid: int, thorough: bool = True) -> list:
    """Pids of the processes whose real, effective or saved uid is ``uid`` (Linux /proc).
    A process that made itself non-dumpable shows its /proc folder as root's, so with
    ``thorough`` the status of those is read too (about 0.1 ms a process)."""
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return found
    key = str(uid).encode()
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            owner = entry.stat(follow_symlinks=False).st_uid
            if owner != uid and (owner != 0 or not thorough):
                continue
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read(1024).split(b"\n")
            fields = dict(line.split(b":", 1) for line in status if b":" in line)
            if fields.get(b"State", b"").split()[:1] in ([b"Z"], [b"X"]):
                continue  # a zombie: it runs nothing, and its parent is dying too
            if key in fields.get(b"Uid", b"").split()[:3]:
                found.append(int(entry.name))
        except OSError:
            pass  # it has just exited
    return found


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid``, from a process of that uid (``kill(-1)`` reaches
    exactly them, with no pid that could be reused meanwhile)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)


def clear_uid(uid: int, seconds: float = 2.0, thorough: bool = True) -> bool:
    """Kill what runs as ``uid`` until nothing does; False if something still does after
    ``seconds`` (then that uid is not handed to another submission). ``thorough=False``
    where the worker had a PID namespace: nothing of it can outlive its init, so only an
    honest look (processes that did not hide as root's) is made."""
    started = time.monotonic()
    while processes_of(uid, thorough):
        waited = time.monotonic() - started
        if waited > seconds:
            return False
        if waited > 0.05:  # not just the last of a killed worker on its way out
            kill_uid(uid)
        time.sleep(0.002)
    return True


class _UidLease:
    """An unprivileged uid no other sandbox on this machine uses right now (a lock file per
    uid), so that sandboxes cannot signal or share process limits with each other. A uid is
    handed out only once no process runs as it: nothing one submission left running can
    meet the next one that gets its uid."""

    def __init__(self, thorough: bool = True):
        self.uid, self._fd, self.thorough = None, None, thorough
        folder = lock_folder("autograde-uids")  # one per machine, whatever tempfile.tempdir a run set
        start = (os.getpid() * 7) % SANDBOX_UID_COUNT
        for i in range(SANDBOX_UID_COUNT):
            uid = SANDBOX_UID_BASE + (start + i) % SANDBOX_UID_COUNT
            fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if not clear_uid(uid, thorough=thorough):
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise RuntimeError("no free sandbox uid")

    def release(self):
        if self._fd is not None:
            clear_uid(self.uid, thorough=self.thorough)
            os.close(self._fd)
            self._fd = None


class Zygote(TemplateProcess):
    """The template process that forks workers (see :mod:`sandbox.confined`). One per
    grading process and isolation mode, started on first use, shared by all sandboxes (a
    lock serialises its requests), stopped at exit."""

    what = "the sandbox's template process"
    child = "a worker"
    start_timeout = START_TIMEOUT

    def __init__(self, wanted: str):
        self.make_dir("autograde-zygote-")
        lib = self.dir / "lib"
        lib.mkdir(mode=0o755)
        packages = package_dirs()
        for name, folder in packages.items():
            (lib / name).symlink_to(folder)
        # No PATH: student code has no business starting programs (a notebook's Colab
        # bootstrap would try `git clone`); a name lookup fails at once.
        env = {"PATH": "", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "MPLBACKEND": "Agg"}
        config = {"isolation": wanted, "packages": packages, "root_dir": str(self.dir / "root"),
                  "lib_dir": str(lib), "plain_source": PLAIN_SOURCE,
                  "switch_uid": can_switch_uid(),
                  "stub_modules": list(STUB_MODULES)}
        self.launch(WORKER, env, config)

    def refusal(self, message) -> str:
        return protocol.text(message) or "no greeting"

    def kill(self, pid: int, grace: float = 0.0):
        """Kill a worker and everything it started; its exit code (negative: a signal).
        ``grace``: seconds a worker that closed its pipe gets to exit by itself first."""
        return self._ask({"op": "kill", "pid": pid, "grace": grace}).get("status")

    def remove_dir(self) -> None:
        remove_tree(self.dir)


_zygotes: dict = {}
_zygotes_lock = threading.Lock()


def zygote_for(wanted: str) -> Zygote:
    """The shared, ready zygote for an isolation mode; ``auto`` falls back (once, for good)
    to ``uid``/``rlimits`` when the kernel refuses namespaces."""
    global _namespaces_refused
    with _zygotes_lock:
        if _stopping:  # the grader was interrupted: no new sandbox (see stop_all)
            raise RuntimeError("the grader is stopping")
        if wanted == "auto" and _namespaces_refused:
            wanted = "fallback"
        zygote = _zygotes.get(wanted)
        if zygote is not None and zygote.isolation is not None and zygote.alive:
            return zygote
        try:
            zygote = _ready(_take_launched(wanted), wanted)
        except ZygoteRefused as exc:
            if wanted != "auto" or "namespace" not in str(exc):
                raise RuntimeError(f"the sandbox could not be built: {exc}") from None
            _namespaces_refused = str(exc)
            wanted = "fallback"
            zygote = _zygotes.get(wanted)
            if zygote is None or zygote.isolation is None or not zygote.alive:
                zygote = _ready(_take_launched(wanted), wanted)
        _zygotes[wanted] = zygote
        return zygote


def _take_launched(wanted: str) -> Zygote | None:
    """Remove and return the zygote :func:`prestart` launched for ``wanted``, if it has not
    greeted yet (a ready one, dead or alive, stays where it is)."""
    zygote = _zygotes.get(wanted)
    if zygote is not None and zygote.isolation is None:
        return _zygotes.pop(wanted)
    return None


def _ready(launched: Zygote | None, wanted: str) -> Zygote:
    """``launched`` (a zygote :func:`prestart` launched) once it greets; a new zygote when
    there is none, or when it failed for any reason but a refusal (try once more)."""
    if launched is not None:
        try:
            return launched.wait_ready()
        except ZygoteRefused:
            raise
        except RuntimeError:
            pass  # e.g. killed while starting; wait_ready has cleaned it up
    return Zygote(wanted).wait_ready()


def prestart(wanted: str = "auto") -> None:
    """Launch the zygote now, so that it builds its root and imports numpy while the grader
    imports its checks (on another core), and wait for its greeting in a background thread,
    which also starts the fallback zygote if namespaces are refused. The launch is done in
    the calling thread: a background thread would be starved of the interpreter lock by
    the imports. Errors surface later, at the first real use."""
    try:
        with _zygotes_lock:
            key = "fallback" if wanted == "auto" and _namespaces_refused else wanted
            if key not in _zygotes:
                _zygotes[key] = Zygote(key)
    except Exception:
        pass

    def start():
        try:
            zygote_for(wanted)
        except Exception:
            pass

    threading.Thread(target=start, name="autograde-zygote", daemon=True).start()


_stopping = False  # set by stop_all: an interrupted grader starts no more sandboxes


def stop_all(stopping: bool = True) -> None:
    """Close every zygote now (the zygote kills its workers when the grader's socket
    closes, see sandbox.confined.zygote), and, with ``stopping``, refuse to start new
    ones until ``stop_all(False)``: what Ctrl-C or SIGTERM of a class run does."""
    global _stopping
    _stopping = stopping
    with _zygotes_lock:
        for zygote in _zygotes.values():
            with contextlib.suppress(OSError):  # wakes a thread blocked on the socket
                zygote.socket.shutdown(socket.SHUT_RDWR)
    _stop_zygotes()


@atexit.register
def _stop_zygotes() -> None:
    with _zygotes_lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


# ----------------------------------------------------------------------------- folders

#: A submission's folder on the host (the modes without namespaces; with them it is a tmpfs
#: of ``work_mb`` and 4,096 inodes) may hold at most this many entries, nested at most
#: :data:`MAX_WORK_DEPTH` deep, and ``work_mb`` in all. The grader checks it every
#: :data:`DISK_CHECK_SECONDS` while the worker runs (and after every unit and call), and
#: kills a worker past a bound: the real bound is the limit plus what the worker writes in
#: one interval (each file is also capped at ``file_mb`` by RLIMIT_FSIZE).
MAX_WORK_ENTRIES = 4096
MAX_WORK_DEPTH = 64
DISK_CHECK_SECONDS = 0.1
#: How often the memory of a submission's whole process group is summed (a scan of /proc).
MEMORY_CHECK_SECONDS = 0.25
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def group_memory(pgid: int) -> int:
    """Bytes of private resident memory (anonymous pages: statm's resident minus shared)
    of every process in process group ``pgid``, summed. A worker's processes cannot leave
    its group (seccomp refuses setsid and setpgid), so this is the whole submission's. Pages
    still shared copy-on-write with the zygote count once per process: an over-estimate of
    a few tens of MB. 0 where there is no /proc."""
    total = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
                # pgrp is the third field after the command name, which may hold spaces
                if int(stat[stat.rindex(b")") + 2:].split()[2]) != pgid:
                    continue
                with open(f"/proc/{entry.name}/statm", "rb") as f:
                    fields = f.read().split()
                total += (int(fields[1]) - int(fields[2])) * PAGE_BYTES
            except (OSError, ValueError, IndexError):
                continue  # it has just exited
    return total


def folder_usage(path: Path, max_entries: int = MAX_WORK_ENTRIES,
                 max_depth: int = MAX_WORK_DEPTH) -> tuple[int, int, int]:
    """(entries, bytes on disk, deepest level) under ``path``, without recursion and
    without long paths (each level is opened relative to its parent); counting stops past
    ``max_entries`` entries or ``max_depth`` levels, so its cost is bounded too."""
    entries = size = deepest = 0
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top = os.open(path, flags)
    except OSError:
        return 0, 0, 0
    stack = [(top, os.scandir(top))]
    try:
        while stack:
            fd, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                listing.close()
                os.close(fd)
                stack.pop()
                continue
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            size += info.st_blocks * 512
            if entries > max_entries:
                break
            if entry.is_dir(follow_symlinks=False):
                deepest = max(deepest, len(stack))
                if len(stack) > max_depth:
                    break
                try:
                    child = os.open(entry.name, flags, dir_fd=fd)
                except OSError:
                    continue
                stack.append((child, os.scandir(child)))
    finally:
        for fd, listing in stack:
            listing.close()
            os.close(fd)
    return entries, size, deepest


def remove_tree(path: Path) -> None:
    """``rm -rf path`` without recursion (``shutil.rmtree`` recurses, and gives up on a
    folder 3,000 levels deep) and without long paths: it goes down one level at a time by
    file descriptor, and back up through ``..``, keeping only the folders' names. Meant for
    folders no process writes to any more (a killed worker's). Folders a student made
    unreadable are made readable first (the grader owns them, or is root)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    names: list = []  # the folders entered below ``path``
    try:
        while True:
            descended = False
            with os.scandir(fd) as listing:
                for entry in listing:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(OSError):
                                os.chmod(entry.name, 0o700, dir_fd=fd)
                            child = os.open(entry.name, flags, dir_fd=fd)
                            os.close(fd)
                            fd, descended = child, True
                            names.append(entry.name)
                            break
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError:
                        continue
            if descended:
                continue
            if not names:
                break
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            try:
                os.rmdir(names.pop(), dir_fd=fd)
            except OSError:
                if not names:  # cannot be removed: stop rather than loop
                    break
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


@dataclass
class UnitResult:
    unit: Unit
    status: str  # "ok", "error", "timeout", "crashed" or "skipped"
    message: str = ""

    def describe(self) -> str:
        where = f"{self.unit.label} (`{self.unit.first_line}`)"
        if self.status == "error":
            return f"{where} raised {self.message}"
        if self.status == "timeout":
            return f"{where} did not finish within the time limit and was skipped"
        if self.status == "crashed":
            return f"{where} stopped the process running it ({self.message}) and was skipped"
        if self.status == "skipped":
            return f"{where} was skipped: {self.message}"
        return f"{where} ran"


class _Fatal(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Sandbox:
    """A context manager that grades one submission file in a confined worker process.

    ``timeout`` bounds each unit and each call, in seconds. ``memory_mb`` bounds memory
    twice: each process's address space (RLIMIT_AS), and the private resident memory of all
    the submission's processes together, summed every :data:`MEMORY_CHECK_SECONDS` while a
    unit or call runs (:func:`group_memory`; no cgroup is needed). Within one interval the
    real bound is ``max_processes`` times ``memory_mb`` of address space, for at most that
    long. ``cpu_seconds`` is each process's CPU time. ``isolation`` is one of
    :data:`ISOLATION_MODES` (see :mod:`sandbox.confined`); after opening,
    ``self.isolation`` says which was reached.
    """

    def __init__(self, path, timeout: float = 10.0, *, memory_mb: int = 1024,
                 cpu_seconds: int = 120, max_processes: int = 16, isolation: str = "auto",
                 max_starts: int = 16):
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.path = Path(path)
        self.timeout = float(timeout)
        self.limits = {"memory_mb": int(memory_mb), "cpu_seconds": int(cpu_seconds),
                       "max_processes": int(max_processes), "file_mb": 16, "work_mb": 32}
        self.wanted = isolation
        self.max_starts = max_starts
        self.submission: Submission = read_submission(self.path)
        self.unit_results: dict = {}  # unit index -> UnitResult, from the first run
        self.skipped: set = set()  # units that hung or killed a worker
        self.isolation: str | None = None
        self.starts = 0
        self.gave_up: str | None = None
        self._pid = None
        self._zygote = None
        self._reader = None
        self._request_fd = None
        self._next_id = 0
        self._memory_checked = 0.0  # time.monotonic() of the last group_memory scan
        self._deadline: float | None = None
        self._dir = None
        self._lease = None
        self._strikes: dict = {}  # function -> (last fatal kind, how many times)
        self.load_budget = max(60.0, 6 * self.timeout)
        self._load_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def open(self) -> None:
        if self.submission.problem is None:
            self._dir = Path(tempfile.mkdtemp(prefix="autograde-"))
            os.chmod(self._dir, 0o711)
            try:
                self._load()
            except BaseException:
                self.close()  # __exit__ will not run when __enter__ fails
                raise

    def close(self) -> None:
        self._kill()
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._dir is not None:
            remove_tree(self._dir)
            self._dir = None

    @property
    def problems(self) -> list:
        """Student-facing lines about units that did not run cleanly. The units skipped
        because the file as a whole ran past :attr:`load_budget` are one line (they are
        everything from the first of them on; a notebook of slow cells would list hundreds)."""
        late = self._skipped_for_time()
        folded = {id(r) for r in late[1:]}
        out = []
        for r in self.unit_results.values():
            if r.status == "ok" or id(r) in folded:
                continue
            if late and r is late[0]:
                first, last = late[0].unit, late[-1].unit
                more = (f" and the {len(late) - 1} statements after it, to {last.label},"
                        if len(late) > 1 else "")
                out.append(f"{first.label} (`{first.first_line}`){more} {'were' if more else 'was'} "
                           f"skipped: {self._late}")
                continue
            out.append(r.describe())
        return out

    @property
    def _late(self) -> str:
        return f"the file as a whole ran for more than {self.load_budget:g} s"

    def _skipped_for_time(self) -> list:
        """The units skipped because the file as a whole ran past :attr:`load_budget`, in order."""
        return sorted((r for r in self.unit_results.values() if r.status == "skipped" and r.message == self._late),
                      key=lambda r: r.unit.index)

    @property
    def ran_out_of_time(self) -> bool:
        """Whether the file as a whole ran past :attr:`load_budget` (then code appended to it
        would not run either)."""
        return bool(self._skipped_for_time())

    # ------------------------------------------------------------------ worker process

    def _fresh_work_dir(self) -> Path:
        """The worker's folder where namespaces are unavailable (else it gets a tmpfs). The
        folders of earlier, killed workers go first: what one filled must not count
        against the next (nothing runs in them any more)."""
        for old in range(self.starts):
            remove_tree(self._dir / f"work{old}")
        work = self._dir / f"work{self.starts}"
        work.mkdir(mode=0o700)
        if self._lease is not None:
            os.chown(work, self._lease.uid, self._lease.uid)
        return work

    def _spawn(self) -> None:
        if self.starts >= self.max_starts:
            self.gave_up = (f"the grader gave up after restarting your code {self.starts} times "
                            "(it kept crashing or hanging)")
            raise _Fatal("crashed", self.gave_up)
        if can_switch_uid() and self._lease is None:
            zygote = zygote_for(self.wanted)
            self._lease = _UidLease(thorough=zygote.isolation != "namespaces")
        self.starts += 1
        work = self._fresh_work_dir()
        job = {"work_dir": str(work), "submission_name": textsafe.file_name(self.path.name),
               "switch_uid": self._lease is not None,
               "sandbox_uid": self._lease.uid if self._lease else os.geteuid(), **self.limits}
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        submission = os.open(self.path, os.O_RDONLY)
        try:
            zygote = self._zygote = zygote_for(self.wanted)
            try:
                self._pid = zygote.spawn(job, (request_r, response_w, submission))
            except RuntimeError:  # the zygote died (killed?): one more try with a new one
                self._zygote = zygote = zygote_for(self.wanted)
                self._pid = zygote.spawn(job, (request_r, response_w, submission))
        except BaseException:
            for fd in (request_w, response_r):
                os.close(fd)
            raise
        finally:
            for fd in (request_r, response_w, submission):
                os.close(fd)
        self._request_fd = request_w
        self._reader = protocol.FrameReader(response_r)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            hello = self._reader.read(deadline)
        except (protocol.WorkerTimeout, protocol.WorkerGone, protocol.ProtocolError) as exc:
            self._kill()
            raise RuntimeError(f"the sandbox worker did not start ({type(exc).__name__})") from None
        if hello.get("op") != "ready":
            self._kill()
            raise RuntimeError("the sandbox worker could not be built: "
                               + (protocol.text(hello.get("message")) or "no greeting"))
        self.isolation = zygote.isolation

    def _check_memory(self) -> None:
        """Kill a worker whose processes together hold more than ``memory_mb`` (each one's
        address space is also capped at ``memory_mb`` by RLIMIT_AS)."""
        now = time.monotonic()
        if self._pid is None or now - self._memory_checked < MEMORY_CHECK_SECONDS:
            return
        self._memory_checked = now
        used = group_memory(self._pid)
        if used > self.limits["memory_mb"] * 1024 * 1024:
            self._kill()
            raise _Fatal("crashed", f"its processes used {used / 2**20:,.0f} MB of memory "
                                    f"together, more than the {self.limits['memory_mb']} MB "
                                    "a submission may use in all")

    def _check_disk(self) -> None:
        """Kill a worker whose host folder is past its bounds (see :data:`MAX_WORK_ENTRIES`);
        in the namespaces mode its tmpfs bounds it and there is nothing to check."""
        if self.isolation == "namespaces" or self._dir is None:
            return
        limit = self.limits["work_mb"] * 1024 * 1024
        entries, size, depth = folder_usage(self._dir)
        if entries > MAX_WORK_ENTRIES or size > limit or depth > MAX_WORK_DEPTH:
            self._kill()
            raise _Fatal("crashed", f"it wrote more to disk than a submission may (at most "
                                    f"{MAX_WORK_ENTRIES:,} files and folders, "
                                    f"{MAX_WORK_DEPTH} levels deep, "
                                    f"{self.limits['work_mb']} MB in all)")

    def _kill(self, grace: float = 0.0):
        """Stop the worker (and all it started); its exit code, if known."""
        pid, self._pid = self._pid, None
        status = None
        if pid is not None:
            try:
                status = self._zygote.kill(pid, grace)
            except RuntimeError:
                pass  # the zygote is gone; its workers lost their parent and are exiting
            if self.isolation == "uid" and self._lease is not None:
                # Without a PID namespace the process group is the worker's edge (seccomp
                # keeps its processes in it); everything running as this sandbox's own uid
                # is the sandbox's, so kill that too.
                kill_uid(self._lease.uid)
        if self._request_fd is not None:
            os.close(self._request_fd)
            self._request_fd = None
        if self._reader is not None:
            os.close(self._reader.fd)
            self._reader = None
        return status

    def _request(self, message: dict, timeout: float) -> dict:
        """One round trip. Raises _Fatal("timeout"|"crashed") after killing the worker."""
        self._next_id += 1
        message["id"] = self._next_id
        deadline = time.monotonic() + timeout
        try:
            protocol.write_all(self._request_fd, protocol.encode(message), deadline)
            while True:
                try:
                    reply = self._reader.read(min(deadline, time.monotonic() + DISK_CHECK_SECONDS))
                except protocol.WorkerTimeout:
                    if time.monotonic() >= deadline:
                        raise
                    self._check_disk()
                    self._check_memory()
                    continue
                if reply.get("id") == self._next_id:
                    self._check_disk()
                    return reply
                # A frame the grader did not ask for (student code writing to the pipe):
                # ignore it; the real answer must still come before the deadline.
        except protocol.WorkerTimeout:
            self._kill()
            raise _Fatal("timeout", f"no answer within {timeout:g} s") from None
        except protocol.WorkerGone:
            raise _Fatal("crashed", _exit_reason(self._kill(grace=0.5))) from None
        except protocol.ProtocolError as exc:
            self._kill()
            raise _Fatal("crashed", f"it sent malformed data to the grader ({exc})") from None

    # ------------------------------------------------------------------ units

    def _load(self) -> None:
        """Start a worker and run every unit not known to be fatal, in order. All runs of
        the units together get :attr:`load_budget` seconds; units past it are skipped."""
        while True:
            self._spawn()
            try:
                for unit in self.submission.units:
                    if unit.index in self.skipped:
                        continue
                    if self._load_seconds > self.load_budget:
                        self.skipped.add(unit.index)
                        self.unit_results.setdefault(unit.index, UnitResult(unit, "skipped", self._late))
                        continue
                    if len(unit.source) > MAX_UNIT_CHARS:
                        self.skipped.add(unit.index)
                        self.unit_results.setdefault(unit.index, UnitResult(
                            unit, "skipped", f"it is {len(unit.source) / 1e6:.1f} MB of code, "
                                             f"more than the {MAX_UNIT_CHARS / 1e6:.0f} MB "
                                             "a statement or cell may have"))
                        continue
                    started = time.monotonic()
                    try:
                        reply = self._request({"op": "exec", "source": unit.source,
                                               "filename": unit.filename, "line": unit.line},
                                              self.timeout)
                    except protocol.FrameTooLarge as exc:  # escapes made it larger than a frame
                        self.skipped.add(unit.index)
                        self.unit_results.setdefault(unit.index,
                                                     UnitResult(unit, "skipped", str(exc)))
                        continue
                    finally:
                        self._load_seconds += time.monotonic() - started
                    if unit.index not in self.unit_results:
                        if reply.get("ok") is True:
                            self.unit_results[unit.index] = UnitResult(unit, "ok")
                        else:
                            self.unit_results[unit.index] = UnitResult(
                                unit, "error", _error_text(reply, unit))
                return
            except _Fatal as fatal:
                if self.gave_up:
                    return
                self.skipped.add(unit.index)
                self.unit_results.setdefault(unit.index, UnitResult(unit, fatal.status,
                                                                    fatal.message))

    # ------------------------------------------------------------------ calls

    @contextlib.contextmanager
    def deadline(self, seconds: float):
        """Bound every call made inside the block by one shared budget (one test)."""
        previous = self._deadline
        self._deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._deadline = previous

    def call(self, function_name: str, *args, names=None):
        """Call ``function_name(*args)`` in the submission; plain data or SubmissionError."""
        SubmissionError = _submission_error()
        if self.submission.problem is not None:
            raise SubmissionError(f"{textsafe.file_name(self.path.name)} could not be run: "
                                  f"{self.submission.problem}", kind="missing")
        timeout = self.timeout
        if self._deadline is not None:
            timeout = min(timeout, self._deadline - time.monotonic())
            if timeout <= 0:
                raise SubmissionError("the time limit for this test was used up by earlier calls",
                                      kind="timeout")
        strikes = self._strikes.get(function_name)
        if strikes and strikes[1] >= STRIKES:
            kind, what = strikes[0], ("ran out of time" if strikes[0] == "timeout"
                                      else "stopped the process running it")
            raise SubmissionError(f"not called again: it already {what} {STRIKES} times",
                                  kind=kind)
        if self._pid is None and not self.gave_up:
            try:
                self._load()
            except _Fatal:
                pass
        if self.gave_up or self._pid is None:
            raise SubmissionError(self.gave_up or "your code could not be run", kind="crashed")
        try:
            request = {"op": "call", "function": function_name, "args": list(args)}
            if names:  # the hand-out's parameter names: called by them where the signature takes them
                request["names"] = list(names)
            reply = self._request(request, timeout)
        except _Fatal as fatal:
            count = self._strikes.get(function_name, (None, 0))[1] + 1
            self._strikes[function_name] = (fatal.status, count)
            if fatal.status == "timeout":
                raise SubmissionError(f"no answer within {timeout:g} s (an infinite loop?)",
                                      kind="timeout") from None
            raise SubmissionError(f"the process running your code stopped: {fatal.message}",
                                  kind="crashed") from None
        if reply.get("ok") is True:
            try:
                return protocol.plain(reply.get("value"))
            except protocol.ProtocolError as exc:
                raise SubmissionError(f"returned something that is not plain data ({exc})",
                                      kind="not_plain") from None
        if reply.get("missing") is True:
            raise SubmissionError(self._missing_message(function_name,
                                                        protocol.text(reply.get("message"))),
                                  kind="missing")
        if reply.get("not_plain") is True:
            raise SubmissionError(protocol.text(reply.get("message")) or
                                  "returned something that is not a number", kind="not_plain")
        exception_type = reply.get("exception_type")
        if type(exception_type) is not str or not exception_type.isidentifier():
            exception_type = "Exception"
        raise SubmissionError("raised " + _error_text(reply), kind="raised",
                              exception_type=exception_type)

    def _missing_message(self, name: str, why: str) -> str:
        """Why ``name`` cannot be called, as precisely as the units' history allows."""
        if why == "not a function":
            return f"`{name}` in {textsafe.file_name(self.path.name)} is not a function"
        message = f"`{name}` is not defined in {textsafe.file_name(self.path.name)}"
        broken = [self.unit_results[u.index] for u in self.submission.defining_units(name)
                  if u.index in self.unit_results and self.unit_results[u.index].status != "ok"]
        if broken:
            return f"{message}: {broken[-1].describe()}"
        if name in self.submission.markdown_defs:
            return (f"{message}: `def {name}(` appears in a markdown cell; "
                    "change that cell's type to Code")
        return message


def _error_text(reply: dict, unit: Unit | None = None) -> str:
    """'NameError: name 'np' is not defined (cell 4, line 2)' from a worker's error reply;
    the place is left out when it is just the unit's own label."""
    name = protocol.text(reply.get("exception"), 80) or "Exception"
    message = protocol.text(reply.get("message"), 300)
    text = f"{name}: {message}" if message else name
    where = reply.get("where")
    if type(where) is dict and type(where.get("line")) is int:
        place = protocol.text(where.get("file"), 80)
        if place.startswith("cell"):
            text += f" ({place}, line {where['line']})"
        elif unit is None or unit.label != f"line {where['line']}":
            text += f" (line {where['line']})"
    return text


def _exit_reason(code) -> str:
    if code is None:
        return "it exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hints = {"SIGKILL": "killed, e.g. for too many processes or memory",
                 "SIGXCPU": "it used up its CPU time", "SIGSEGV": "it crashed"}
        return f"{name}: {hints.get(name, 'killed by a signal')}"
    if code == 0:
        return "it exited (sys.exit or os._exit inside your code?)"
    return f"it exited with status {code}"
