"""The red team's attacks on the assignments (issue 31), each graded as the autograder grades
it and held to the exact grade it deserves (``assignment_attacks.py``): the attack earns
nothing, the honest work beside it keeps its points, nothing it leaves outlives its group,
and classmates graded at the same time score what they score alone.

The attacks on the walls run both ways: with namespaces, and as where they are refused
(``AUTOGRADE_RANK_ISOLATION=uid``: Gradescope's case; needs root)."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from assignments.common import grader
from sandbox import multirank
from tests.redteam.assignment_attacks import ATTACKS, ROOT, Attack

pytestmark = pytest.mark.slow
WALLS = {"tiocsti", "survivor", "files", "labs", "master", "echo", "frames", "relay", "backend", "store", "counter-off"}


def modes_for(attack: Attack) -> list:
    return ["namespaces", "uid"] if attack.name in WALLS else ["namespaces"]


@pytest.fixture
def isolation(request, monkeypatch):
    mode = request.param
    if os.geteuid() != 0:
        pytest.skip("the attacks are run as root (as CI and Gradescope run the grader)")
    if mode == "namespaces" and not multirank.namespaces_available()[0]:
        pytest.skip("this machine refuses namespaces")
    monkeypatch.setenv("AUTOGRADE_RANK_ISOLATION", mode)
    return mode


def grade(attack: Attack, folder: Path):
    path = folder / f"{attack.name}{attack.suffix}"
    path.write_text(attack.source(folder), encoding="utf-8")
    options = dict({"world_sizes": (2,), "seeds": (0,), "salt": 5}, **attack.options)
    return grader(attack.assignment).grade_file(path, **options)


CASES = [pytest.param(a, mode, id=f"{a.name}-{mode}") for a in ATTACKS for mode in modes_for(a)]


@pytest.mark.parametrize("attack,isolation", CASES, indirect=["isolation"])
def test_each_attack_earns_exactly_what_it_deserves(attack, isolation, tmp_path):
    markers = [Path(folder, f"left-by-a-rank-{r}") for folder in ("/tmp", "/dev/shm", "/var/tmp", "/") for r in (0, 1)]
    report = grade(attack, tmp_path)
    module = grader(attack.assignment)
    got = {part: t.points for part, t in zip(module.POINTS, report.tests)}
    assert got == attack.points, report.text()
    text = report.text()
    assert all(w in text for w in attack.words), text
    assert not any(a in text for a in attack.absent), text
    time.sleep(1.0 if attack.name == "survivor" else 0)  # the survivor would write after the grade
    assert not (tmp_path / "results.json").exists()
    assert not any(m.exists() for m in markers)


def test_no_keystroke_reaches_the_graders_terminal(tmp_path):
    """The grader runs with a terminal of its own (a pty, its controlling terminal); the
    submission pushes keystrokes into every terminal it can reach (TIOCSTI): none arrives."""
    attack = next(a for a in ATTACKS if a.name == "tiocsti")
    path = tmp_path / "tiocsti.py"
    path.write_text(attack.source(tmp_path), encoding="utf-8")
    master, slave = pty.openpty()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from assignments import a1_ring
        report = a1_ring.grade_file({str(path)!r}, world_sizes=(2,), seeds=(0,))
        sys.stderr.write(str(report.score))
    """)

    def terminal():
        os.setsid()
        import fcntl
        import termios
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    done = subprocess.run([sys.executable, "-c", script], stdin=slave, stdout=slave, stderr=subprocess.PIPE,
                          preexec_fn=terminal, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert done.stderr.decode().strip().endswith("10"), done.stderr.decode()[-2000:]
    os.set_blocking(slave, False)
    typed = b""
    while select.select([slave], [], [], 0.2)[0]:
        try:
            typed += os.read(slave, 4096)
        except OSError:
            break
    os.close(master)
    os.close(slave)
    assert typed == b"", typed


HOG_LIMITS = multirank.Limits(wall_s=6, stall_s=5, cpu_s=12)
HOG = '''
    import threading
    def spin():
        while True:
            pass
    for _ in range(40):
        try:
            threading.Thread(target=spin, daemon=True).start()
        except RuntimeError:
            break
'''

COPY = '''
    import gc, os
    for o in gc.get_objects():
        if isinstance(o, str) and "CLASSMATE-7f3a" in o and "def ring_all_reduce" in o:
            namespace = {}
            exec(o, namespace)
            return namespace["ring_all_reduce"](tensor, op=op)
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"autograde" in f.read():
                    raise SystemError("found the grader")
        except OSError:
            pass
    raise NotImplementedError
'''


SLOTS = '''
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "rank-status" in line or "/dev/shm" in line or "mp-" in line:
                    start, end = (int(x, 16) for x in line.split()[0].split("-"))
                    ctypes.memset(start, 0x7F, end - start)
    except OSError:
        pass
'''


def test_classmates_graded_at_once_score_what_they_score_alone(tmp_path, monkeypatch):
    """Two grading threads (``--jobs 2``): an honest ring beside a classmate whose ranks burn
    every core they can (its groups get a share of the processors like any other, and
    ``HOG_LIMITS`` of time), beside one who looks for the honest code in memory to run it,
    and beside one who overwrites every shared memory it can reach (where the watchdog's
    slots of every group once were). The honest one scores 10 every time; the copier scores
    0; the others are graded on whatever their ranks did (not asserted)."""
    from assignments.a1_ring import reference_source
    from tests.redteam.assignment_attacks import ring

    monkeypatch.setenv("AUTOGRADE_RANK_ISOLATION", "auto")
    honest = tmp_path / "honest.py"
    honest.write_text("# CLASSMATE-7f3a\n" + reference_source(), encoding="utf-8")
    hog, copier, slots = tmp_path / "hog.py", tmp_path / "copier.py", tmp_path / "slots.py"
    hog.write_text(ring(HOG), encoding="utf-8")
    copier.write_text(ring(COPY), encoding="utf-8")
    slots.write_text(ring(SLOTS), encoding="utf-8")
    from assignments import a1_ring

    for other, deserved in ((hog, None), (copier, 0), (slots, None)):
        scores = {}

        def run(path):
            limits = HOG_LIMITS if path == hog else None
            scores[path.name] = a1_ring.grade_file(path, world_sizes=(2, 4), seeds=(0,), limits=limits).score

        threads = [threading.Thread(target=run, args=(p,)) for p in (honest, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert scores["honest.py"] == 10, scores
        assert deserved is None or scores[other.name] == deserved, scores
