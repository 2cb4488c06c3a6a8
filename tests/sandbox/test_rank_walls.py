"""The walls around an assignment's ranks (sandbox.ranks): a rank forked from the rank zygote
sees only the standard library, numpy and torch, no file of the course, an empty environment,
no terminal, no descriptor but its own socket, a private /tmp and /dev/shm, an unprivileged
uid with limits; nothing it starts survives its group, and no rank survives its grader.

Run both ways: with namespaces (where this machine allows them), and as where they are
refused (``AUTOGRADE_RANK_ISOLATION=uid``: a chroot and a leased uid, Gradescope's case),
which needs root. Each probe is one small group of two ranks."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import multirank
from sandbox.multirank import Limits, RankProgram, run_ranks

ROOT = Path(__file__).resolve().parents[2]
MODES = ["namespaces", "uid"]

PROBE = textwrap.dedent('''
    import os, sys, json, resource, ctypes

    def main(ctx):
        here = json.loads(ctx.payload)
        out = {"uid": os.getuid(), "euid": os.geteuid(), "env": sorted(os.environ),
               "session_leader": os.getsid(0) == os.getpid()}
        found = []
        for name in ("labs", "solutions", "assignments", "grading", "autograde", "tests",
                     "coursefig", "IPython", "pytest", "matplotlib"):
            try:
                __import__(name)
                found.append(name)
            except Exception:
                pass
        out["importable"] = found
        out["in_memory"] = sorted({m.split(".")[0] for m in sys.modules} & {
            "labs", "solutions", "assignments", "grading", "autograde", "tests", "IPython"})
        # the engine's rank side is there (it runs the rank); the grader's side never is
        out["grader_side"] = sorted(m for m in sys.modules if m.startswith("sandbox.")
                                    and not m.startswith(("sandbox.ranks", "sandbox.confined")))
        out["course_visible"] = [p for p in here["paths"] if os.path.exists(p)]
        try:
            os.open("/dev/tty", os.O_RDWR)
            out["tty"] = True
        except OSError:
            out["tty"] = False
        import socket, stat
        kinds = []
        for fd in range(3, 1024):
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode):
                s = socket.socket(fileno=fd)
                if s.family == socket.AF_UNIX:
                    kinds.append("unix socket")
                s.detach()
            elif stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kinds.append(f"file {fd}")
        out["fds"] = kinds
        libc = ctypes.CDLL(None, use_errno=True)
        sig = ctypes.c_int(0)
        libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
        out["pdeathsig"] = sig.value
        out["limits"] = {name: resource.getrlimit(getattr(resource, name))[0]
                         for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE")}
        wrote = {}
        for folder in ("/tmp", "/dev/shm", "/var/tmp", here["host_tmp"]):
            try:
                with open(os.path.join(folder, here["marker"]), "wb") as f:
                    f.write(b"x" * 1000)
                wrote[folder] = True
            except OSError:
                wrote[folder] = False
        out["wrote"] = wrote
        try:
            with open("/tmp/" + here["marker"] + ".big", "wb") as f:
                f.write(b"x" * (here["tmp_mb"] + 8) * 2**20)
            out["tmp_capped"] = False
        except OSError:
            out["tmp_capped"] = True
        ctx.report(out)
''')


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the rank zygote's walls are tested as root (as CI and Gradescope run)")
    if request.param == "namespaces" and not multirank.namespaces_available()[0]:
        pytest.skip("this machine refuses namespaces")
    monkeypatch.setenv("AUTOGRADE_RANK_ISOLATION", request.param)
    return request.param


def probe(mode: str, tmp_path) -> list:
    marker = f"walls-{os.getpid()}-{time.monotonic_ns()}"
    limits = Limits(wall_s=60, tmp_mb=8)
    here = {"paths": [str(ROOT), str(ROOT / "labs"), str(ROOT / "solutions"), str(tmp_path), "/work", "/root"],
            "host_tmp": str(tmp_path), "marker": marker, "tmp_mb": limits.tmp_mb}
    program = RankProgram(modules=(("probe", PROBE),), entry="probe:main")
    result = run_ranks(2, program, [json.dumps(here).encode()] * 2, limits)
    assert result.ok, result.detail
    assert result.isolation == mode
    assert not list(tmp_path.iterdir()) and not Path("/tmp", marker).exists()  # no file left outside
    return [m for ms in result.messages for m in ms]


def test_a_rank_sees_no_course_no_terminal_no_descriptor_and_has_limits(mode, tmp_path):
    for seen in probe(mode, tmp_path):
        assert seen["importable"] == [] and seen["in_memory"] == [] and seen["grader_side"] == [], seen
        assert seen["course_visible"] == [], seen
        assert seen["env"] == [] and seen["tty"] is False and seen["session_leader"] is True
        # one Unix socket, its own to the grader; no file (gloo's TCP sockets and event loops
        # are made by the rank itself, after its walls)
        assert seen["fds"] == ["unix socket"], seen
        assert seen["pdeathsig"] == signal.SIGKILL
        assert seen["uid"] != 0 and seen["euid"] != 0
        assert 0 < seen["limits"]["RLIMIT_CPU"] < 10_000 and seen["limits"]["RLIMIT_CORE"] == 0
        assert 0 < seen["limits"]["RLIMIT_FSIZE"] <= 64 * 2**20 and 0 < seen["limits"]["RLIMIT_NPROC"] < 1000
        assert seen["wrote"][str(tmp_path)] is False and seen["wrote"]["/var/tmp"] is False
        if mode == "namespaces":
            assert seen["wrote"]["/tmp"] and seen["wrote"]["/dev/shm"] and seen["tmp_capped"], seen


LINGER = textwrap.dedent('''
    import os, time

    def main(ctx):
        if os.fork() == 0:
            try:
                os.setsid()
            except OSError:
                pass
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        ctx.report({"pid": os.getpid()})
        time.sleep(600)
''')


def _group_of(zygote_pid: int) -> set:
    return set(multirank._descendants(zygote_pid)) - {zygote_pid}


def test_nothing_a_rank_starts_survives_its_group(mode):
    zygote = multirank.rank_zygote()
    program = RankProgram(modules=(("linger", LINGER),), entry="linger:main")
    result = run_ranks(2, program, [b"", b""], Limits(wall_s=3, stall_s=2))
    assert result.outcome == "timeout", result.detail
    time.sleep(0.5)
    assert _group_of(zygote.process.pid) == set()
    assert not multirank._processes_of(multirank.UID_BASE) or mode == "namespaces"


def test_no_rank_survives_its_grader_killed(mode):
    """A grader running a group whose ranks sleep is SIGKILLed: its zygote, the group and the
    double-forked sleepers all die with it."""
    script = textwrap.dedent(f'''
        import sys, json
        sys.path.insert(0, {str(ROOT)!r})
        from sandbox import multirank
        from sandbox.multirank import Limits, RankProgram, run_ranks
        z = multirank.rank_zygote()
        print(z.process.pid, flush=True)
        run_ranks(2, RankProgram(modules=(("linger", {LINGER!r}),), entry="linger:main"), [b"", b""],
                  Limits(wall_s=600, stall_s=600))
    ''')
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    zygote_pid = int(grader.stdout.readline())
    deadline = time.monotonic() + 60
    while len(_group_of(zygote_pid)) < 4 and time.monotonic() < deadline:  # leader, init, 2 ranks
        time.sleep(0.2)
    group = _group_of(zygote_pid)
    assert len(group) >= 4, group
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 10
    alive = {zygote_pid} | group
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)}
        time.sleep(0.1)
    assert not alive, alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_group_whose_store_port_was_taken_meets_on_another(monkeypatch):
    """On the machine's shared loopback the grader chooses the store's port and rank 0 then
    listens on it; another process may take it in between (seen as rank 1 'hung in
    init_process_group', a hang a student would have been charged with). Nothing of a
    submission runs before the ranks meet, so the grader starts the group again on another
    port; a group that never meets is the grader's failure, said in one line."""
    if os.geteuid() != 0:
        pytest.skip("the uid walls need root (as CI and Gradescope run)")
    monkeypatch.setenv("AUTOGRADE_RANK_ISOLATION", "uid")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)  # accepts connections and never answers, as another program's server would
    real = multirank._free_port
    chosen = []

    def first_one_taken():
        chosen.append(taken.getsockname()[1] if not chosen else real())
        return chosen[-1]

    monkeypatch.setattr(multirank, "_free_port", first_one_taken)
    program = RankProgram(modules=(("met", "def main(ctx):\n    ctx.report({'met': ctx.rank})\n"),), entry="met:main")
    result = run_ranks(2, program, [b""] * 2, Limits(wall_s=60, stall_s=2))
    assert result.ok, result.detail
    assert len(chosen) == 2 and sorted(m.get("met") for ms in result.messages for m in ms if "met" in m) == [0, 1]
    monkeypatch.setattr(multirank, "_free_port", lambda: taken.getsockname()[1])
    with pytest.raises(RuntimeError, match=f"could not meet at the rendezvous in {multirank.RENDEZVOUS_TRIES} tries"):
        run_ranks(2, program, [b""] * 2, Limits(wall_s=60, stall_s=2))
    taken.close()
